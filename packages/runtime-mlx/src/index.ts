/**
 * @anemll-qwen35/runtime-mlx: Qwen3.5 (dense and MoE) on MLX (Metal GPU on macOS, CPU on Linux)
 * through a native addon over MLX's C++ API: the model (`loadMlxModel`), the array layer (`mx`),
 * and a model split across machines (MLX distributed, pipeline parallel).
 */

// The model: a Qwen3.5 checkpoint on MLX, a generate StepModel
export {
  type DistributedOptions,
  type LoadMlxModelOptions,
  loadMlxModel,
  MlxQwen35,
  ModelBusyError,
} from "./mlx-qwen35.js";
export type { CheckpointFormat } from "./qwen35/checkpoint.js";
export { MlxLayerPrefix } from "./layer-prefix.js";
export { type MlxTrace, traceMlx } from "./trace.js";
export { type SaveMlxOptions, saveMlxCheckpoint } from "./save-mlx.js";

// The array layer, and whether the addon (and MLX) loaded here
export * as mx from "./mlx.js";
export { addonPath, type Dtype, type MxArray, type MxTypedArray, mlxAvailable } from "./native.js";

// Across several machines: hostfiles, the launcher, rank 0's group and the other ranks' worker
export {
  DEFAULT_STARTING_PORT,
  type Host,
  type Hostfile,
  hostsFromList,
  isWildcardAddress,
  MAX_RANKS,
  MAX_RANKS_PER_HOST,
  parseHostfile,
  readHostfile,
  readRingHostfile,
  type RingOptions,
  ringAddresses,
} from "./distributed/hostfile.js";
export {
  type LaunchedJob,
  type LaunchedRank,
  type LaunchOptions,
  launchRing,
  type RankExit,
} from "./distributed/launch.js";
export {
  DEFAULT_JOIN_TIMEOUT_MS,
  type DistributedBackend,
  DistributedGroup,
  type JoinOptions,
  joinGroup,
  launchedRank,
} from "./distributed/group.js";
export { attachToLauncher } from "./distributed/launcher-link.js";
export { DEFAULT_STEP_TIMEOUT_MS } from "./distributed/pipeline.js";
export {
  type LayerRange,
  planSplit,
  splitFromCounts,
  type WeightBytes,
  weightBytes,
} from "./distributed/split.js";
export { runMlxWorker, type WorkerStats } from "./distributed/worker.js";

// Errors
export {
  DistributedError,
  HostfileError,
  MlxDisposedError,
  MlxError,
  MlxModelLoadError,
  MlxUnavailableError,
  ModelDisposedError,
  RuntimeMlxError,
} from "./errors.js";
