/**
 * The state stays in the backend: per decode token only hidden state, position and mask go into a
 * backend and only hidden state and logits come back. The reference backend's own counter is
 * checked against the figure model.json allows, on every fixture the converter takes, in both KV
 * modes, with the golden greedy tokens unchanged.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { loadGolden } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { ChainRunner, referenceBackend, type TransferStats, transferPerToken } from "../src/index.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const work = mkdtempSync(join(tmpdir(), "runtime-ane-transfers-"));

const delta = (a: TransferStats, b: TransferStats) => ({
  predictions: b.predictions - a.predictions,
  bytesIn: b.bytesIn - a.bytesIn,
  bytesOut: b.bytesOut - a.bytesOut,
  bytesKept: b.bytesKept - a.bytesKept,
});

describe.each([
  ["tiny-tied", "io"],
  ["tiny-tied", "mlstate"],
  ["tiny-gqa", "io"],
  ["tiny-gqa", "mlstate"],
  ["tiny-trained", "io"],
  ["tiny-trained", "mlstate"],
] as const)("%s, KV %s: bytes per decode token on the reference backend", (fixture, state) => {
  it(
    "are exactly what the state plan lets through, far below the host-held state, with the golden tokens",
    async () => {
      const dir = join(work, `${fixture}-${state}`);
      await convert({
        model: join(FIXTURES, fixture),
        out: dir,
        ctx: 128,
        fuse: 1,
        lmHeadMaxRows: 512,
        state,
        body: { kind: "none" },
        lmHead: { kind: "none" },
        embed: { kind: "none" },
      });
      const g = await loadGolden(join(FIXTURES, fixture));
      const backend = referenceBackend();
      const model = await ChainRunner.load(dir, { backend });
      let out = await model.prefill(g.promptIds);
      const steps = 3;
      const before = backend.transfers();
      for (let i = 0; i < steps; i++) {
        expect("logits" in out && out.logits.indexOf(Math.max(...out.logits))).toBe(g.generatedIds[i]);
        out = await model.decode(g.generatedIds[i]);
      }
      const d = delta(before, backend.transfers());
      model.dispose();

      // every package but the embedding, whose rows the runner reads on the host
      const components = model.manifest.components.length;
      expect(d.predictions).toBe(steps * (components - 1));
      const allowed = transferPerToken(model.manifest, "backend-keeps-state", 4); // it returns fp32
      expect(d.bytesIn / steps).toBe(allowed.bytesIn);
      expect(d.bytesOut / steps).toBe(allowed.bytesOut);
      expect(d.bytesKept / steps).toBe(allowed.bytesKept);
      if (state === "mlstate") expect(allowed.bytesKept).toBe(0);
      else expect(allowed.bytesKept).toBeGreaterThan(0);
      // what crossed when the host kept every state buffer and fed it back (measured on that code:
      // tiny-tied io 1,957,392 B, mlstate 1,691,148 B; tiny-gqa io 3,567,120 B per token)
      const held = transferPerToken(model.manifest, "host-keeps-state", 4);
      const now = (d.bytesIn + d.bytesOut) / steps;
      expect(now * 50).toBeLessThan(held.bytesIn + held.bytesOut);
    },
    timeLimit(120_000),
  ); // a conversion and a run each: slow on a loaded machine
});
