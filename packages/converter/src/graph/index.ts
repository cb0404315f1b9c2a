/** Qwen3.5 → MIL graph builders for the ANE decode chain (embed · super-blocks · lm_head). */

export {
  type BuildOptions,
  type ComponentSpec,
  DEFAULT_LM_HEAD_MAX_ROWS,
  type ResolvedOptions,
  resolveBuildOptions,
} from "../options.js";
export { type EncodedWeight, rowsFloat32 } from "../quant/encode.js";
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
export { attentionChunkLayer } from "./prefill-attention.js";
export { buildSuperblocks, decoderLayer, superblock } from "./superblock.js";
export {
  type PrefillShape,
  ropeInputs,
  type StepInputs,
  type StepOutputs,
  SuperblockIO,
} from "./superblock-io.js";
export {
  type EncodedWeightStore,
  GraphWeights,
  type GraphWeightsOptions,
  milName,
  type WeightEncodingReport,
  type WeightSource,
} from "./weights.js";
