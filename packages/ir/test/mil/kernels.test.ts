import { f16BitsToF32, f32ToF16Bits } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { countNonFinite, roundF16InPlace } from "../../src/mil/fp16.js";
import { gemmNT, gemmNTScalar } from "../../src/mil/kernels/gemm.js";
import { allocWeightF32, HEAP_MIN_ELEMENTS, simdHeap } from "../../src/mil/kernels/simd.js";
import { broadcastPlan, expandTo, permute } from "../../src/mil/shape.js";

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296 - 0.5;
  };
}

describe("roundF16InPlace", () => {
  it("matches the exact fp32 -> fp16 conversion on random and edge values", () => {
    const r = lcg(7);
    const vals: number[] = [
      0,
      -0,
      1,
      -1,
      65504,
      65519.99,
      65520,
      -65520,
      1e6,
      2 ** -14,
      2 ** -15,
      2 ** -24,
      2 ** -25,
      3 * 2 ** -26,
      2 ** -26,
      1e-8,
    ];
    vals.push(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN);
    for (let i = 0; i < 20000; i++) vals.push(r() * 2 ** ((i % 40) - 28));
    const a = Float32Array.from(vals);
    const want = Array.from(a, (v) => f16BitsToF32(f32ToF16Bits(v)));
    roundF16InPlace(a);
    for (let i = 0; i < a.length; i++) {
      if (Number.isNaN(want[i])) expect(a[i]).toBeNaN();
      else if (a[i] !== want[i] || Object.is(a[i], -0) !== Object.is(want[i], -0))
        expect.fail(`value ${vals[i]}: got ${a[i]}, want ${want[i]}`);
    }
    expect(countNonFinite(a)).toBe(3 + 2 + 1); // 65520, -65520, 1e6 overflow; ±inf; NaN
  });

  it("flushes subnormals when asked", () => {
    const a = Float32Array.from([2 ** -20, -(2 ** -16), 2 ** -14, 1]);
    roundF16InPlace(a, true);
    expect(Array.from(a)).toEqual([0, -0, 2 ** -14, 1]);
  });
});

describe("gemmNT", () => {
  const cases: [number, number, number][] = [
    [1, 4, 4], // below the SIMD threshold
    [1, 130, 64], // matvec, SIMD + 2 scalar tail rows
    [2, 64, 128], // one row pair
    [5, 67, 96], // pairs + last row + tail rows
    [3, 40, 30], // K not a multiple of 4: scalar
  ];
  for (const [M, N, K] of cases) {
    it(`matches a float64 reference for M=${M} N=${N} K=${K}`, () => {
      const r = lcg(M * 1000 + N * 10 + K);
      const x = Float32Array.from({ length: M * K }, r);
      const w = Float32Array.from({ length: N * K }, r);
      const bias = Float32Array.from({ length: N }, r);
      const out = new Float32Array(M * N);
      gemmNT(x, w, out, M, N, K, { constWeight: true, bias });
      for (let m = 0; m < M; m++) {
        for (let n = 0; n < N; n++) {
          let acc = bias[n];
          for (let k = 0; k < K; k++) acc += x[m * K + k] * w[n * K + k];
          expect(Math.abs(out[m * N + n] - acc)).toBeLessThan(1e-5 * K);
        }
      }
      // the scalar kernel agrees too
      const ref = new Float32Array(M * N);
      gemmNTScalar(x, 0, w, 0, ref, 0, N, M, 0, N, K);
      for (let i = 0; i < ref.length; i++)
        expect(Math.abs(ref[i] + bias[i % N] - out[i])).toBeLessThan(1e-5 * K);
    });
  }

  it("splits large products over the worker threads with the same result", () => {
    // 1028 x 1024 fp32 = 4.1 MB of weights: above the threading threshold, with 4 rows left over
    const M = 3;
    const N = 1028;
    const K = 1024;
    const r = lcg(99);
    const w = allocWeightF32(N * K);
    for (let i = 0; i < w.length; i++) w[i] = r();
    const x = Float32Array.from({ length: M * K }, r);
    const out = new Float32Array(M * N);
    const before = simdHeap()?.parallelRuns ?? 0;
    gemmNT(x, w, out, M, N, K, { constWeight: true });
    if ((simdHeap()?.threads ?? 1) > 1) expect(simdHeap()?.parallelRuns).toBe(before + 1);
    const ref = new Float32Array(M * N);
    gemmNTScalar(x, 0, w, 0, ref, 0, N, M, 0, N, K);
    let worst = 0;
    for (let i = 0; i < ref.length; i++) worst = Math.max(worst, Math.abs(ref[i] - out[i]));
    expect(worst).toBeLessThan(1e-3);
    expect(out.every((v) => v !== 0)).toBe(true); // every row block was computed
  });

  it("runs in the WebAssembly SIMD heap when available", () => {
    const h = simdHeap();
    if (!h) {
      // Node >= 16.4 ships WebAssembly SIMD and shared memory, so this is unexpected but not fatal
      expect(process.env.ANEMLL_NO_WASM).toBeDefined();
      return;
    }
    const w = allocWeightF32(HEAP_MIN_ELEMENTS);
    expect(h.offsetOf(w)).toBeGreaterThan(0);
    const small = allocWeightF32(8);
    expect(h.offsetOf(small)).toBeUndefined();
    // freed blocks are reused
    const a = h.alloc(1 << 20) as number;
    h.release(a);
    expect(h.alloc(1 << 19)).toBe(a);
  });
});

describe("shape helpers", () => {
  it("broadcastPlan merges dims and zeroes broadcast strides", () => {
    expect(broadcastPlan([16, 128, 128], [16, 128, 128], [16, 128, 1])).toEqual({
      dims: [2048, 128],
      strides: [
        [128, 1],
        [1, 0],
      ],
    });
    expect(broadcastPlan([4, 5], [4, 5], [])).toEqual({ dims: [20], strides: [[1], [0]] });
  });

  it("expandTo and permute move data like numpy", () => {
    const x = Float32Array.from([1, 2, 3]);
    expect(Array.from(expandTo(x, [3, 1], [3, 2]))).toEqual([1, 1, 2, 2, 3, 3]);
    expect(Array.from(expandTo(x, [3], [2, 3]))).toEqual([1, 2, 3, 1, 2, 3]);
    const y = Float32Array.from([0, 1, 2, 3, 4, 5]); // [2, 3]
    expect(Array.from(permute(y, [2, 3], [1, 0]))).toEqual([0, 3, 1, 4, 2, 5]);
    const z = Float32Array.from({ length: 24 }, (_, i) => i); // [2, 3, 4] -> [4, 2, 3]
    const p = permute(z, [2, 3, 4], [2, 0, 1]);
    expect(p[1 * 6 + 1 * 3 + 2]).toBe(z[1 * 12 + 2 * 4 + 1]);
  });
});
