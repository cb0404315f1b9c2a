/**
 * MLX ops as plain functions (lazy: they build graph nodes; `eval`/`asyncEval` compute them).
 * Semantics are MLX's (and so numpy's): broadcasting, negative axes, type promotion, with JS numbers
 * as "weak" scalars that take the other operand's dtype.
 */
import { type DtypeLike, toDtype } from "./array.js";
import { type ArrayOrScalar, type MxArray, native } from "./native.js";
import { track } from "./tidy.js";

type Axes = number | number[];

// --- elementwise, one input
export const abs = (a: MxArray): MxArray => track(native().abs(a));
export const negative = (a: MxArray): MxArray => track(native().negative(a));
export const exp = (a: MxArray): MxArray => track(native().exp(a));
export const log = (a: MxArray): MxArray => track(native().log(a));
export const log1p = (a: MxArray): MxArray => track(native().log1p(a));
export const sigmoid = (a: MxArray): MxArray => track(native().sigmoid(a));
export const tanh = (a: MxArray): MxArray => track(native().tanh(a));
export const sqrt = (a: MxArray): MxArray => track(native().sqrt(a));
export const rsqrt = (a: MxArray): MxArray => track(native().rsqrt(a));
export const square = (a: MxArray): MxArray => track(native().square(a));
export const reciprocal = (a: MxArray): MxArray => track(native().reciprocal(a));
export const sin = (a: MxArray): MxArray => track(native().sin(a));
export const cos = (a: MxArray): MxArray => track(native().cos(a));
export const floor = (a: MxArray): MxArray => track(native().floor(a));
export const ceil = (a: MxArray): MxArray => track(native().ceil(a));
export const erf = (a: MxArray): MxArray => track(native().erf(a));
export const logicalNot = (a: MxArray): MxArray => track(native().logicalNot(a));
/** x * sigmoid(x) */
export const silu = (a: MxArray): MxArray => track(native().silu(a));
/** log(1 + e^x), computed as logaddexp(x, 0) */
export const softplus = (a: MxArray): MxArray => track(native().softplus(a));
/** A row-major copy when `a` is a strided view; `a`'s data otherwise. */
export const contiguous = (a: MxArray): MxArray => track(native().contiguous(a));

// --- elementwise, two inputs (either may be a JS number)
export const add = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().add(a, b));
export const subtract = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().subtract(a, b));
export const multiply = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().multiply(a, b));
export const divide = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().divide(a, b));
export const power = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().power(a, b));
export const maximum = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().maximum(a, b));
export const minimum = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().minimum(a, b));
export const logaddexp = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().logaddexp(a, b));
export const remainder = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().remainder(a, b));
export const floorDivide = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().floorDivide(a, b));
export const equal = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().equal(a, b));
export const notEqual = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().notEqual(a, b));
export const greater = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().greater(a, b));
export const greaterEqual = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray =>
  track(native().greaterEqual(a, b));
export const less = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().less(a, b));
export const lessEqual = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().lessEqual(a, b));
export const logicalAnd = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().logicalAnd(a, b));
export const logicalOr = (a: ArrayOrScalar, b: ArrayOrScalar): MxArray => track(native().logicalOr(a, b));
/** Matrix product with numpy broadcasting over leading axes. */
export const matmul = (a: MxArray, b: MxArray): MxArray => track(native().matmul(a, b));

// --- reductions (axes default to all)
type Reduction = (a: MxArray, axes?: Axes, keepdims?: boolean) => MxArray;
type ArgReduction = (a: MxArray, axis?: number, keepdims?: boolean) => MxArray;
const reduction =
  (name: "sum" | "mean" | "max" | "min" | "prod" | "logsumexp"): Reduction =>
  (a, axes, keepdims = false) =>
    track(native()[name](a, axes, keepdims));
const argReduction =
  (name: "argmax" | "argmin"): ArgReduction =>
  (a, axis, keepdims = false) =>
    track(native()[name](a, axis, keepdims));
export const sum = reduction("sum");
export const mean = reduction("mean");
export const max = reduction("max");
export const min = reduction("min");
export const prod = reduction("prod");
export const logsumexp = reduction("logsumexp");
export const argmax = argReduction("argmax");
export const argmin = argReduction("argmin");
/** softmax over `axes` (default: all); `precise` accumulates low-precision inputs in fp32. */
export const softmax = (a: MxArray, axes?: Axes, precise = false): MxArray =>
  track(native().softmax(a, axes, precise));
export const cumsum = (
  a: MxArray,
  axis: number,
  options: { reverse?: boolean; inclusive?: boolean } = {},
): MxArray => track(native().cumsum(a, axis, options.reverse ?? false, options.inclusive ?? true));

// --- shapes
/** One entry of `shape` may be -1 (inferred). */
export const reshape = (a: MxArray, shape: number[]): MxArray => track(native().reshape(a, shape));
/** Permutes axes (default: reverses them). */
export const transpose = (a: MxArray, axes?: number[]): MxArray => track(native().transpose(a, axes));
export const expandDims = (a: MxArray, axes: Axes): MxArray => track(native().expandDims(a, axes));
export const squeeze = (a: MxArray, axes?: Axes): MxArray => track(native().squeeze(a, axes));
export const flatten = (a: MxArray, startAxis = 0, endAxis = -1): MxArray =>
  track(native().flatten(a, startAxis, endAxis));
export const broadcastTo = (a: MxArray, shape: number[]): MxArray => track(native().broadcastTo(a, shape));
export const astype = (a: MxArray, dtype: DtypeLike): MxArray => track(native().astype(a, toDtype(dtype)));
export const concatenate = (arrays: MxArray[], axis = 0): MxArray =>
  track(native().concatenate(arrays, axis));
export const stack = (arrays: MxArray[], axis = 0): MxArray => track(native().stack(arrays, axis));
/** `sections`: that many equal parts; or the indices where to cut. */
export const split = (a: MxArray, sectionsOrIndices: number | number[], axis = 0): MxArray[] =>
  track(native().split(a, sectionsOrIndices, axis));

/** Start/stop/strides for the leading axes; the rest are taken whole. Negative indices count from the end. */
function fullSlice(a: MxArray, start: number[], stop: number[], strides?: number[]) {
  const shape = a.shape;
  if (
    start.length > shape.length ||
    stop.length !== start.length ||
    (strides && strides.length !== start.length)
  ) {
    throw new TypeError(
      `slice: start/stop${strides ? "/strides" : ""} must have the same length, at most ndim=${shape.length}`,
    );
  }
  const s = shape.map((_, i) => (i < start.length ? start[i] : 0));
  const e = shape.map((d, i) => (i < stop.length ? Math.min(stop[i], d) : d));
  const st = strides ? shape.map((_, i) => (i < strides.length ? strides[i] : 1)) : undefined;
  return { s, e, st };
}

/** a[start:stop:strides] over the leading axes (stop is clamped to the axis length). */
export function slice(a: MxArray, start: number[], stop: number[], strides?: number[]): MxArray {
  const { s, e, st } = fullSlice(a, start, stop, strides);
  return track(native().slice(a, s, e, st));
}

/** A copy of `src` with src[start:stop:strides] = update (update broadcasts to the slice). */
export function sliceUpdate(
  src: MxArray,
  update: MxArray,
  start: number[],
  stop: number[],
  strides?: number[],
): MxArray {
  const { s, e, st } = fullSlice(src, start, stop, strides);
  return track(native().sliceUpdate(src, update, s, e, st));
}

// --- indexing and selection
/** Elements of `a` at `indices` along `axis` (flattened when no axis). Embedding lookup: take(table, ids, 0). */
export const take = (a: MxArray, indices: MxArray | number, axis?: number): MxArray =>
  track(native().take(a, indices, axis));
export const takeAlongAxis = (a: MxArray, indices: MxArray, axis: number): MxArray =>
  track(native().takeAlongAxis(a, indices, axis));
export const where = (condition: MxArray, x: ArrayOrScalar, y: ArrayOrScalar): MxArray =>
  track(native().where(condition, x, y));
/** Each element repeated `repeats` times in a row (numpy.repeat), along `axis` (flattened when none). */
export const repeat = (a: MxArray, repeats: number, axis?: number): MxArray =>
  track(native().repeat(a, repeats, axis));
/** The k largest values along `axis`, in no particular order. */
export const topk = (a: MxArray, k: number, axis = -1): MxArray => track(native().topk(a, k, axis));
export const argpartition = (a: MxArray, kth: number, axis = -1): MxArray =>
  track(native().argpartition(a, kth, axis));
export const argsort = (a: MxArray, axis = -1): MxArray => track(native().argsort(a, axis));
export const sort = (a: MxArray, axis = -1): MxArray => track(native().sort(a, axis));

// --- quantization and matmul variants
export interface QuantOptions {
  /** Elements per scale/bias group along the last axis (MLX default 64). */
  groupSize?: number;
  /** 2, 3, 4, 5, 6 or 8 (MLX default 4). */
  bits?: number;
  /** "affine" (scale and bias per group; default) or MLX's other modes. */
  mode?: string;
}

export interface Quantized {
  /** Packed weights, uint32 [..., cols * bits / 32]. */
  wq: MxArray;
  scales: MxArray;
  /** Present in affine mode. */
  biases: MxArray | undefined;
}

/** Quantizes `w` along its last axis: w ≈ scales * q + biases per group. */
export function quantize(w: MxArray, options: QuantOptions = {}): Quantized {
  const out = track(native().quantize(w, options.groupSize, options.bits, options.mode ?? "affine"));
  return { wq: out[0], scales: out[1], biases: out[2] };
}

export function dequantize(
  wq: MxArray,
  scales: MxArray,
  biases: MxArray | undefined,
  options: QuantOptions & { dtype?: DtypeLike } = {},
): MxArray {
  const dtype = options.dtype === undefined ? undefined : toDtype(options.dtype);
  return track(
    native().dequantize(wq, scales, biases, options.groupSize, options.bits, options.mode ?? "affine", dtype),
  );
}

/** x @ dequantize(w).T (or without .T when `transpose` is false), without materializing w. */
export function quantizedMatmul(
  x: MxArray,
  wq: MxArray,
  scales: MxArray,
  biases: MxArray | undefined,
  options: QuantOptions & { transpose?: boolean } = {},
): MxArray {
  return track(
    native().quantizedMatmul(
      x,
      wq,
      scales,
      biases,
      options.transpose ?? true,
      options.groupSize,
      options.bits,
      options.mode ?? "affine",
    ),
  );
}

export interface GatherOptions {
  /** Which batch entry of `a`/`x` each product uses. */
  lhsIndices?: MxArray;
  /** Which matrix of `b`/`w` (the expert) each product uses. */
  rhsIndices?: MxArray;
  /** Promise that rhsIndices are sorted (faster kernels). */
  sortedIndices?: boolean;
}

/** matmul with matrix-level gather (MoE experts): out[i] = a[lhs[i]] @ b[rhs[i]]. */
export const gatherMm = (a: MxArray, b: MxArray, options: GatherOptions = {}): MxArray =>
  track(native().gatherMm(a, b, options.lhsIndices, options.rhsIndices, options.sortedIndices ?? false));

/** gatherMm over quantized expert weights. */
export function gatherQmm(
  x: MxArray,
  wq: MxArray,
  scales: MxArray,
  biases: MxArray | undefined,
  options: GatherOptions & QuantOptions & { transpose?: boolean } = {},
): MxArray {
  return track(
    native().gatherQmm(
      x,
      wq,
      scales,
      biases,
      options.lhsIndices,
      options.rhsIndices,
      options.transpose ?? true,
      options.groupSize,
      options.bits,
      options.mode ?? "affine",
      options.sortedIndices ?? false,
    ),
  );
}

/** 1-D convolution, channels last: x [N, L, Cin], w [Cout, K, Cin / groups] (groups = C: depthwise). */
export const conv1d = (
  x: MxArray,
  w: MxArray,
  options: { stride?: number; padding?: number; dilation?: number; groups?: number } = {},
): MxArray =>
  track(
    native().conv1d(
      x,
      w,
      options.stride ?? 1,
      options.padding ?? 0,
      options.dilation ?? 1,
      options.groups ?? 1,
    ),
  );

// --- fast kernels
/** x * rsqrt(mean(x², -1) + eps) * weight (weight null: no scaling). */
export const rmsNorm = (x: MxArray, weight: MxArray | null, eps: number): MxArray =>
  track(native().rmsNorm(x, weight, eps));
export const layerNorm = (x: MxArray, weight: MxArray | null, bias: MxArray | null, eps: number): MxArray =>
  track(native().layerNorm(x, weight, bias, eps));

export interface RopeOptions {
  /** How many leading features of the last axis rotate (partial rotary: head_dim * factor). */
  dims: number;
  /** true: rotate interleaved pairs (x0,x1); false: the two halves (x[i], x[i + dims/2]), as Qwen. */
  traditional?: boolean;
  /** Frequency base (rope_theta). Default 10000 unless `freqs` is given. */
  base?: number;
  scale?: number;
  /** Position of the first row along axis -2: a number, or a scalar int32 MxArray. */
  offset?: number | MxArray;
  /** Custom inverse frequencies [dims / 2] instead of `base`. */
  freqs?: MxArray;
}

/** Rotary embedding over positions along axis -2 (x: [..., L, D]). */
export function rope(x: MxArray, options: RopeOptions): MxArray {
  const base = options.freqs ? null : (options.base ?? 10000);
  return track(
    native().rope(
      x,
      options.dims,
      options.traditional ?? false,
      base,
      options.scale ?? 1,
      options.offset ?? 0,
      options.freqs,
    ),
  );
}

/**
 * softmax(q kᵀ * scale + mask) v with GQA (Hq a multiple of Hkv). q [B, Hq, L, D], k [B, Hkv, S, D],
 * v [B, Hkv, S, Dv]. mask: "causal" (aligned to the end of k), a boolean (true = attend) or additive array.
 */
export function scaledDotProductAttention(
  q: MxArray,
  k: MxArray,
  v: MxArray,
  options: { scale: number; mask?: "causal" | MxArray; sinks?: MxArray },
): MxArray {
  return track(native().scaledDotProductAttention(q, k, v, options.scale, options.mask, options.sinks));
}

// --- random (MLX's global PRNG)
export const randomSeed = (seed: number): void => native().randomSeed(seed);
/** Samples indices from unnormalized log-probabilities along `axis`. */
export const randomCategorical = (
  logits: MxArray,
  options: { axis?: number; numSamples?: number } = {},
): MxArray => track(native().randomCategorical(logits, options.axis ?? -1, options.numSamples));
export const randomUniform = (
  shape: number[],
  options: { dtype?: DtypeLike; low?: number; high?: number } = {},
): MxArray =>
  track(
    native().randomUniform(
      shape,
      options.dtype === undefined ? undefined : toDtype(options.dtype),
      options.low ?? 0,
      options.high ?? 1,
    ),
  );
export const randomNormal = (
  shape: number[],
  options: { dtype?: DtypeLike; loc?: number; scale?: number } = {},
): MxArray =>
  track(
    native().randomNormal(
      shape,
      options.dtype === undefined ? undefined : toDtype(options.dtype),
      options.loc ?? 0,
      options.scale ?? 1,
    ),
  );
