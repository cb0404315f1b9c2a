/**
 * @anemll-qwen35/runtime-ane: runs a converted chain one token at a time over a backend — Core ML
 * on the Apple Neural Engine (macOS 15+), or the reference interpreter running the same MIL on any
 * OS. ChainRunner is a generate StepModel; loadModel (@anemll-qwen35/models) is the usual way in.
 */

// The runner: a chain folder (model.json + packages) as a StepModel
export {
  ChainLoadError,
  ChainRunner,
  type ContextOverflow,
  type LoadChainOptions,
  PositionLimitError,
} from "./chain-runner.js";

// The prefill check at first load: where the functions run and whether prefill beats decode
export type { FunctionPlacement, PrefillDecision } from "./function-check.js";
export type {
  FunctionCheckSeam,
  PrefillCheckMode,
  PrefillCheckResult,
} from "./prefill-check.js";

// The two backends
export { type CoreMLBackendOptions, coreMLBackend } from "./coreml-backend.js";
export { type ReferenceBackendOptions, referenceBackend } from "./reference-backend.js";

// What a backend implements (to wrap one: timing, tracing), and the transfers it counts
export type {
  Backend,
  ComponentState,
  LoadComponentOptions,
  LoadedComponent,
  TransferStats,
} from "./backend.js";

// Bytes per token between host and backend, computed from model.json
export { type TransferEstimate, transferPerToken } from "./transfers.js";
