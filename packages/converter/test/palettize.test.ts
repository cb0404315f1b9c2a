import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from "@anemll-qwen35/core";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { dpInWasm, type KmeansValues, kmeansGroups, useJsDp } from "../src/quant/kmeans.js";
import { KmeansPool } from "../src/quant/kmeans-pool.js";
import {
  depalettize,
  palettize,
  reconstructionError,
  reconstructionErrorOf,
  roundArrayToF16,
} from "../src/quant/palettize.js";

/** Deterministic pseudo-normal values (sum of uniforms), independent of the code under test. */
function gaussian(n: number, seed: number, scale = 0.05): Float32Array {
  let s = seed >>> 0;
  const u = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (u() + u() + u() + u() - 2) * scale;
  return out;
}

/** Exact optimal 1-D k-means SSE by dynamic programming (O(K n²)); an independent oracle. */
function optimalSse(values: Float32Array, k: number): number {
  const v = Array.from(values).sort((a, b) => a - b);
  const n = v.length;
  const p1 = [0];
  const p2 = [0];
  for (const x of v) {
    p1.push(p1.at(-1)! + x);
    p2.push(p2.at(-1)! + x * x);
  }
  const cost = (i: number, j: number) => {
    const m = j - i;
    const s = p1[j] - p1[i];
    return p2[j] - p2[i] - (s * s) / m;
  };
  let prev = new Array(n + 1).fill(Number.POSITIVE_INFINITY);
  prev[0] = 0;
  for (let c = 1; c <= k; c++) {
    const cur = new Array(n + 1).fill(Number.POSITIVE_INFINITY);
    cur[0] = 0;
    for (let j = 1; j <= n; j++)
      for (let i = c - 1; i < j; i++) cur[j] = Math.min(cur[j], prev[i] + cost(i, j));
    prev = cur;
  }
  return prev[n];
}

describe("palettize", () => {
  it("finds the optimal 1-D k-means of each group (up to the fp16 rounding of the LUT)", async () => {
    const w = gaussian(8 * 24, 7);
    const p = await palettize(w, [8, 24], { bits: 2, groupSize: 4, workers: 1 });
    expect(p.lutShape).toEqual([2, 1, 4, 1]);
    const approx = depalettize(p);
    for (let g = 0; g < 2; g++) {
      const slice = (a: Float32Array) => a.subarray(g * 96, (g + 1) * 96);
      const err = reconstructionError(slice(w), slice(approx));
      const best = optimalSse(slice(w), 4) / 96;
      expect(err.mse).toBeLessThanOrEqual(best * 1.001 + 1e-12);
    }
  });

  it("reconstructs a tensor with at most 2^bits distinct fp16 values exactly", async () => {
    const levels = [-0.5, -0.125, 0, 0.25, 1, 2, 3, 4];
    const w = new Float32Array(64).map((_, i) => levels[(i * 5) % levels.length]);
    const p = await palettize(w, [8, 8], { bits: 4, perTensor: true });
    expect(p.groups).toBe(1);
    expect(reconstructionError(w, depalettize(p)).maxAbs).toBe(0);
  });

  it("is deterministic, and workers give bit-identical results to the main thread", async () => {
    const w = gaussian(64 * 16384, 3);
    const a = await palettize(w, [64, 16384], { bits: 4, workers: 1 });
    const b = await palettize(w, [64, 16384], { bits: 4, workers: 2 });
    expect(Buffer.from(b.indices).equals(Buffer.from(a.indices))).toBe(true);
    expect(Buffer.from(b.lut.buffer).equals(Buffer.from(a.lut.buffer))).toBe(true);
  });

  it("loses more with fewer bits and stays worse than plain fp16", async () => {
    const w = gaussian(32 * 256, 11);
    const errs: number[] = [];
    for (const bits of [2, 4, 6, 8] as const) {
      errs.push(reconstructionError(w, depalettize(await palettize(w, [32, 256], { bits }))).mse);
    }
    for (let i = 1; i < errs.length; i++) expect(errs[i]).toBeLessThan(errs[i - 1]);
    expect(reconstructionError(w, roundArrayToF16(w)).mse).toBeLessThan(errs[3]);
  });

  it("clusters stored bf16/fp16 patterns exactly as their fp32 values (histogram vs sorting path)", async () => {
    const w = gaussian(16 * 512, 5);
    w[17] = -0; // −0 and +0 are one value
    w[18] = 0;
    for (const format of ["bf16", "fp16"] as const) {
      const bits = Uint16Array.from(w, format === "bf16" ? f32ToBf16Bits : f32ToF16Bits);
      const values = Float32Array.from(bits, format === "bf16" ? bf16BitsToF32 : f16BitsToF32);
      for (const k of [4, 16, 64]) {
        const run = (v: KmeansValues) => {
          const task = {
            values: v,
            groupLen: 4 * 512,
            first: 0,
            end: 4,
            k,
            maxIterations: 300,
            indices: new Uint8Array(w.length),
            lut: new Uint16Array(4 * k),
            stats: new Float64Array(12),
          };
          kmeansGroups(task);
          return task;
        };
        const a = run({ format, bits });
        const b = run({ format: "fp32", values });
        expect(Buffer.from(a.indices).equals(Buffer.from(b.indices))).toBe(true);
        expect(Buffer.from(a.lut.buffer).equals(Buffer.from(b.lut.buffer))).toBe(true);
        // the error summed over the histogram is the element-by-element one
        const p = await palettize({ dtype: format === "bf16" ? "bf16" : "f16", data: bits }, [16, 512], {
          bits: Math.log2(k) as 4,
          groupSize: 4,
          workers: 1,
        });
        const direct = reconstructionError(values, depalettize(p));
        expect(reconstructionErrorOf(p).mse).toBeCloseTo(direct.mse, 15);
        expect(reconstructionErrorOf(p).maxAbs).toBe(direct.maxAbs);
      }
    }
  });

  it("the WebAssembly DP gives the JavaScript DP's split points exactly", async () => {
    if (!dpInWasm()) return; // nothing to compare where WebAssembly SIMD is unavailable
    const w = Uint16Array.from(gaussian(32 * 1024, 9), f32ToBf16Bits);
    const run = async (js: boolean) => {
      useJsDp(js);
      try {
        return await palettize({ dtype: "bf16", data: w }, [32, 1024], { bits: 4, workers: 1 });
      } finally {
        useJsDp(false);
      }
    };
    const [a, b] = [await run(true), await run(false)];
    expect(Buffer.from(a.indices).equals(Buffer.from(b.indices))).toBe(true);
    expect(Buffer.from(a.lut.buffer).equals(Buffer.from(b.lut.buffer))).toBe(true);
  });

  it("pools of any size give the same bytes, and an abort stops a pool's work at once", async () => {
    const w = Uint16Array.from(gaussian(256 * 1024, 13), f32ToBf16Bits);
    const input = { dtype: "bf16" as const, data: w };
    const ref = await palettize(input, [256, 1024], { bits: 4, workers: 1 });
    await using one = new KmeansPool(1);
    await using pool = new KmeansPool(3);
    for (const p of [
      await palettize(input, [256, 1024], { bits: 4, pool: one }),
      await palettize(input, [256, 1024], { bits: 4, pool }),
    ]) {
      expect(Buffer.from(p.indices).equals(Buffer.from(ref.indices))).toBe(true);
      expect(Buffer.from(p.lut.buffer).equals(Buffer.from(ref.lut.buffer))).toBe(true);
    }
    const ac = new AbortController();
    const t0 = performance.now();
    const run = palettize(input, [256, 1024], { bits: 4, pool, signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    await expect(run).rejects.toThrow(/abort/i);
    expect(performance.now() - t0).toBeLessThan(timeLimit(2000));
    // the pool replaces the stopped workers
    const again = await palettize(input, [256, 1024], { bits: 4, pool });
    expect(Buffer.from(again.indices).equals(Buffer.from(ref.indices))).toBe(true);
  });

  it("rejects NaN and infinite weights, naming the group", async () => {
    const w = gaussian(8 * 64, 1);
    w[3 * 64 + 5] = Number.NaN;
    await expect(palettize(w, [8, 64], { bits: 4, groupSize: 2, workers: 1 })).rejects.toThrow(
      /group 1 holds a non-finite value/,
    );
    const bits = Uint16Array.from(gaussian(8 * 64, 1), f32ToBf16Bits);
    bits[7] = 0x7f80; // +Inf
    await expect(
      palettize({ dtype: "bf16", data: bits }, [8, 64], { bits: 4, groupSize: 2, workers: 1 }),
    ).rejects.toThrow(/group 0 holds a non-finite value/);
  });

  it("rejects bad options with clear errors", async () => {
    const w = new Float32Array(12);
    await expect(palettize(w, [3, 4], { bits: 4, groupSize: 2 })).rejects.toThrow(
      /must divide the 3 output channels/,
    );
    await expect(palettize(w, [3, 4], { bits: 3 as 4 })).rejects.toThrow(/2, 4, 6 or 8/);
    await expect(palettize(w, [4, 4], { bits: 4 })).rejects.toThrow(/does not match shape/);
  });
});
