/**
 * The MLX array API in one namespace: `import { mx } from "@anemll-qwen35/runtime-mlx"`, then
 * `mx.array(...)`, `mx.matmul(a, b)`, `mx.tidy(() => ...)`, `await mx.asyncEval(y)`.
 */

export type { ArrayData, DtypeLike, NestedNumbers } from "./array.js";
export { arange, array, full, ones, toDtype, toFloat32Array, zeros } from "./array.js";
export * from "./fused.js";
export * from "./io.js";
export type { ArrayOrScalar, Dtype, MxArray, MxTypedArray } from "./native.js";
export { isMxArray } from "./native.js";
export * from "./ops.js";
export type { MemoryStats } from "./runtime.js";
export {
  asyncEval,
  clearCache,
  defaultDevice,
  deviceInfo,
  evaluate as eval,
  evaluate,
  getActiveMemory,
  getCacheMemory,
  getMemoryLimit,
  getPeakMemory,
  memoryStats,
  metalAvailable,
  mlxVersion,
  resetPeakMemory,
  setCacheLimit,
  setCompileEnabled,
  setDefaultDevice,
  setMemoryLimit,
  setWiredLimit,
  synchronize,
} from "./runtime.js";
export { dispose, keep, tidy } from "./tidy.js";
