/** Qwen3.5 → MIL graph builders for the ANE decode chain (embed · super-blocks · lm_head). */
export * from "./ane.js";
export {
  ATTENTION_CORES,
  ATTENTION_FORMS,
  type AttentionCore,
  type AttentionForm,
  type AttentionStep,
  applyRope,
  attentionLayer,
  type KvCache,
  type RopeRow,
  ropeSpec,
  ropeTables,
} from "./attention.js";
export {
  assertConvertible,
  type BuiltComponent,
  buildComponent,
  DECODE_FUNCTION,
  PREFILL_FUNCTION,
} from "./component.js";
export { buildEmbed } from "./embed.js";
export { AneLimitError, GraphOptionError, UnsupportedModelError } from "./errors.js";
export { type GdnStateIn, type GdnStep, gdnLayer } from "./gdn.js";
export {
  DEFAULT_WY_CHUNK,
  GDN_PREFILL_FORMS,
  type GdnChunkInputs,
  type GdnPrefillForm,
  gdnChunkLayer,
} from "./gdn-chunked.js";
export * from "./io.js";
export { checkAneLimits } from "./limits.js";
export { buildLmHead } from "./lm-head.js";
export { mlp } from "./mlp.js";
export { rmsNorm1p, zeroCentredGain } from "./norms.js";
export {
  type BuildOptions,
  type ComponentSpec,
  DEFAULT_LM_HEAD_MAX_ROWS,
  type ResolvedOptions,
  resolveOptions,
} from "./options.js";
export { attentionChunkLayer } from "./prefill-attention.js";
export * from "./quant.js";
export {
  buildSuperblocks,
  decoderLayer,
  type PrefillShape,
  ropeInputs,
  type StepInputs,
  type StepOutputs,
  superblock,
} from "./superblock.js";
export {
  type EncodedWeight,
  type EncodedWeightStore,
  GraphWeights,
  type GraphWeightsOptions,
  milName,
  rowsFloat32,
  WeightEncodingError,
  type WeightEncodingReport,
  type WeightSource,
} from "./weights.js";
