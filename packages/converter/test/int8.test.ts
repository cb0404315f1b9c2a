import { describe, expect, it } from "vitest";
import { dequantizeInt8, quantizeInt8 } from "../src/quant/int8.js";
import { reconstructionError } from "../src/quant/palettize.js";

describe("int8 linear quantization", () => {
  it("keeps every value within half a step of its block's scale", () => {
    const w = new Float32Array(4 * 64).map((_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
    const q = quantizeInt8(w, [4, 64], 32);
    expect(q.scaleShape).toEqual([4, 2]);
    const back = dequantizeInt8(q);
    for (let i = 0; i < w.length; i++) {
      const r = Math.floor(i / 64);
      const b = Math.floor((i % 64) / 32);
      let maxAbs = 0;
      for (let j = 0; j < 32; j++) maxAbs = Math.max(maxAbs, Math.abs(w[r * 64 + b * 32 + j]));
      expect(Math.abs(back[i] - w[i])).toBeLessThanOrEqual((maxAbs / 127) * 0.5005 + 1e-7);
    }
    expect(reconstructionError(w, back).relative).toBeLessThan(0.01);
  });

  it("maps the largest magnitude to ±127 and handles all-zero rows", () => {
    const w = new Float32Array([0, 0, 0, 0, -2, 1, 0.5, 2]);
    const q = quantizeInt8(w, [2, 4]);
    expect(Array.from(q.data.subarray(4))).toEqual([-127, 64, 32, 127]);
    expect(Array.from(dequantizeInt8(q).subarray(0, 4))).toEqual([0, 0, 0, 0]);
    expect(() => quantizeInt8(w, [2, 4], 3)).toThrow(/must divide Din/);
  });
});
