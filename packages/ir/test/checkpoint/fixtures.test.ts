/**
 * The tiny real checkpoints made by tools/oracle (fixtures/tiny-*: official VL layout, two shards
 * + index, F32 A_log and gated norm) open through Qwen35Checkpoint with every tensor present and
 * shaped as the config says.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { numel } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { Qwen35Checkpoint, qwen35Parameters } from "../../src/checkpoint/index.js";

const FIXTURES = fileURLToPath(new URL("../../../../fixtures/", import.meta.url));

describe("fixture checkpoints", () => {
  for (const name of ["tiny-tied", "tiny-gqa", "tiny-moe", "tiny-trained"]) {
    const dir = join(FIXTURES, name);
    it(`${name}: all tensors present with the config's shapes`, async (ctx) => {
      ctx.skip(!existsSync(join(dir, "config.json")), `fixtures not generated yet (${dir})`);
      await using ck = await Qwen35Checkpoint.open(dir); // validates presence, shapes and dtypes
      expect(ck.report.problems).toEqual([]);
      expect(ck.tensors.indexFile).toBeDefined();
      expect(ck.tensors.shardFiles.length).toBeGreaterThanOrEqual(2);
      const expected = qwen35Parameters(ck.config, {
        tied: ck.tiedEmbeddings,
        expertLayout: (i) =>
          ck.weightMap.toHf.has(`layers.${i}.mlp.experts.gate_up_proj`) ? "fused" : "per-expert",
      });
      for (const { canonical, shape } of expected) {
        const t = await ck.get(canonical);
        expect(t.shape, canonical).toEqual(shape);
        expect(t.data.length, canonical).toBe(numel(shape));
        if (/linear_attn\.(A_log|norm\.weight)$/.test(canonical)) expect(t.dtype, canonical).toBe("f32");
      }
      if (name === "tiny-tied" || name === "tiny-trained") expect(ck.tiedEmbeddings).toBe(true);
      if (name === "tiny-moe") expect(ck.config.moe).toBeDefined();
    });
  }
});
