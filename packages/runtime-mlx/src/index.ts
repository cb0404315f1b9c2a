/**
 * @anemll-qwen35/runtime-mlx: Qwen3.5 (dense and MoE) on MLX (Metal GPU on macOS, CPU on Linux)
 * through a native addon over MLX's C++ API: the array layer (`mx`) and the model (`loadMlxModel`).
 */
export {
  MlxDisposedError,
  MlxError,
  MlxModelLoadError,
  MlxUnavailableError,
  ModelDisposedError,
  RuntimeMlxError,
} from "./errors.js";
export { MlxLayerPrefix } from "./layer-prefix.js";
export * as mx from "./mlx.js";
export type { LoadMlxModelOptions } from "./mlx-qwen35.js";
export { loadMlxModel, MlxQwen35, ModelBusyError } from "./mlx-qwen35.js";
export type { Dtype, MxArray, MxTypedArray } from "./native.js";
export { addonPath, mlxAvailable } from "./native.js";
export type { CheckpointFormat } from "./qwen35/checkpoint.js";
export type { SaveMlxOptions } from "./save-mlx.js";
export { saveMlxCheckpoint } from "./save-mlx.js";
