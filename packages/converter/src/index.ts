/**
 * @anemll-qwen35/converter: Qwen3.5 checkpoints → Core ML packages for the Apple Neural Engine.
 * The public names, by what a user does with them. The graph builders and the other internals
 * are behind the `@anemll-qwen35/converter/graph` subpath (tests, benchmarks, tools).
 */

// ---- Converting a checkpoint: convert(options) → a folder runtime-ane runs
export { type ConvertResult, convert } from "./convert.js";
// ---- What can go wrong (every error is an AnemllError with a code)
export {
  AneLimitError,
  ConvertInterruptedError,
  ConvertOptionError,
  GraphOptionError,
  UnsupportedModelError,
  WeightEncodingError,
} from "./errors.js";
export { CONVERTER_VERSION } from "./manifest.js";
// ---- How weights are stored: a quantization policy (text or rules) and the plan it gives a model
export {
  type ConvertOptions,
  type ConvertProgress,
  DEFAULT_CTX,
  DEFAULT_PREFILL_BATCH,
  MAX_CTX,
  MIN_CTX,
  resolveQuantSpec,
} from "./options.js";
export { OutputError } from "./output.js";
// ---- The packages a conversion writes, and their estimated sizes
export { type PlannedComponent, type PlanOptions, planComponents } from "./plan.js";
// ---- LUT palettization on its own (k-means per group of output channels, on a worker pool)
export { KmeansPool } from "./quant/kmeans-pool.js";
export {
  type LutBits,
  type Palettized,
  type PalettizeInput,
  type PalettizeOptions,
  palettize,
} from "./quant/palettize.js";
export {
  type PlannedTensor,
  planQuant,
  type QuantPlan,
  type TensorEncoding,
} from "./quant/plan.js";
export {
  DEFAULT_LUT_GROUP_SIZE,
  DEFAULT_QUANT_RULES,
  formatQuantSpec,
  formatWeightQuant,
  parseQuantSpec,
  parseWeightQuant,
  QUANT_PRESETS,
  type QuantPolicy,
  type QuantRule,
  type QuantSpec,
  specRules,
  type WeightQuant,
} from "./quant/policy.js";
// ---- A Qwen3.5-VL checkpoint → its text model
export { type StripVlOptions, type StripVlResult, stripVl } from "./strip-vl.js";
export { TokenizerCheckError } from "./tokenizer-check.js";
