import { InvalidArgumentError } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { kvWriteBound, prefillMask, ringMask, ringPrefillMask, ringRow } from "../src/chain/contract.js";
import { decodeMask, MASK_NEG } from "../src/chain/index.js";

describe("ring-buffer KV layout", () => {
  it("writes row p below ctx, then cycles the rows after the sinks", () => {
    const rows = Array.from({ length: 20 }, (_, p) => ringRow(8, 2, p));
    expect(rows).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7]);
    expect(Array.from({ length: 12 }, (_, p) => ringRow(4, 0, p))).toEqual([
      0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3,
    ]);
  });

  it("masks like decode below ctx; past it, every row but the one being replaced (io), all rows (mlstate)", () => {
    for (const p of [0, 3, 7]) {
      expect(ringMask("io", 8, 2, p)).toEqual(decodeMask("io", 8, p));
      expect(ringMask("mlstate", 8, 2, p)).toEqual(decodeMask("mlstate", 8, p));
    }
    const io = ringMask("io", 8, 2, 9); // replaces row 3, which held position 3 (9 − 6)
    expect(Array.from(io).map((v) => (v === 0 ? 1 : 0))).toEqual([1, 1, 1, 0, 1, 1, 1, 1, 1]);
    expect(io[3]).toBe(MASK_NEG);
    expect(ringMask("mlstate", 8, 2, 9).every((v) => v === 0)).toBe(true);
  });

  it("sees exactly the sinks and the last ctx − sinks tokens", () => {
    const ctx = 8;
    const sinks = 2;
    const holder = new Map<number, number>(); // row → position it holds
    for (let p = 0; p < 30; p++) {
      const m = ringMask("io", ctx, sinks, p);
      const seen = [...holder].filter(([row]) => m[row] === 0).map(([, pos]) => pos);
      seen.push(p); // the last key is the token itself
      const want = Array.from({ length: p + 1 }, (_, j) => j).filter(
        (j) => j < sinks || j > p - (ctx - sinks),
      );
      expect(seen.sort((a, b) => a - b)).toEqual(want);
      holder.set(ringRow(ctx, sinks, p), p);
    }
  });

  it("refuses sinks outside [0, ctx) and negative positions", () => {
    expect(() => ringRow(8, 8, 0)).toThrow(InvalidArgumentError);
    expect(() => ringMask("io", 8, -1, 0)).toThrow(InvalidArgumentError);
    expect(() => ringRow(8, 2, -1)).toThrow(InvalidArgumentError);
  });
});

describe("prefill chunks past ctx with ring KV, and mlstate write bounds", () => {
  it("each chunk query sees what a decode step at its position would: the ring mask row by row", () => {
    const ctx = 8;
    const sinks = 2;
    const T = 3;
    for (const p of [8, 10, 13]) {
      const m = ringPrefillMask(ctx, sinks, T, p);
      const row = ringRow(ctx, sinks, p);
      if (row + T > ctx) continue; // the runner splits chunks at the wrap
      for (let i = 0; i < T; i++) {
        const got = Array.from(m.subarray(i * (ctx + T), (i + 1) * (ctx + T)));
        // cache rows: hidden where the chunk's tokens ≤ i replace them
        const want = Array.from({ length: ctx + T }, (_, j) => {
          if (j < ctx) return j >= row && j <= row + i ? MASK_NEG : 0;
          return j - ctx <= i ? 0 : MASK_NEG;
        });
        expect(got).toEqual(want);
      }
    }
    // below ctx it is the plain prefill mask of the rows that fit
    expect(ringPrefillMask(ctx, sinks, T, 2)).toEqual(prefillMask(ctx, T, 2));
  });

  it("a short chunk at the window's end fits by its real rows; kv_write bounds", () => {
    expect(() => prefillMask(8, 4, 6)).toThrow(InvalidArgumentError);
    expect(prefillMask(8, 4, 6, 2)).toHaveLength(4 * 12);
    const rows = [4, 2, 3, 16];
    expect(Array.from(kvWriteBound({ bound: "begin", rows }, 7))).toEqual([0, 0, 7, 0]);
    expect(Array.from(kvWriteBound({ bound: "end", rows }, 7))).toEqual([4, 2, 10, 16]);
  });
});
