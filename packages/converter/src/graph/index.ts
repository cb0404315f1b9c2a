/**
 * @anemll-qwen35/converter/graph: the Qwen3.5 → MIL graph builders behind convert() (embed ·
 * super-blocks · lm_head), for tests, benchmarks and tools that build or inspect one component
 * themselves. Internals: names may change with the converter's version.
 */
// biome-ignore-all assist/source/organizeImports: the names are grouped by use, not sorted by file

// ---- One component of the chain: buildComponent(source, spec, options) → { model, io }
export {
  assertConvertible,
  type BuiltComponent,
  buildComponent,
  DECODE_FUNCTION,
  PREFILL_FUNCTION,
} from "./component.js";
export {
  type BuildOptions,
  type ComponentSpec,
  DEFAULT_LM_HEAD_MAX_ROWS,
  type ResolvedOptions,
  resolveBuildOptions,
} from "../options.js";
export { checkAneLimits } from "./limits.js";

// ---- The piece split (the interface, ComponentIO and its roles, is ir/chain's, where runtimes read it)
export { planPieces } from "./io.js";

// ---- The model, one function per block
export { buildEmbed } from "./embed.js";
export { buildSuperblocks, decoderLayer, superblock } from "./superblock.js";
export {
  type PrefillShape,
  ropeInputs,
  type StepInputs,
  type StepOutputs,
  SuperblockIO,
} from "./superblock-io.js";
export { type GdnStateIn, type GdnStep, gdnLayer } from "./gdn.js";
export {
  DEFAULT_WY_CHUNK,
  GDN_PREFILL_FORMS,
  type GdnChunkInputs,
  type GdnPrefillForm,
  gdnChunkLayer,
} from "./gdn-chunked.js";
export {
  ATTENTION_CORES,
  ATTENTION_FORMS,
  type AttentionCore,
  type AttentionForm,
  type AttentionInputs,
  type AttentionStep,
  applyRope,
  attentionLayer,
  type KvCache,
  type RopeRow,
  ropeSpec,
  ropeTables,
} from "./attention.js";
export { attentionChunkLayer } from "./prefill-attention.js";
export { mlp } from "./mlp.js";
export { rmsNorm1p, zeroCentredGain } from "./norms.js";
export { buildLmHead } from "./lm-head.js";

// ---- The ANE tricks, each a named helper with its reason (ane.ts)
export { ANE_MAX_DIM, GDN_Q_SCALE, GDN_V_SCALE, MASK_NEG } from "./ane.js";
export { conv1x1, repeatInterleaveHeads, rmsNormAne, siluTanh, softplusStable } from "./ane.js";

// ---- Weights into the graph: checkpoint tensor → MIL constant, encoded as the quantization plan says
export {
  type EncodedWeightStore,
  GraphWeights,
  type GraphWeightsOptions,
  milName,
  type WeightEncodingReport,
  type WeightSource,
} from "./weights.js";
export { type EncodedWeight, rowsFloat32 } from "../quant/encode.js";
