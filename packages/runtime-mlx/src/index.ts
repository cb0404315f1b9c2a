/**
 * @anemll-qwen35/runtime-mlx: MLX (Metal GPU on macOS, CPU on Linux) through a native addon over
 * MLX's C++ API. This first part is the array layer; the Qwen3.5 model port builds on it.
 */
export { MlxDisposedError, MlxError, MlxUnavailableError, RuntimeMlxError } from "./errors.js";
export * as mx from "./mlx.js";
export type { Dtype, MxArray, MxTypedArray } from "./native.js";
export { addonPath, mlxAvailable } from "./native.js";
