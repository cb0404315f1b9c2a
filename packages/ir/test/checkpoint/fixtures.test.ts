/**
 * The tiny real checkpoints made by tools/oracle (fixtures/tiny-*: official VL layout, two shards
 * + index, F32 A_log and gated norm) open through Qwen35Checkpoint with every tensor present and
 * shaped as the config says.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { numel, tensorToFloat32 } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  checkMtpWeights,
  mtpLayerCount,
  Qwen35Checkpoint,
  qwen35MtpParameters,
  qwen35Parameters,
} from "../../src/checkpoint/index.js";

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

  it("tiny-trained carries a complete, learned MTP head; the random fixtures a partial one that readers drop", async (ctx) => {
    ctx.skip(!existsSync(join(FIXTURES, "tiny-trained", "config.json")), "fixtures not generated yet");
    for (const name of ["tiny-tied", "tiny-gqa", "tiny-moe", "tiny-trained"]) {
      await using ck = await Qwen35Checkpoint.open(join(FIXTURES, name));
      const r = checkMtpWeights(ck.config, ck.tensors);
      expect(r.present, name).toBe(true);
      expect(r.layers, name).toBe(1);
      expect(
        ck.names().some((n) => n.startsWith("mtp.")),
        name,
      ).toBe(false); // the text model's view drops it
      if (name !== "tiny-trained") {
        expect(r.complete, name).toBe(false); // a few norms only (tools/oracle/checkpoint.py draw_extras)
        continue;
      }
      expect(r.problems, name).toEqual([]);
      expect(r.complete, name).toBe(true);
      for (const p of qwen35MtpParameters(ck.config, { layers: mtpLayerCount(ck.config) })) {
        const info = ck.tensors.info(p.canonical);
        expect(info.dtype, p.canonical).toBe("bf16");
        // learned, not left at its initialisation: zero-centred norms moved off 0, matrices off N(0, 0.02)
        const v = tensorToFloat32(await ck.tensors.read(p.canonical));
        const rms = Math.sqrt(v.reduce((a, x) => a + x * x, 0) / v.length);
        if (p.kind === "norm") expect(rms, p.canonical).toBeGreaterThan(1e-3);
        else expect(Math.abs(rms - 0.02), p.canonical).toBeGreaterThan(1e-3);
      }
    }
  });
});
