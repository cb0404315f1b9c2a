/**
 * Matrix products for linear, matmul, conv and attention: out = x · wᵀ ("NT" form; w is
 * row-major [N, K] as in `linear.weight`). The decode case (M = 1 against a large weight) is
 * the hot path; it runs in the WebAssembly SIMD kernel (simd.ts) when available, else in a
 * blocked scalar kernel (4 weight rows per pass, 4 accumulators, no allocation).
 */
import { PackedWeight } from "./packed.js";
import { simdHeap, type WasmHeap } from "./simd.js";

/** Below this many weight elements the copy into the heap costs more than it saves. */
const WASM_MIN_NK = 4096;

/**
 * Scalar kernel: out[m*ldo + n] = Σ_k x[xo + m*K + k] · w[wo + n*K + k] for n in [n0, n1).
 */
export function gemmNTScalar(
  x: Float32Array,
  xo: number,
  w: Float32Array,
  wo: number,
  out: Float32Array,
  oo: number,
  ldo: number,
  M: number,
  n0: number,
  n1: number,
  K: number,
): void {
  for (let m = 0; m < M; m++) {
    const xr = xo + m * K;
    const orow = oo + m * ldo;
    let n = n0;
    for (; n + 4 <= n1; n += 4) {
      const r0 = wo + n * K;
      const r1 = r0 + K;
      const r2 = r1 + K;
      const r3 = r2 + K;
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      for (let k = 0; k < K; k++) {
        const xv = x[xr + k];
        a0 += xv * w[r0 + k];
        a1 += xv * w[r1 + k];
        a2 += xv * w[r2 + k];
        a3 += xv * w[r3 + k];
      }
      out[orow + n] = a0;
      out[orow + n + 1] = a1;
      out[orow + n + 2] = a2;
      out[orow + n + 3] = a3;
    }
    for (; n < n1; n++) {
      const r = wo + n * K;
      let a = 0;
      for (let k = 0; k < K; k++) a += x[xr + k] * w[r + k];
      out[orow + n] = a;
    }
  }
}

/** Heap copies of constant weights that were not materialised in the heap. */
const pinned = new WeakMap<Float32Array, Float32Array>();

export interface GemmOptions {
  /** `w` is a constant (a weight): copy it into the heap once and keep it there. */
  readonly constWeight?: boolean;
  /** Added to every output row. */
  readonly bias?: Float32Array;
}

/**
 * out[m*N + n] = Σ_k x[m*K + k] · w[n*K + k] (+ bias[n]); x [M, K], w [N, K], out [M, N].
 * A packed weight gives the same bits as its expanded values would (PackedWeight.fits holds
 * for every packed weight, so the expanded one would take the SIMD path too).
 */
export function gemmNT(
  x: Float32Array,
  w: Float32Array | PackedWeight,
  out: Float32Array,
  M: number,
  N: number,
  K: number,
  opts: GemmOptions = {},
): void {
  const n4 = N & ~3;
  if (w instanceof PackedWeight) {
    if (!w.product(x, out, M, N, n4)) {
      gemmNT(x, w.dense(), out, M, N, K, opts);
      return;
    }
    if (n4 < N) {
      // the dense path's scalar tail, on the last rows decoded
      const tail = new Float32Array((N - n4) * K);
      w.readRows(n4, N - n4, tail);
      gemmNTScalar(x, 0, tail, -n4 * K, out, 0, N, M, n4, N, K);
    }
  } else {
    const h = K % 4 === 0 && n4 > 0 && N * K >= WASM_MIN_NK ? simdHeap() : null;
    if (!h || !gemmWasm(h, x, w, out, M, N, K, n4, opts.constWeight === true)) {
      gemmNTScalar(x, 0, w, 0, out, 0, N, M, 0, N, K);
    } else if (n4 < N) {
      gemmNTScalar(x, 0, w, 0, out, 0, N, M, n4, N, K);
    }
  }
  const bias = opts.bias;
  if (bias) {
    for (let m = 0; m < M; m++) {
      const o = m * N;
      for (let n = 0; n < N; n++) out[o + n] += bias[n];
    }
  }
}

function gemmWasm(
  h: WasmHeap,
  x: Float32Array,
  w: Float32Array,
  out: Float32Array,
  M: number,
  N: number,
  K: number,
  n4: number,
  constWeight: boolean,
): boolean {
  let wOff = h.offsetOf(w);
  if (wOff === undefined && constWeight) {
    let copy = pinned.get(w);
    if (!copy) {
      copy = h.f32(w.length);
      if (!copy) return false;
      copy.set(w);
      pinned.set(w, copy);
    }
    wOff = h.offsetOf(copy);
  }
  if (wOff === undefined) {
    const off = h.wScratch.ensure(h, N * K * 4);
    if (off === undefined) return false;
    h.view(off, N * K).set(w.subarray(0, N * K));
    wOff = off;
  }
  const xOff = h.xScratch.ensure(h, M * K * 4);
  const oOff = h.outScratch.ensure(h, M * N * 4);
  if (xOff === undefined || oOff === undefined) return false;
  h.view(xOff, M * K).set(x.subarray(0, M * K));
  h.nt(M, xOff, wOff, oOff, n4, K * 4, N * 4);
  const o = h.view(oOff, M * N);
  if (n4 === N) out.set(o);
  else for (let r = 0; r < M; r++) out.set(o.subarray(r * N, r * N + n4), r * N);
  return true;
}
