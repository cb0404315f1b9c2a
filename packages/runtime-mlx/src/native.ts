/**
 * Loading the native addon (build/Release/runtime_mlx.node) and its raw, positional API.
 * Everything else in this package goes through `native()`, which throws MlxUnavailableError with the
 * reason and the fix when the addon is missing or cannot load.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { inspect } from "node:util";
import { MlxDisposedError, MlxError, MlxUnavailableError } from "./errors.js";

/** MLX dtypes this package exposes. fp16/bf16 data cross the boundary as Uint16Array bit patterns. */
export type Dtype =
  | "float32"
  | "float16"
  | "bfloat16"
  | "int8"
  | "uint8"
  | "int16"
  | "uint16"
  | "int32"
  | "uint32"
  | "int64"
  | "uint64"
  | "bool";

export type MxTypedArray =
  | Float32Array
  | Uint16Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array;

/**
 * A handle on one MLX array (lazy: a node of MLX's graph until evaluated).
 * Release it with `dispose()` (or `using`, or `tidy`); the GC finalizer is only a backstop.
 */
export interface MxArray extends Disposable {
  readonly shape: number[];
  readonly dtype: Dtype;
  readonly size: number;
  readonly ndim: number;
  readonly nbytes: number;
  /** True after dispose(); any other use then throws MlxDisposedError. */
  readonly disposed: boolean;
  /** Evaluates and copies the data out (row-major). float16/bfloat16 come back as Uint16Array bits. */
  toTypedArray(): MxTypedArray;
  /** Evaluates a one-element array and returns its value. */
  item(): number | boolean;
  /** Drops this handle now. Idempotent. */
  dispose(): void;
}

export type ArrayOrScalar = MxArray | number | boolean;
type A = MxArray;
type Opt<T> = T | undefined | null;

/** The addon's exports, one positional function per MLX call (see native/*.cc). */
export interface NativeBinding {
  readonly MxArray: abstract new () => MxArray;
  readonly mlxVersion: string;
  readonly headerVersion: string;
  readonly builtAgainst: string;
  setErrorClasses(
    mlxError: new (message: string) => Error,
    disposedError: new (message: string) => Error,
  ): void;

  fromBuffer(data: ArrayBufferView, shape: number[], dtype: Dtype): A;
  full(shape: number[], value: number, dtype: Dtype): A;
  arange(start: number, stop: number, step: number, dtype: Dtype): A;

  abs(a: A): A;
  negative(a: A): A;
  exp(a: A): A;
  log(a: A): A;
  log1p(a: A): A;
  sigmoid(a: A): A;
  tanh(a: A): A;
  sqrt(a: A): A;
  rsqrt(a: A): A;
  square(a: A): A;
  reciprocal(a: A): A;
  sin(a: A): A;
  cos(a: A): A;
  floor(a: A): A;
  ceil(a: A): A;
  erf(a: A): A;
  logicalNot(a: A): A;
  silu(a: A): A;
  softplus(a: A): A;
  contiguous(a: A): A;

  add(a: ArrayOrScalar, b: ArrayOrScalar): A;
  subtract(a: ArrayOrScalar, b: ArrayOrScalar): A;
  multiply(a: ArrayOrScalar, b: ArrayOrScalar): A;
  divide(a: ArrayOrScalar, b: ArrayOrScalar): A;
  power(a: ArrayOrScalar, b: ArrayOrScalar): A;
  maximum(a: ArrayOrScalar, b: ArrayOrScalar): A;
  minimum(a: ArrayOrScalar, b: ArrayOrScalar): A;
  logaddexp(a: ArrayOrScalar, b: ArrayOrScalar): A;
  remainder(a: ArrayOrScalar, b: ArrayOrScalar): A;
  floorDivide(a: ArrayOrScalar, b: ArrayOrScalar): A;
  equal(a: ArrayOrScalar, b: ArrayOrScalar): A;
  notEqual(a: ArrayOrScalar, b: ArrayOrScalar): A;
  greater(a: ArrayOrScalar, b: ArrayOrScalar): A;
  greaterEqual(a: ArrayOrScalar, b: ArrayOrScalar): A;
  less(a: ArrayOrScalar, b: ArrayOrScalar): A;
  lessEqual(a: ArrayOrScalar, b: ArrayOrScalar): A;
  logicalAnd(a: ArrayOrScalar, b: ArrayOrScalar): A;
  logicalOr(a: ArrayOrScalar, b: ArrayOrScalar): A;
  matmul(a: A, b: A): A;

  sum(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  mean(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  max(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  min(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  prod(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  logsumexp(a: A, axes?: Opt<number | number[]>, keepdims?: boolean): A;
  argmax(a: A, axis?: Opt<number>, keepdims?: boolean): A;
  argmin(a: A, axis?: Opt<number>, keepdims?: boolean): A;
  softmax(a: A, axes?: Opt<number | number[]>, precise?: boolean): A;
  cumsum(a: A, axis: number, reverse?: boolean, inclusive?: boolean): A;

  reshape(a: A, shape: number[]): A;
  transpose(a: A, axes?: Opt<number[]>): A;
  expandDims(a: A, axes: number | number[]): A;
  squeeze(a: A, axes?: Opt<number | number[]>): A;
  flatten(a: A, startAxis?: number, endAxis?: number): A;
  broadcastTo(a: A, shape: number[]): A;
  astype(a: A, dtype: Dtype): A;
  concatenate(arrays: A[], axis?: number): A;
  stack(arrays: A[], axis?: number): A;
  split(a: A, sectionsOrIndices: number | number[], axis?: number): A[];
  slice(a: A, start: number[], stop: number[], strides?: Opt<number[]>): A;
  sliceUpdate(src: A, update: A, start: number[], stop: number[], strides?: Opt<number[]>): A;
  take(a: A, indices: A | number, axis?: Opt<number>): A;
  takeAlongAxis(a: A, indices: A, axis: number): A;
  where(condition: A, x: ArrayOrScalar, y: ArrayOrScalar): A;
  repeat(a: A, repeats: number, axis?: Opt<number>): A;
  topk(a: A, k: number, axis?: number): A;
  argpartition(a: A, kth: number, axis?: number): A;
  argsort(a: A, axis?: number): A;
  sort(a: A, axis?: number): A;

  quantize(w: A, groupSize?: Opt<number>, bits?: Opt<number>, mode?: string): A[];
  dequantize(
    wq: A,
    scales: A,
    biases: Opt<A>,
    groupSize?: Opt<number>,
    bits?: Opt<number>,
    mode?: string,
    dtype?: Opt<Dtype>,
  ): A;
  quantizedMatmul(
    x: A,
    wq: A,
    scales: A,
    biases: Opt<A>,
    transpose?: boolean,
    groupSize?: Opt<number>,
    bits?: Opt<number>,
    mode?: string,
  ): A;
  gatherMm(a: A, b: A, lhsIndices?: Opt<A>, rhsIndices?: Opt<A>, sortedIndices?: boolean): A;
  gatherQmm(
    x: A,
    wq: A,
    scales: A,
    biases: Opt<A>,
    lhsIndices: Opt<A>,
    rhsIndices: Opt<A>,
    transpose: boolean,
    groupSize: Opt<number>,
    bits: Opt<number>,
    mode: string,
    sortedIndices: boolean,
  ): A;
  conv1d(x: A, w: A, stride?: number, padding?: number, dilation?: number, groups?: number): A;

  rmsNorm(x: A, weight: Opt<A>, eps: number): A;
  layerNorm(x: A, weight: Opt<A>, bias: Opt<A>, eps: number): A;
  rope(
    x: A,
    dims: number,
    traditional: boolean,
    base: Opt<number>,
    scale: number,
    offset: number | A,
    freqs?: Opt<A>,
  ): A;
  scaledDotProductAttention(q: A, k: A, v: A, scale: number, mask?: Opt<"causal" | A>, sinks?: Opt<A>): A;

  randomSeed(seed: number): void;
  randomCategorical(logits: A, axis?: number, numSamples?: Opt<number>): A;
  randomUniform(shape: number[], dtype?: Opt<Dtype>, low?: number, high?: number): A;
  randomNormal(shape: number[], dtype?: Opt<Dtype>, loc?: number, scale?: number): A;

  gatedDeltaStep(q: A, k: A, v: A, g: A, beta: A, state: A, mask?: Opt<A>): [A, A];
  gatedDeltaPrefill(q: A, k: A, v: A, g: A, beta: A, state?: Opt<A>, mask?: Opt<A>): [A, A];
  gatedDeltaUpdate(q: A, k: A, v: A, g: A, beta: A, state?: Opt<A>, mask?: Opt<A>): [A, A];
  gatedRmsNorm(x: A, weight: Opt<A>, z: A, eps: number): A;
  swiglu(gate: A, x: A): A;
  computeG(aLog: A, a: A, dtBias: A): A;

  linear(x: A, w: A): A;
  quantizedLinear(x: A, wq: A, scales: A, biases: A, bits: number, groupSize: number): A;
  gatherLinear(
    x: A,
    w: A,
    scales: Opt<A>,
    biases: Opt<A>,
    indices: A,
    bits: number,
    groupSize: number,
    rowsPerX: number,
  ): A;
  cpuKernelThreads(): number;
  setCpuKernelsEnabled(enabled: boolean): boolean;

  loadSafetensors(path: string): { arrays: Record<string, A>; metadata: Record<string, string> };
  saveSafetensors(path: string, arrays: Record<string, A>, metadata?: Record<string, string>): void;

  eval(arrays: A[]): void;
  asyncEval(arrays: A[]): Promise<void>;
  schedule(arrays: A[]): void;
  evalDetached(arrays: A[]): Promise<void>;
  newStream(device: "cpu" | "gpu"): number;
  defaultStream(device: "cpu" | "gpu"): number;
  setDefaultStream(index: number, device: "cpu" | "gpu"): void;

  distributedAvailable(backend?: string): boolean;
  distributedInit(backend: string): Promise<{ rank: number; size: number }>;
  distributedGroup(): { rank: number; size: number } | null;
  distributedSend(x: A, dst: number): A;
  distributedRecv(shape: number[], dtype: Dtype, src: number): A;
  distributedAllSum(x: A): A;
  distributedAllGather(x: A): A;
  distributedWaitReadable(ports: number[], timeoutMs: number): Promise<boolean | null>;
  getActiveMemory(): number;
  getPeakMemory(): number;
  resetPeakMemory(): void;
  getCacheMemory(): number;
  clearCache(): void;
  getMemoryLimit(): number;
  setCacheLimit(bytes: number): number;
  setMemoryLimit(bytes: number): number;
  setWiredLimit(bytes: number): number;
  metalAvailable(): boolean;
  defaultDevice(): "cpu" | "gpu";
  setDefaultDevice(device: "cpu" | "gpu"): void;
  deviceInfo(device?: "cpu" | "gpu"): Record<string, string | number>;
  synchronize(): void;
  setCompileEnabled(enabled: boolean): void;
}

const ADDON_FILE = "runtime_mlx.node";
// The package's own build script, where this copy is installed (npm, or the repository's workspace)
const BUILD_SCRIPT = fileURLToPath(new URL("../native/build.mjs", import.meta.url));
const BUILD_FIX =
  'Install MLX 0.32.x (Linux: pip install "mlx[cpu]==0.32.4"; macOS: pip install mlx==0.32.4), then build ' +
  `the addon: \`node ${BUILD_SCRIPT}\` (set MLX_ROOT or ANEMLL_PYTHON if MLX is not in python3 or the ` +
  "repository's .venv; in the repository, `pnpm --filter @anemll-qwen35/runtime-mlx build:native` does the same).";

/** Where the addon is looked for: $ANEMLL_MLX_ADDON, else <package>/build/Release/runtime_mlx.node. */
export function addonPath(): string {
  // src/ (tests) and dist/ (the bundle) both sit one level below the package root.
  return (
    process.env.ANEMLL_MLX_ADDON ?? fileURLToPath(new URL(`../build/Release/${ADDON_FILE}`, import.meta.url))
  );
}

let binding: NativeBinding | undefined;
let loadError: MlxUnavailableError | undefined;

function unavailable(path: string, cause: unknown): MlxUnavailableError {
  const text = cause instanceof Error ? cause.message : String(cause);
  if (/built against MLX/.test(text)) {
    return new MlxUnavailableError(`version mismatch (${text})`, BUILD_FIX, { cause });
  }
  if (/libmlx|cannot open shared object|Library not loaded|image not found/i.test(text)) {
    return new MlxUnavailableError(
      `the addon at ${path} is built but libmlx could not be loaded (was the Python environment that held MLX moved or removed?): ${text}`,
      BUILD_FIX,
      { cause },
    );
  }
  return new MlxUnavailableError(`the addon at ${path} failed to load: ${text}`, BUILD_FIX, { cause });
}

function load(): NativeBinding {
  if (loadError) throw loadError;
  const path = addonPath();
  if (!existsSync(path)) {
    loadError = new MlxUnavailableError(`the native addon is not built (no ${path})`, BUILD_FIX);
    throw loadError;
  }
  let loaded: NativeBinding;
  try {
    loaded = createRequire(import.meta.url)(path) as NativeBinding;
  } catch (cause) {
    loadError = unavailable(path, cause);
    throw loadError;
  }
  if (typeof loaded?.setErrorClasses !== "function" || typeof loaded.MxArray !== "function") {
    loadError = new MlxUnavailableError(`${path} is not the runtime-mlx addon`, BUILD_FIX);
    throw loadError;
  }
  loaded.setErrorClasses(MlxError, MlxDisposedError);
  const proto = loaded.MxArray.prototype as MxArray & Record<symbol, unknown>;
  proto[Symbol.dispose] = function (this: MxArray) {
    this.dispose();
  };
  proto[inspect.custom] = function (this: MxArray) {
    return this.disposed
      ? "MxArray(disposed)"
      : `MxArray(shape=[${this.shape.join(", ")}], dtype=${this.dtype})`;
  };
  binding = loaded;
  return loaded;
}

/** The loaded addon; throws MlxUnavailableError (with the reason and the fix) when it cannot load. */
export function native(): NativeBinding {
  return binding ?? load();
}

/** Whether the addon is usable, for `doctor`: never throws. */
export function mlxAvailable(): { available: boolean; reason?: string; version?: string } {
  try {
    return { available: true, version: native().mlxVersion };
  } catch (error) {
    return { available: false, reason: error instanceof Error ? error.message : String(error) };
  }
}

/** True when `value` is an MxArray (false whenever the addon is not loaded). */
export function isMxArray(value: unknown): value is MxArray {
  return binding !== undefined && value instanceof binding.MxArray;
}
