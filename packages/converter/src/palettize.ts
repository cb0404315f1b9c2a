/**
 * LUT palettization: k-means over weight values, one lookup table per group of output channels
 * (per_grouped_channel, group 8 by default, as ANEMLL does with coremltools' OpPalettizerConfig) or
 * one for the whole tensor. The result feeds iOS18 `constexpr_lut_to_dense`: `indices` with the
 * weight's shape and a `lut` of shape [groups, 1, …, 2^bits, 1].
 *
 * The 1-D k-means is exact when it is cheap — dynamic programming over a group's distinct values
 * (fp16 weights have few: typically a few thousand per group) — and otherwise Lloyd's algorithm on
 * the sorted values with prefix sums (O(K log n) per iteration) from two starts. Deterministic (no
 * randomness at all). Large tensors are split across worker threads by group.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { f16BitsToF32, f32ToF16Bits, InvalidArgumentError } from "@anemll-qwen35/core";

export type LutBits = 2 | 4 | 6 | 8;

export interface PalettizeOptions {
  bits: LutBits;
  /** Output channels sharing one LUT; 0 or undefined with `perTensor` = one LUT for the tensor. */
  groupSize?: number;
  perTensor?: boolean;
  /** Worker threads for large tensors (default: available parallelism). 1 = main thread only. */
  workers?: number;
  /** Max Lloyd iterations per start (default 300; most groups converge far sooner). */
  maxIterations?: number;
}

export interface Palettized {
  readonly bits: LutBits;
  /** Weight shape, e.g. [Dout, Din] or [Dout, Din, 1, 1]. */
  readonly shape: readonly number[];
  /** One index per weight element, row-major (unpacked; the blob writer packs them). */
  readonly indices: Uint8Array;
  /** fp16 bit patterns, [groups × 2^bits]. */
  readonly lut: Uint16Array;
  readonly groups: number;
  /** LUT tensor shape for constexpr_lut_to_dense: [groups, 1, …, 2^bits, 1]. */
  readonly lutShape: readonly number[];
}

export interface ReconstructionError {
  /** Mean squared error. */
  readonly mse: number;
  /** ‖W − Ŵ‖ / ‖W‖. */
  readonly relative: number;
  readonly maxAbs: number;
}

/**
 * Clusters `values[start, end)` into ≤ K centroids and writes them into `lut[lutOffset…]` as fp16
 * bits, and every value's index into `indices`. Self-contained (no imports, no closures) because
 * the same source runs inside worker threads.
 */
function kmeansGroups(
  values: Float32Array,
  indices: Uint8Array,
  lut: Uint16Array,
  groupLen: number,
  firstGroup: number,
  endGroup: number,
  k: number,
  maxIterations: number,
): void {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const toF16 = (x: number): number => {
    f32[0] = x;
    const bits = u32[0];
    const sign = (bits >>> 16) & 0x8000;
    const exp = (bits >>> 23) & 0xff;
    const mant = bits & 0x7fffff;
    if (exp === 0xff) return mant === 0 ? sign | 0x7c00 : sign | 0x7e00;
    const e = exp - 112;
    if (e >= 0x1f) return sign | 0x7c00;
    if (e <= 0) {
      if (e < -10) return sign;
      const m = mant | 0x800000;
      const shift = 14 - e;
      const half = 1 << (shift - 1);
      let r = m >>> shift;
      const rem = m & ((1 << shift) - 1);
      if (rem > half || (rem === half && (r & 1) === 1)) r += 1;
      return sign | r;
    }
    let r = (e << 10) | (mant >>> 13);
    const rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (r & 1) === 1)) r += 1;
    return sign | r;
  };
  const fromF16 = (h: number): number => {
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >>> 10) & 0x1f;
    const m = h & 0x3ff;
    if (e === 0) return s * m * 2 ** -24;
    if (e === 0x1f) return m === 0 ? s * Number.POSITIVE_INFINITY : Number.NaN;
    return s * (1 + m / 1024) * 2 ** (e - 15);
  };
  const sorted = new Float32Array(groupLen);
  const prefix = new Float64Array(groupLen + 1);
  const centroids = new Float64Array(k);
  const bounds = new Int32Array(k + 1);
  const mids = new Float64Array(k);
  // first index in sorted with value > x
  const upper = (x: number): number => {
    let lo = 0;
    let hi = groupLen;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid] <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const prefix2 = new Float64Array(groupLen + 1);
  const trial = new Float64Array(k);
  // Lloyd's iterations from the centroids in `c` (sorted in, sorted out); returns the SSE.
  const lloyd = (c: Float64Array): number => {
    for (let it = 0; it < maxIterations; it++) {
      bounds[0] = 0;
      bounds[k] = groupLen;
      for (let j = 0; j < k - 1; j++) bounds[j + 1] = upper((c[j] + c[j + 1]) / 2);
      let changed = false;
      for (let j = 0; j < k; j++) {
        const lo = bounds[j];
        const hi = Math.max(lo, bounds[j + 1]);
        if (hi > lo) {
          const v = (prefix[hi] - prefix[lo]) / (hi - lo);
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
        const sum = prefix[hi] - prefix[lo];
        sse += prefix2[hi] - prefix2[lo] - (sum * sum) / (hi - lo);
      }
    }
    return sse;
  };
  // distinct values of a group with counts, sums and sums of squares (prefix arrays)
  const uniq = new Float64Array(groupLen);
  const cum = new Float64Array(groupLen + 1);
  const u1 = new Float64Array(groupLen + 1);
  const u2 = new Float64Array(groupLen + 1);
  const DP_BUDGET = 2_000_000;
  let prev = new Float64Array(0);
  let cur = new Float64Array(0);
  let arg = new Int32Array(0);
  // SSE of distinct values [i, j) as one cluster
  const cost = (i: number, j: number): number => {
    const c = cum[j] - cum[i];
    const sum = u1[j] - u1[i];
    return u2[j] - u2[i] - (sum * sum) / c;
  };
  // Optimal 1-D k-means over the d distinct values (divide-and-conquer DP, O(k·d·log d)), whose
  // cluster means become the centroids.
  const exactKmeans = (dCount: number): void => {
    if (prev.length < dCount + 1) {
      prev = new Float64Array(dCount + 1);
      cur = new Float64Array(dCount + 1);
    }
    if (arg.length < k * (dCount + 1)) arg = new Int32Array(k * (dCount + 1));
    for (let j = 1; j <= dCount; j++) {
      prev[j] = cost(0, j);
      arg[j] = 0;
    }
    const solve = (c: number, lo: number, hi: number, optLo: number, optHi: number): void => {
      if (lo > hi) return;
      const mid = (lo + hi) >>> 1;
      let best = Number.POSITIVE_INFINITY;
      let at = optLo;
      const end = Math.min(mid - 1, optHi);
      for (let i = optLo; i <= end; i++) {
        const v = prev[i] + cost(i, mid);
        if (v < best) {
          best = v;
          at = i;
        }
      }
      cur[mid] = best;
      arg[c * (dCount + 1) + mid] = at;
      solve(c, lo, mid - 1, optLo, at);
      solve(c, mid + 1, hi, at, optHi);
    };
    for (let c = 1; c < k; c++) {
      solve(c, c + 1, dCount, c, dCount - 1);
      const t = prev;
      prev = cur;
      cur = t;
    }
    // walk the split points back from the end: cluster c covers distinct values [start, end)
    let end = dCount;
    for (let c = k - 1; c >= 0; c--) {
      const start = c === 0 ? 0 : arg[c * (dCount + 1) + end];
      centroids[c] = (u1[end] - u1[start]) / (cum[end] - cum[start]);
      end = start;
    }
  };
  for (let g = firstGroup; g < endGroup; g++) {
    const base = g * groupLen;
    sorted.set(values.subarray(base, base + groupLen));
    sorted.sort();
    for (let i = 0; i < groupLen; i++) {
      prefix[i + 1] = prefix[i] + sorted[i];
      prefix2[i + 1] = prefix2[i] + sorted[i] * sorted[i];
    }
    // Weights are fp16 values, so a group holds few distinct values (typically a few thousand):
    // for LUT2/LUT4 the exact optimum is then affordable by dynamic programming over them; for
    // larger LUTs (and unusual groups) Lloyd's iterations from two starts (quantiles, even
    // spacing), keeping the better.
    let d = 0;
    for (let i = 0; i < groupLen; i++) {
      if (d === 0 || sorted[i] !== uniq[d - 1]) {
        uniq[d] = sorted[i];
        cum[d + 1] = cum[d];
        u1[d + 1] = u1[d];
        u2[d + 1] = u2[d];
        d++;
      }
      cum[d] += 1;
      u1[d] += sorted[i];
      u2[d] += sorted[i] * sorted[i];
    }
    if (d <= k) {
      for (let j = 0; j < k; j++) centroids[j] = uniq[Math.min(j, d - 1)];
    } else if (k <= 16 && k * d * Math.ceil(Math.log2(d)) <= DP_BUDGET) {
      exactKmeans(d);
    } else {
      for (let j = 0; j < k; j++)
        centroids[j] = sorted[Math.min(groupLen - 1, Math.floor(((j + 0.5) * groupLen) / k))];
      const lo = sorted[0];
      const span = sorted[groupLen - 1] - lo;
      for (let j = 0; j < k; j++) trial[j] = lo + (span * (j + 0.5)) / k;
      if (lloyd(trial) < lloyd(centroids)) centroids.set(trial);
    }
    // LUT in fp16; assignment against the rounded values so reconstruction matches what runs
    const lutBase = g * k;
    for (let j = 0; j < k; j++) {
      const h = toF16(centroids[j]);
      lut[lutBase + j] = h;
      centroids[j] = fromF16(h);
    }
    for (let j = 0; j < k - 1; j++) mids[j] = (centroids[j] + centroids[j + 1]) / 2;
    for (let i = 0; i < groupLen; i++) {
      const x = values[base + i];
      let lo = 0;
      let hi = k - 1;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (x > mids[mid]) lo = mid + 1;
        else hi = mid;
      }
      indices[base + i] = lo;
    }
  }
}

// __name is a no-op stand-in for the helper that esbuild's keepNames inserts when it transforms
// kmeansGroups (tsx does); the stringified source may refer to it.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const __name = (f) => f;
${kmeansGroups.toString()}
const d = workerData;
kmeansGroups(new Float32Array(d.values), new Uint8Array(d.indices), new Uint16Array(d.lut), d.groupLen, d.first, d.end, d.k, d.maxIterations);
parentPort.postMessage("done");
`;

/** Below this many elements the work is not worth a thread start. */
const PARALLEL_THRESHOLD = 1 << 20;

/**
 * Palettizes a weight whose first dimension is the output channel. `weight` holds fp32 values
 * (convert bf16/fp16 first). Grouping runs along the output channels: a group is `groupSize`
 * consecutive rows.
 */
export async function palettize(
  weight: Float32Array,
  shape: readonly number[],
  options: PalettizeOptions,
): Promise<Palettized> {
  const { bits } = options;
  if (![2, 4, 6, 8].includes(bits))
    throw new InvalidArgumentError(`LUT bits must be 2, 4, 6 or 8, got ${bits}`);
  const n = weight.length;
  const dout = shape[0];
  const perRow = n / dout;
  if (!Number.isInteger(perRow) || shape.reduce((a, b) => a * b, 1) !== n) {
    throw new InvalidArgumentError(`weight of ${n} values does not match shape [${shape.join(", ")}]`);
  }
  const groupSize = options.perTensor ? dout : (options.groupSize ?? 8);
  if (groupSize <= 0 || dout % groupSize !== 0) {
    throw new InvalidArgumentError(`group size ${groupSize} must divide the ${dout} output channels`);
  }
  const k = 2 ** bits;
  const groups = dout / groupSize;
  const groupLen = groupSize * perRow;
  const maxIterations = options.maxIterations ?? 300;
  const workers = Math.max(1, Math.min(options.workers ?? availableParallelism(), groups));

  let indices: Uint8Array;
  let lut: Uint16Array;
  if (workers === 1 || n < PARALLEL_THRESHOLD) {
    indices = new Uint8Array(n);
    lut = new Uint16Array(groups * k);
    kmeansGroups(weight, indices, lut, groupLen, 0, groups, k, maxIterations);
  } else {
    const values = new SharedArrayBuffer(n * 4);
    new Float32Array(values).set(weight);
    const idxBuf = new SharedArrayBuffer(n);
    const lutBuf = new SharedArrayBuffer(groups * k * 2);
    const per = Math.ceil(groups / workers);
    const jobs: Promise<void>[] = [];
    for (let w = 0; w < workers; w++) {
      const first = w * per;
      const end = Math.min(groups, first + per);
      if (first >= end) break;
      const workerData = { values, indices: idxBuf, lut: lutBuf, groupLen, first, end, k, maxIterations };
      jobs.push(
        new Promise<void>((ok, fail) => {
          const worker = new Worker(WORKER_SOURCE, { eval: true, workerData });
          worker.once("message", () => {
            void worker.terminate();
            ok();
          });
          worker.once("error", fail);
        }),
      );
    }
    await Promise.all(jobs);
    indices = new Uint8Array(idxBuf).slice();
    lut = new Uint16Array(lutBuf).slice();
  }
  const lutShape = [groups, ...shape.slice(1).map(() => 1), k, 1];
  return { bits, shape: [...shape], indices, lut, groups, lutShape };
}

/** Expands a palettized weight back to fp32 values (what constexpr_lut_to_dense produces). */
export function depalettize(p: Palettized): Float32Array {
  const n = p.indices.length;
  const k = 2 ** p.bits;
  const groupLen = n / p.groups;
  const out = new Float32Array(n);
  const table = new Float32Array(p.lut.length);
  for (let i = 0; i < table.length; i++) table[i] = f16BitsToF32(p.lut[i]);
  for (let i = 0; i < n; i++) out[i] = table[Math.floor(i / groupLen) * k + p.indices[i]];
  return out;
}

export function reconstructionError(original: Float32Array, approx: Float32Array): ReconstructionError {
  let se = 0;
  let norm = 0;
  let maxAbs = 0;
  for (let i = 0; i < original.length; i++) {
    const d = original[i] - approx[i];
    se += d * d;
    norm += original[i] * original[i];
    const a = Math.abs(d);
    if (a > maxAbs) maxAbs = a;
  }
  return { mse: se / original.length, relative: Math.sqrt(se / (norm || 1)), maxAbs };
}

/** fp16 rounding of a whole array, for comparing LUT error against plain fp16 storage. */
export function roundArrayToF16(values: Float32Array): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f16BitsToF32(f32ToF16Bits(values[i]));
  return out;
}
