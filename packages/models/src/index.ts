/**
 * @anemll-qwen35/models: loadModel(ref, options) — the one way to open a Qwen3.5 model, a converted
 * chain (Core ML on the ANE, or the reference interpreter) or a checkpoint (MLX), with its
 * tokenizer, chat template and sampling defaults, ready to generate.
 */

// Loading a model
export { type BackendInfo, type LoadedModel, loadModel, speculationDefaults } from "./load.js";
export type { LoadModelOptions, LoadProgress } from "./load-options.js";
export { ModelLoadError } from "./errors.js";

// A chain checked against the checkpoint it was converted from, run on MLX in float32
export {
  DEFAULT_MAX_DRIFT,
  type MlxVerifyReport,
  type SuperBlockDrift,
  VERIFY_PROMPTS,
  type VerifyAgainstMlxOptions,
  verifyAgainstMlx,
} from "./verify-mlx.js";

// The backends, and which one "auto" picks for a folder
export { type BackendChoice, type BackendName, chooseBackend, type ModelKind } from "./backend.js";

// Sampling: greedy is the only choice for an argmax-only head
export { withTop1Default } from "./generation.js";

// The ranks after the first of a model split across machines (LoadModelOptions.distributed)
export { runModelRank } from "./mlx.js";
