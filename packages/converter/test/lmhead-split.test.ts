/** The auto-tuned lm_head split: candidates, the choice rule, and the sweep recorded in model.json. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { planPieces } from "../src/graph/index.js";
import { convert } from "../src/index.js";
import { chooseLmHeadSplit, lmHeadCandidates } from "../src/lmhead-split.js";

const tied = resolve(__dirname, "../../../fixtures/tiny-tied");

describe("lm_head split sweep", () => {
  it("offers the fewest pieces the ANE's 16384 limit allows, half of it, and more", () => {
    const V = 248320; // Qwen3.5's vocabulary
    const pieces = lmHeadCandidates(V, 8).map((rows) => planPieces(V, rows, 8).length);
    expect(pieces).toEqual([8, 16, 24, 32, 64]);
    expect(lmHeadCandidates(V, 8)[1]).toBeLessThanOrEqual(16384);
  });

  it("chooses the fastest split that stays on the ANE, the fewer pieces on a tie", () => {
    const c = (pieces: number, ms: number, offAne = 0) => ({ maxRows: 1000 / pieces, pieces, ms, offAne });
    // the over-limit split estimates faster (a CPU fallback) but is not taken
    expect(chooseLmHeadSplit([c(8, 4.4, 16), c(16, 5.3), c(32, 5.31)]).pieces).toBe(16);
    expect(chooseLmHeadSplit([c(16, 5.3), c(24, 4.0), c(32, 4.02)]).pieces).toBe(24);
    // only when nothing stays on the ANE does the fastest of the rest win
    expect(chooseLmHeadSplit([c(1, 3, 2), c(2, 2, 2)]).pieces).toBe(2);
  });

  it(
    "convert --lmhead-rows auto records the sweep and builds the chosen split",
    async () => {
      const out = join(mkdtempSync(join(tmpdir(), "lmhead-auto-")), "m");
      const lines: string[] = [];
      const r = await convert({
        model: tied,
        out,
        ctx: 128,
        lmHeadMaxRows: "auto",
        onLog: (l) => lines.push(l),
      });
      const m = await readChainManifest(r.out);
      const split = m.lmHeadSplit;
      if (process.platform !== "darwin") expect(split?.chosenBy).toBe("costplan-estimate");
      expect(split?.candidates.length).toBeGreaterThan(1);
      const head = m.components.find((c) => c.kind === "lm_head");
      expect(head?.io.lmHead?.pieces.length).toBe(split?.pieces);
      expect(Math.max(...(head?.io.lmHead?.pieces.map((p) => p.rows) ?? []))).toBeLessThanOrEqual(
        split?.maxRows ?? 0,
      );
      expect(lines.some((l) => /lm_head split: chose/.test(l))).toBe(true);
      // a fixed limit records no sweep
      const fixed = await convert({ model: tied, out: `${out}-fixed`, ctx: 128, lmHeadMaxRows: 512 });
      expect((await readChainManifest(fixed.out)).lmHeadSplit).toBeUndefined();
    },
    timeLimit(120_000),
  );
});
