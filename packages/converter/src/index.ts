/**
 * @anemll-qwen35/converter: Qwen3.5 checkpoints → Core ML packages for the Apple Neural Engine.
 * The public names, grouped by what a user does with them. The graph builders and the other
 * internals are behind the `@anemll-qwen35/converter/graph` subpath (tests, benchmarks, tools).
 */
// biome-ignore-all assist/source/organizeImports: the names are grouped by use, not sorted by file

// ---- Converting a checkpoint: convert(options) → a folder runtime-ane runs (README: Converting)
export { type ConvertResult, convert } from "./convert.js";
export {
  type ConvertOptions,
  type ConvertProgress,
  DEFAULT_CTX,
  DEFAULT_PREFILL_BATCH,
  defaultBuckets,
  MAX_CTX,
  MIN_CTX,
} from "./options.js";
export { CONVERTER_VERSION } from "./manifest.js";

// ---- What can go wrong: each an AnemllError with its code, naming the option, file or tensor
export {
  AneLimitError,
  ConvertInterruptedError,
  ConvertOptionError,
  GraphOptionError,
  UnsupportedModelError,
  WeightEncodingError,
} from "./errors.js";
export { OutputError } from "./output.js";
export { TokenizerCheckError } from "./tokenizer-check.js";

// ---- How weights are stored: a policy (a preset and pattern=encoding rules) and the plan it gives a model
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
export { resolveQuantSpec } from "./options.js";
export { type PlannedTensor, planQuant, type QuantPlan, type TensorEncoding } from "./quant/plan.js";

// ---- The packages a conversion writes, and their estimated sizes
export { type PlannedComponent, type PlanOptions, planComponents } from "./plan.js";

// ---- LUT palettization on its own (k-means per group of output channels, on a worker pool)
export {
  type LutBits,
  type Palettized,
  type PalettizeInput,
  type PalettizeOptions,
  palettize,
} from "./quant/palettize.js";
export { KmeansPool } from "./quant/kmeans-pool.js";

// ---- A Qwen3.5-VL checkpoint → its text model
export { type StripVlOptions, type StripVlResult, stripVl } from "./strip-vl.js";
