/** The host's RoPE angles: HF's fp32 computation at any position, no table and no limit. */
import { describe, expect, it } from "vitest";
import { ropeCosSin } from "../src/chain/index.js";

describe("ropeCosSin", () => {
  const spec = { rotaryDim: 8, theta: 1e7 };
  it("row r is position positions[r]: the same values alone or in a batch, cos² + sin² = 1", () => {
    const all = ropeCosSin(spec, [0, 1, 2, 3, 4]);
    const one = ropeCosSin(spec, [3]);
    expect(Array.from(one.cos)).toEqual(Array.from(all.cos.subarray(12, 16)));
    expect(Array.from(one.sin)).toEqual(Array.from(all.sin.subarray(12, 16)));
    expect(all.cos[0]).toBe(1);
    expect(all.sin[0]).toBe(0);
    for (let i = 0; i < all.cos.length; i++) expect(all.cos[i] ** 2 + all.sin[i] ** 2).toBeCloseTo(1, 6);
  });

  it("positions past any context length: angle = fp32(p · inv_freq) with HF's fp32 inv_freq", () => {
    const p = 1_000_003;
    const { cos, sin } = ropeCosSin(spec, [p]);
    for (let i = 0; i < 4; i++) {
      const invFreq = Math.fround(1 / Math.fround(1e7 ** Math.fround((2 * i) / 8)));
      const angle = Math.fround(p * invFreq);
      expect(cos[i]).toBe(Math.fround(Math.cos(angle)));
      expect(sin[i]).toBe(Math.fround(Math.sin(angle)));
    }
  });
});
