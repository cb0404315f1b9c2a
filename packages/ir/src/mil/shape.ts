/**
 * Shape arithmetic and data-movement helpers shared by op inference and evaluation:
 * numpy broadcasting, axis normalisation, row-major strides, broadcast-expansion and
 * permutation copies.
 */

/** Row-major strides (in elements). */
export function stridesOf(shape: readonly number[]): number[] {
  const s = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/** numpy broadcasting of two shapes; `undefined` when incompatible. */
export function broadcastShapes(a: readonly number[], b: readonly number[]): number[] | undefined {
  const rank = Math.max(a.length, b.length);
  const out = new Array<number>(rank);
  for (let i = 0; i < rank; i++) {
    const da = i < rank - a.length ? 1 : a[i - (rank - a.length)];
    const db = i < rank - b.length ? 1 : b[i - (rank - b.length)];
    if (da === db || db === 1) out[i] = da;
    else if (da === 1) out[i] = db;
    else return undefined;
  }
  return out;
}

/** Normalises an axis into [0, rank); `undefined` when out of range. */
export function normAxis(axis: number, rank: number): number | undefined {
  const a = axis < 0 ? axis + rank : axis;
  return Number.isInteger(a) && a >= 0 && a < rank ? a : undefined;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function shapeStr(s: readonly number[]): string {
  return `[${s.join(", ")}]`;
}

type NumArray = Float32Array | Int32Array | Uint8Array;

function likeArray<T extends NumArray>(src: T, n: number): T {
  return new (src.constructor as { new (n: number): T })(n);
}

/**
 * Copies `src` (shape `from`) broadcast to shape `to` (numpy rules; `from` is right-aligned).
 * The inner loop copies or repeats whole rows.
 */
export function expandTo<T extends NumArray>(src: T, from: readonly number[], to: readonly number[]): T {
  const rank = to.length;
  const f = new Array<number>(rank);
  for (let i = 0; i < rank; i++) f[i] = i < rank - from.length ? 1 : from[i - (rank - from.length)];
  let n = 1;
  for (const d of to) n *= d;
  const out = likeArray(src, n);
  if (n === 0) return out;
  if (rank === 0) {
    out[0] = src[0];
    return out;
  }
  const srcStrides = stridesOf(f).map((s, i) => (f[i] === 1 ? 0 : s));
  return copyStrided(src, out, to, srcStrides);
}

/** out[...] = src permuted by `perm` (numpy transpose). */
export function permute<T extends NumArray>(src: T, shape: readonly number[], perm: readonly number[]): T {
  const rank = shape.length;
  let n = 1;
  for (const d of shape) n *= d;
  const out = likeArray(src, n);
  if (n === 0) return out;
  if (rank <= 1) {
    out.set(src as never);
    return out;
  }
  const inStrides = stridesOf(shape);
  const outShape = perm.map((p) => shape[p]);
  return copyStrided(
    src,
    out,
    outShape,
    perm.map((p) => inStrides[p]), // source stride per output dim
  );
}

/**
 * Fills `out` (row-major over `shape`) from `src` read at Σ idx[d]·strides[d] (a stride of 0
 * repeats): the odometer expandTo and permute share, a whole row of the last dim at a time.
 */
function copyStrided<T extends NumArray>(
  src: T,
  out: T,
  shape: readonly number[],
  strides: readonly number[],
): T {
  const last = shape.length - 1;
  const inner = shape[last];
  const step = strides[last];
  const idx = new Array<number>(shape.length).fill(0);
  let o = 0;
  let base = 0;
  while (o < out.length) {
    if (step === 0) {
      const v = src[base];
      for (let i = 0; i < inner; i++) out[o + i] = v;
    } else {
      for (let i = 0, s = base; i < inner; i++, s += step) out[o + i] = src[s];
    }
    o += inner;
    // odometer over the outer dims
    let d = last - 1;
    while (d >= 0) {
      idx[d]++;
      base += strides[d];
      if (idx[d] < shape[d]) break;
      base -= strides[d] * shape[d];
      idx[d] = 0;
      d--;
    }
    if (d < 0) break;
  }
  return out;
}

/** Splits `shape` around `axis` into (outer, size, inner) element counts. */
export function aroundAxis(shape: readonly number[], axis: number): [number, number, number] {
  let outer = 1;
  let inner = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i];
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i];
  return [outer, shape[axis], inner];
}

/**
 * A broadcast iteration plan for `out = f(x, y)`: dims with per-operand strides (0 where the
 * operand is broadcast), with size-1 dims dropped and mergeable neighbours merged, so that
 * the inner loop runs over as long a row as possible.
 */
export interface BroadcastPlan {
  readonly dims: readonly number[];
  readonly strides: readonly (readonly number[])[];
}

const planCache = new Map<string, BroadcastPlan>();

export function broadcastPlan(out: readonly number[], ...operands: (readonly number[])[]): BroadcastPlan {
  const key = `${out.join(",")}|${operands.map((s) => s.join(",")).join("|")}`;
  const cached = planCache.get(key);
  if (cached) return cached;
  const rank = out.length;
  const full = operands.map((s) => [...new Array<number>(rank - s.length).fill(1), ...s]);
  const st = full.map((s) => stridesOf(s).map((v, i) => (s[i] === 1 ? 0 : v)));
  const dims: number[] = [];
  const strides: number[][] = operands.map(() => []);
  for (let d = 0; d < rank; d++) {
    if (out[d] === 1) continue;
    const last = dims.length - 1;
    const mergeable = last >= 0 && strides.every((s, k) => s[last] === st[k][d] * out[d]);
    if (mergeable) {
      dims[last] *= out[d];
      for (let k = 0; k < strides.length; k++) strides[k][last] = st[k][d];
    } else {
      dims.push(out[d]);
      for (let k = 0; k < strides.length; k++) strides[k].push(st[k][d]);
    }
  }
  if (dims.length === 0) {
    dims.push(1);
    for (const s of strides) s.push(0);
  }
  const plan = { dims, strides };
  if (planCache.size > 4096) planCache.clear();
  planCache.set(key, plan);
  return plan;
}

/** Copies n elements; a loop for short runs (cheaper than subarray + set). */
export function copyRun(
  src: Float32Array | Int32Array | Uint8Array,
  so: number,
  dst: Float32Array | Int32Array | Uint8Array,
  dof: number,
  n: number,
): void {
  if (n < 48) for (let i = 0; i < n; i++) dst[dof + i] = src[so + i];
  else dst.set(src.subarray(so, so + n), dof);
}
