/**
 * @anemll-qwen35/runtime-mlx: Qwen3.5 (dense and MoE) on MLX (Metal GPU on macOS, CPU on Linux)
 * through a native addon over MLX's C++ API: the array layer (`mx`) and the model (`loadMlxModel`).
 */
export type { DistributedBackend, JoinOptions } from "./distributed/group.js";
export { DEFAULT_JOIN_TIMEOUT_MS, DistributedGroup, joinGroup, launchedRank } from "./distributed/group.js";
export type { Host, Hostfile, RingOptions } from "./distributed/hostfile.js";
export {
  DEFAULT_STARTING_PORT,
  hostsFromList,
  isWildcardAddress,
  MAX_RANKS,
  MAX_RANKS_PER_HOST,
  parseHostfile,
  readHostfile,
  readRingHostfile,
  ringAddresses,
} from "./distributed/hostfile.js";
export type { LaunchedJob, LaunchedRank, LaunchOptions, RankExit } from "./distributed/launch.js";
export { launchRing } from "./distributed/launch.js";
export { attachToLauncher } from "./distributed/launcher-link.js";
export { DEFAULT_STEP_TIMEOUT_MS } from "./distributed/pipeline.js";
export type { LayerRange, WeightBytes } from "./distributed/split.js";
export { planSplit, splitFromCounts, weightBytes } from "./distributed/split.js";
export type { WorkerStats } from "./distributed/worker.js";
export { runMlxWorker } from "./distributed/worker.js";
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
export { MlxLayerPrefix } from "./layer-prefix.js";
export * as mx from "./mlx.js";
export type { DistributedOptions, LoadMlxModelOptions } from "./mlx-qwen35.js";
export { loadMlxModel, MlxQwen35, ModelBusyError } from "./mlx-qwen35.js";
export type { Dtype, MxArray, MxTypedArray } from "./native.js";
export { addonPath, mlxAvailable } from "./native.js";
export type { CheckpointFormat } from "./qwen35/checkpoint.js";
export type { SaveMlxOptions } from "./save-mlx.js";
export { saveMlxCheckpoint } from "./save-mlx.js";
