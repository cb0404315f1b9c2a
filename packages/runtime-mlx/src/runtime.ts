/** Evaluation, memory counters and devices. */
import { native } from "./native.js";
import { collectArrays } from "./tidy.js";

/**
 * Computes every MxArray found in the arguments (arrays, lists, object trees), blocking the JS thread.
 * Prefer `asyncEval` for anything that takes long.
 */
export function evaluate(...values: unknown[]): void {
  native().eval([...collectArrays(values)]);
}

/**
 * Schedules every MxArray in the arguments and resolves when all are computed, without blocking the
 * event loop (MLX runs on its own threads; a libuv worker waits). Rejects with MlxError on failure.
 */
export function asyncEval(...values: unknown[]): Promise<void> {
  return native().asyncEval([...collectArrays(values)]);
}

export interface MemoryStats {
  /** Bytes held by live MLX buffers. */
  active: number;
  /** Highest `active` since start or the last resetPeakMemory(). */
  peak: number;
  /** Bytes of freed buffers MLX keeps for reuse. */
  cache: number;
}

export function memoryStats(): MemoryStats {
  const n = native();
  return { active: n.getActiveMemory(), peak: n.getPeakMemory(), cache: n.getCacheMemory() };
}

export const getActiveMemory = (): number => native().getActiveMemory();
export const getPeakMemory = (): number => native().getPeakMemory();
export const getCacheMemory = (): number => native().getCacheMemory();
export const resetPeakMemory = (): void => native().resetPeakMemory();
/** Frees MLX's buffer cache. */
export const clearCache = (): void => native().clearCache();
export const getMemoryLimit = (): number => native().getMemoryLimit();
/** Each setter returns the previous limit in bytes. */
export const setCacheLimit = (bytes: number): number => native().setCacheLimit(bytes);
export const setMemoryLimit = (bytes: number): number => native().setMemoryLimit(bytes);
/** Metal only: bytes kept resident (mlx-lm sets it to max_recommended_working_set_size while generating). */
export const setWiredLimit = (bytes: number): number => native().setWiredLimit(bytes);

/** True when MLX has a Metal GPU (macOS on Apple silicon). */
export const metalAvailable = (): boolean => native().metalAvailable();
export const defaultDevice = (): "cpu" | "gpu" => native().defaultDevice();
/** Selects where new ops run. MLX starts on the GPU when Metal is available, else on the CPU. */
export const setDefaultDevice = (device: "cpu" | "gpu"): void => native().setDefaultDevice(device);
export const deviceInfo = (device?: "cpu" | "gpu"): Record<string, string | number> =>
  native().deviceInfo(device);
/** Waits until all scheduled work on the default stream is done. */
export const synchronize = (): void => native().synchronize();
/**
 * Turns mx::compile on or off. On Linux the compiled CPU kernels are built with g++ from PATH on first
 * use (seconds, cached under $TMPDIR/mlx); off, the fused steps run as plain ops.
 */
export const setCompileEnabled = (enabled: boolean): void => native().setCompileEnabled(enabled);

/** The libmlx version the addon loaded (equal to the headers it was built with, or it refuses to load). */
export const mlxVersion = (): string => native().mlxVersion;
