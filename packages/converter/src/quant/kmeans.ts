/**
 * The k-means kernel behind palettize(): clusters each group of a weight into K fp16 centroids,
 * working on the group's histogram — its distinct values with their counts — rather than on every
 * element. Weights come as bf16/fp16 (a group of 8 × 4096 elements holds only a few thousand
 * distinct values), so the histogram is built by counting 16-bit patterns, the indices come from
 * a 65536-entry table, and the reconstruction error is summed over distinct values.
 *
 * The clustering is exact when cheap (dynamic programming over the distinct values, LUT2/LUT4)
 * and otherwise Lloyd's iterations from two starts. Every sum is accumulated in the same order as
 * an element-by-element pass over the sorted group would, so the result is bit-identical to
 * running the same algorithms on the sorted elements. Deterministic, no randomness.
 *
 * Runs on the main thread (small tensors) and in the workers of kmeans-pool.ts.
 */
import { bf16BitsToF32, f16BitsToF32, f32ToF16Bits } from "@anemll-qwen35/core";
import { WasmDp } from "./kmeans-dp.js";

/** A tensor's values as stored: raw 16-bit patterns, or fp32 values of any origin. */
export type KmeansValues =
  | { readonly format: "bf16" | "fp16"; readonly bits: Uint16Array }
  | { readonly format: "fp32"; readonly values: Float32Array };

/** Groups [first, end) of a tensor whose groups are `groupLen` consecutive elements. */
export interface KmeansTask {
  readonly values: KmeansValues;
  readonly groupLen: number;
  readonly first: number;
  readonly end: number;
  /** Centroids per group (2^bits). */
  readonly k: number;
  readonly maxIterations: number;
  /** Out: one index per element (whole tensor). */
  readonly indices: Uint8Array;
  /** Out: fp16 bits, k per group (whole tensor). */
  readonly lut: Uint16Array;
  /** Out: per group, squared error, squared norm and largest absolute error (3 per group). */
  readonly stats: Float64Array;
}

/** Groups with more distinct values than this budget allows use Lloyd instead of the DP. */
const DP_BUDGET = 2_000_000;

/** Sortable 16-bit key of a bf16/fp16 pattern (ascending key = ascending value; −0 just below +0). */
const sortKey = (b: number): number => (b & 0x8000 ? 0x7fff - (b & 0x7fff) : 0x8000 | b);
const fromKey = (key: number): number => (key & 0x8000 ? key & 0x7fff : 0x8000 | (0x7fff - key));

let decodeTables: { bf16?: Float64Array; fp16?: Float64Array } = {};
function decodeTable(format: "bf16" | "fp16"): Float64Array {
  let t = decodeTables[format];
  if (!t) {
    t = new Float64Array(65536);
    const decode = format === "bf16" ? bf16BitsToF32 : f16BitsToF32;
    for (let i = 0; i < 65536; i++) t[i] = decode(i);
    decodeTables = { ...decodeTables, [format]: t };
  }
  return t;
}

/** Scratch space reused across groups and tasks (one set per thread). */
class Scratch {
  cap = 0;
  uniq = new Float64Array(0); // distinct values, ascending
  cum: Float64Array<ArrayBufferLike> = new Float64Array(0); // element counts, prefix (d + 1)
  u1: Float64Array<ArrayBufferLike> = new Float64Array(0); // running sums of the sorted elements at distinct boundaries (d + 1)
  u2: Float64Array<ArrayBufferLike> = new Float64Array(0); // same for squares
  slot = new Int32Array(0); // per distinct value: its cluster
  /** fp32 input: the sorted group (when `fromSorted`). */
  sorted = new Float32Array(0);
  fromSorted = false;
  /** bf16/fp16 input: the group's patterns in ascending order of value (m of them). */
  keys = new Uint16Array(0);
  keysTmp = new Uint16Array(0);
  m = 0;
  /** The distinct value −0/+0 (one value, −0 elements first) and how many −0 it holds. */
  zeroAt = -1;
  negZeros = 0;
  count = new Uint32Array(65536); // pattern → elements (zero again after each group)
  distinctOf = new Int32Array(65536); // pattern → distinct index
  table = new Uint8Array(65536); // pattern → cluster
  prev = new Float64Array(0);
  cur = new Float64Array(0);
  arg = new Int32Array(0);
  stack = new Int32Array(0);

  /** The DP in WebAssembly (cum, u1 and u2 then live in its memory); null: the JavaScript DP. */
  readonly wasm = WasmDp.create();

  reserve(n: number): void {
    if (n <= this.cap) return;
    this.cap = n;
    this.uniq = new Float64Array(n);
    if (this.wasm) {
      this.wasm.reserve(n, 16);
      ({ cum: this.cum, u1: this.u1, u2: this.u2 } = this.wasm);
    } else {
      this.cum = new Float64Array(n + 1);
      this.u1 = new Float64Array(n + 1);
      this.u2 = new Float64Array(n + 1);
    }
    this.slot = new Int32Array(n);
  }
}

let scratch: Scratch | undefined;
const threadScratch = (): Scratch => {
  scratch ??= new Scratch();
  return scratch;
};

/** Whether the exact DP runs in WebAssembly here (else in JavaScript; same results). */
export const dpInWasm = (): boolean => threadScratch().wasm !== null;

export function kmeansGroups(task: KmeansTask): void {
  const s = threadScratch();
  const { groupLen, k } = task;
  s.reserve(groupLen);
  const centroids = new Float64Array(k);
  for (let g = task.first; g < task.end; g++) {
    const d =
      task.values.format === "fp32"
        ? histogramF32(s, task.values.values, g, groupLen)
        : histogramBits(s, task.values, g, groupLen);
    clusterHistogram(s, d, groupLen, k, task.maxIterations, centroids);
    // LUT in fp16; assignment against the rounded values, so the error is what will run
    const lutBase = g * k;
    for (let j = 0; j < k; j++) {
      const h = f32ToF16Bits(centroids[j]);
      task.lut[lutBase + j] = h;
      centroids[j] = f16BitsToF32(h);
    }
    assign(s, d, k, centroids, task, g);
  }
}

/** Distinct values of group g of fp32 values (sorting a copy); returns their count. */
function histogramF32(s: Scratch, values: Float32Array, g: number, n: number): number {
  if (s.sorted.length < n) s.sorted = new Float32Array(n);
  const sorted = s.sorted.subarray(0, n);
  s.fromSorted = true;
  sorted.set(values.subarray(g * n, (g + 1) * n));
  sorted.sort();
  if (!Number.isFinite(sorted[0]) || !Number.isFinite(sorted[n - 1]))
    throw new RangeError(`group ${g} holds a non-finite value (NaN or ±Inf)`);
  const { uniq, cum, u1, u2 } = s;
  let d = 0;
  let a1 = 0;
  let a2 = 0;
  for (let i = 0; i < n; i++) {
    const x = sorted[i];
    if (d === 0 || x !== uniq[d - 1]) {
      if (d > 0) {
        u1[d] = a1;
        u2[d] = a2;
      }
      uniq[d] = x;
      cum[d + 1] = cum[d];
      d++;
    }
    cum[d] += 1;
    a1 += x;
    a2 += x * x;
  }
  u1[d] = a1;
  u2[d] = a2;
  return d;
}

/** Distinct values of group g of bf16/fp16 patterns (counting them); returns their count. */
function histogramBits(
  s: Scratch,
  v: { readonly format: "bf16" | "fp16"; readonly bits: Uint16Array },
  g: number,
  n: number,
): number {
  const { count } = s;
  const bits = v.bits;
  const base = g * n;
  if (s.keys.length < n) {
    s.keys = new Uint16Array(n);
    s.keysTmp = new Uint16Array(n);
  }
  const keys = s.keys;
  let m = 0;
  for (let i = 0; i < n; i++) {
    const b = bits[base + i];
    if (count[b]++ === 0) keys[m++] = sortKey(b);
  }
  radixSort16(keys, s.keysTmp, m);
  const sortedKeys = keys;
  s.m = m;
  s.fromSorted = false;
  const expMask = v.format === "bf16" ? 0x7f80 : 0x7c00;
  const table = decodeTable(v.format);
  const { uniq, cum, u1, u2 } = s;
  let d = 0;
  let a1 = 0;
  let a2 = 0;
  s.zeroAt = -1;
  s.negZeros = 0;
  for (let j = 0; j < m; j++) {
    const b = fromKey(sortedKeys[j]);
    if ((b & expMask) === expMask) {
      for (let r = 0; r < m; r++) count[fromKey(sortedKeys[r])] = 0;
      throw new RangeError(`group ${g} holds a non-finite value (NaN or ±Inf)`);
    }
    const x = table[b];
    const c = count[b];
    if (d === 0 || x !== uniq[d - 1]) {
      if (d > 0) {
        u1[d] = a1;
        u2[d] = a2;
      }
      uniq[d] = x;
      cum[d + 1] = cum[d];
      d++;
    }
    s.distinctOf[b] = d - 1;
    // −0 and +0 are one distinct value (as in a sorted pass), −0 first
    if (x === 0) {
      s.zeroAt = d - 1;
      if (b === 0x8000) s.negZeros = c;
    }
    cum[d] += c;
    // the same additions, in the same order, as a pass over the sorted elements
    const x2 = x * x;
    for (let r = 0; r < c; r++) {
      a1 += x;
      a2 += x2;
    }
  }
  u1[d] = a1;
  u2[d] = a2;
  return d;
}

const radixCounts = new Uint32Array(256);

/**
 * Sorts keys[0, m) ascending in place: two byte-wide counting passes through `tmp` (a group's
 * ~2 000 keys sort in a few microseconds, where TypedArray#sort takes a hundred times longer).
 */
function radixSort16(keys: Uint16Array, tmp: Uint16Array, m: number): void {
  for (const [from, to, shift] of [
    [keys, tmp, 0],
    [tmp, keys, 8],
  ] as const) {
    radixCounts.fill(0);
    for (let i = 0; i < m; i++) radixCounts[(from[i] >>> shift) & 0xff]++;
    let at = 0;
    for (let b = 0; b < 256; b++) {
      const c = radixCounts[b];
      radixCounts[b] = at;
      at += c;
    }
    for (let i = 0; i < m; i++) to[radixCounts[(from[i] >>> shift) & 0xff]++] = from[i];
  }
}

/** The value of the element at position q of the sorted group. */
function elementAt(s: Scratch, d: number, q: number): number {
  if (s.fromSorted) return s.sorted[q];
  let lo = 0;
  let hi = d - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (s.cum[mid] <= q) lo = mid;
    else hi = mid - 1;
  }
  if (lo === s.zeroAt) return q - s.cum[lo] < s.negZeros ? -0 : 0;
  return s.uniq[lo];
}

/** Centroids of the d distinct values (counts in cum) into `centroids`, sorted. */
function clusterHistogram(
  s: Scratch,
  d: number,
  n: number,
  k: number,
  maxIterations: number,
  centroids: Float64Array,
): void {
  if (d <= k) {
    for (let j = 0; j < k; j++) centroids[j] = elementAt(s, d, s.cum[Math.min(j, d - 1)]);
  } else if (k <= 16 && k * d * Math.ceil(Math.log2(d)) <= DP_BUDGET) {
    exactKmeans(s, d, k, centroids);
  } else {
    // Lloyd's iterations from two starts (quantiles, even spacing), keeping the better
    for (let j = 0; j < k; j++)
      centroids[j] = elementAt(s, d, Math.min(n - 1, Math.floor(((j + 0.5) * n) / k)));
    const trial = new Float64Array(k);
    const lo = elementAt(s, d, 0);
    const span = elementAt(s, d, n - 1) - lo;
    for (let j = 0; j < k; j++) trial[j] = lo + (span * (j + 0.5)) / k;
    if (lloyd(s, d, k, maxIterations, trial) < lloyd(s, d, k, maxIterations, centroids)) centroids.set(trial);
  }
}

/**
 * Lloyd's iterations from the sorted centroids `c` (sorted out), over the histogram: a cluster is
 * a run of distinct values, found by binary search of the midpoints. Returns the SSE.
 */
function lloyd(s: Scratch, d: number, k: number, maxIterations: number, c: Float64Array): number {
  const { uniq, cum, u1, u2 } = s;
  const bounds = new Int32Array(k + 1);
  // first distinct index with value > x
  // first distinct index with value > x; `near`: where it was last iteration (boundaries move
  // little once Lloyd settles, so a short walk from there beats a binary search)
  const upper = (x: number, near: number): number => {
    let b = near;
    for (let step = 0; step < 8; step++) {
      if (b < d && uniq[b] <= x) b++;
      else if (b > 0 && uniq[b - 1] > x) b--;
      else return b;
    }
    let lo = 0;
    let hi = d;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (uniq[mid] <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (let j = 1; j < k; j++) bounds[j] = Math.round((j * d) / k);
  for (let it = 0; it < maxIterations; it++) {
    bounds[0] = 0;
    bounds[k] = d;
    for (let j = 0; j < k - 1; j++) bounds[j + 1] = upper((c[j] + c[j + 1]) / 2, bounds[j + 1]);
    let changed = false;
    for (let j = 0; j < k; j++) {
      const lo = bounds[j];
      const hi = Math.max(lo, bounds[j + 1]);
      if (hi > lo) {
        const v = (u1[hi] - u1[lo]) / (cum[hi] - cum[lo]);
        if (v !== c[j]) {
          c[j] = v;
          changed = true;
        }
      }
    }
    // keep centroids sorted (an empty cluster keeps its old value, which may be out of order)
    for (let j = 1; j < k; j++) if (c[j] < c[j - 1]) c[j] = c[j - 1];
    if (!changed) break;
  }
  let sse = 0;
  for (let j = 0; j < k; j++) {
    const lo = bounds[j];
    const hi = bounds[j + 1];
    if (hi > lo) {
      const sum = u1[hi] - u1[lo];
      sse += u2[hi] - u2[lo] - (sum * sum) / (cum[hi] - cum[lo]);
    }
  }
  return sse;
}

/**
 * Optimal 1-D k-means over the d distinct values: divide-and-conquer DP (O(k·d·log d); the last
 * row only along the path that reaches d), whose cluster means become the centroids.
 */
function exactKmeans(s: Scratch, d: number, k: number, centroids: Float64Array): void {
  const { cum, u1 } = s;
  let arg: Int32Array<ArrayBufferLike>;
  if (s.wasm && !forceJsDp) {
    s.wasm.solve(d, k);
    arg = s.wasm.arg;
  } else {
    arg = exactKmeansJs(s, d, k);
  }
  // walk the split points back from the end: cluster c covers distinct values [start, end)
  const stride = d + 1;
  let end = d;
  for (let c = k - 1; c >= 0; c--) {
    const start = c === 0 ? 0 : arg[c * stride + end];
    centroids[c] = (u1[end] - u1[start]) / (cum[end] - cum[start]);
    end = start;
  }
}

/** Test hook: run the JavaScript DP even where WebAssembly is available. */
let forceJsDp = false;
export function useJsDp(on: boolean): void {
  forceJsDp = on;
}

/** The DP in JavaScript; returns the split points (row stride d + 1). */
function exactKmeansJs(s: Scratch, d: number, k: number): Int32Array {
  const { cum, u1, u2 } = s;
  if (s.prev.length < d + 1) {
    s.prev = new Float64Array(d + 1);
    s.cur = new Float64Array(d + 1);
    s.stack = new Int32Array(8 * (Math.ceil(Math.log2(d + 1)) + 2));
  }
  if (s.arg.length < k * (d + 1)) s.arg = new Int32Array(k * (d + 1));
  let prev = s.prev;
  let cur = s.cur;
  const { arg, stack } = s;
  const stride = d + 1;
  for (let j = 1; j <= d; j++) {
    const sum = u1[j] - u1[0];
    prev[j] = u2[j] - u2[0] - (sum * sum) / (cum[j] - cum[0]);
    arg[j] = 0;
  }
  // Row c: cur[mid] = min over i of prev[i] + cost(i, mid); the optimal i grows with mid, so
  // solving the middle first bounds both halves (depth-first, left half first, explicit stack).
  for (let c = 1; c < k; c++) {
    const last = c === k - 1; // the last row is needed at d only: follow the right spine
    const row = c * stride;
    let top = 0;
    stack[top++] = c + 1;
    stack[top++] = d;
    stack[top++] = c;
    stack[top++] = d - 1;
    while (top > 0) {
      const optHi = stack[--top];
      const optLo = stack[--top];
      const hi = stack[--top];
      const lo = stack[--top];
      if (lo > hi) continue;
      const mid = (lo + hi) >>> 1;
      const cj = cum[mid];
      const s1 = u1[mid];
      const s2 = u2[mid];
      let best = Number.POSITIVE_INFINITY;
      let at = optLo;
      const end = Math.min(mid - 1, optHi);
      for (let i = optLo; i <= end; i++) {
        const sum = s1 - u1[i];
        const v = prev[i] + (s2 - u2[i] - (sum * sum) / (cj - cum[i]));
        if (v < best) {
          best = v;
          at = i;
        }
      }
      cur[mid] = best;
      arg[row + mid] = at;
      // pushed right first so that the left half is solved first
      stack[top++] = mid + 1;
      stack[top++] = hi;
      stack[top++] = at;
      stack[top++] = optHi;
      if (!last) {
        stack[top++] = lo;
        stack[top++] = mid - 1;
        stack[top++] = optLo;
        stack[top++] = at;
      }
    }
    const t = prev;
    prev = cur;
    cur = t;
  }
  s.prev = prev;
  s.cur = cur;
  return arg;
}

/** Indices of group g's elements and its error statistics, against the fp16-rounded centroids. */
function assign(
  s: Scratch,
  d: number,
  k: number,
  centroids: Float64Array,
  task: KmeansTask,
  g: number,
): void {
  const mids = new Float64Array(k);
  for (let j = 0; j < k - 1; j++) mids[j] = (centroids[j] + centroids[j + 1]) / 2;
  const nearest = (x: number): number => {
    let lo = 0;
    let hi = k - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (x > mids[mid]) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const { uniq, cum, slot } = s;
  let se = 0;
  let norm = 0;
  let maxAbs = 0;
  for (let j = 0; j < d; j++) {
    const x = uniq[j];
    const at = nearest(x);
    slot[j] = at;
    const c = cum[j + 1] - cum[j];
    const e = x - centroids[at];
    se += c * e * e;
    norm += c * x * x;
    if (Math.abs(e) > maxAbs) maxAbs = Math.abs(e);
  }
  task.stats[3 * g] = se;
  task.stats[3 * g + 1] = norm;
  task.stats[3 * g + 2] = maxAbs;
  const n = task.groupLen;
  const base = g * n;
  const out = task.indices;
  if (task.values.format === "fp32") {
    const values = task.values.values;
    for (let i = 0; i < n; i++) out[base + i] = nearest(values[base + i]);
    return;
  }
  // every pattern of the group → its cluster, then one table lookup per element
  const { table, count, distinctOf, keys } = s;
  for (let r = 0; r < s.m; r++) {
    const b = fromKey(keys[r]);
    table[b] = slot[distinctOf[b]];
    count[b] = 0;
  }
  const bits = task.values.bits;
  for (let i = 0; i < n; i++) out[base + i] = table[bits[base + i]];
}
