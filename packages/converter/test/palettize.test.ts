import { describe, expect, it } from "vitest";
import { depalettize, palettize, reconstructionError, roundArrayToF16 } from "../src/palettize.js";

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

  it("rejects bad options with clear errors", async () => {
    const w = new Float32Array(12);
    await expect(palettize(w, [3, 4], { bits: 4, groupSize: 2 })).rejects.toThrow(
      /must divide the 3 output channels/,
    );
    await expect(palettize(w, [3, 4], { bits: 3 as 4 })).rejects.toThrow(/2, 4, 6 or 8/);
    await expect(palettize(w, [4, 4], { bits: 4 })).rejects.toThrow(/does not match shape/);
  });
});
