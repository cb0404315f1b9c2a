/**
 * The ANE's per-dimension limit at conversion: wide MLPs (Qwen3.5-27B's 17,408 channels) are split
 * into pieces within it, and whatever conv still breaks it is refused with the tensor named.
 * The checkpoint is in memory: tiny dims except the one under test, deterministic values.
 */
import { tensor } from "@anemll-qwen35/core";
import { parseQwen35Config, qwen35ParameterMap } from "@anemll-qwen35/ir/checkpoint";
import { tinyConfigJson } from "@anemll-qwen35/testkit";
import { describe, expect, it } from "vitest";
import {
  ANE_MAX_DIM,
  buildComponent,
  type WeightEncodingReport,
  type WeightSource,
} from "../src/graph/index.js";
import { AneLimitError } from "../src/index.js";

function source(text: Record<string, unknown>): WeightSource {
  const json = tinyConfigJson({ tied: false });
  const config = parseQwen35Config({ ...json, text_config: { ...(json.text_config as object), ...text } });
  const params = qwen35ParameterMap(config, { tied: false });
  return {
    config,
    tiedEmbeddings: false,
    get: async (name) => {
      const p = params.get(name);
      if (!p) throw new Error(`no tensor ${name}`);
      const n = p.shape.reduce((a, b) => a * b, 1);
      return tensor(
        "f32",
        p.shape,
        Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 0.05),
      );
    },
  };
}

describe("ANE size limits", () => {
  it("splits an MLP of 17,408 channels into 2 × 8,704; with no split the check names the tensor", async () => {
    const ck = source({ intermediate_size: 17408 });
    const seen: WeightEncodingReport[] = [];
    const spec = { kind: "superblocks", first: 0, count: 1 } as const;
    await buildComponent(ck, spec, { ctx: 8, dtype: "fp32", onWeight: (r) => seen.push(r) });
    for (const part of ["gate_proj", "up_proj"])
      expect(seen.filter((r) => r.tensor === `layers.0.mlp.${part}.weight`).map((r) => r.shape[0])).toEqual([
        8704, 8704,
      ]);
    expect(seen.filter((r) => r.tensor === "layers.0.mlp.down_proj.weight").map((r) => r.shape)).toEqual([
      [16, 8704, 1, 1],
      [16, 8704, 1, 1],
    ]);
    expect(seen.every((r) => r.shape.every((d) => d <= ANE_MAX_DIM))).toBe(true);

    const e = await buildComponent(ck, spec, { ctx: 8, dtype: "fp32", mlpMaxChannels: 17408 }).catch(
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(AneLimitError);
    expect((e as AneLimitError).code).toBe("E_ANE_LIMIT");
    expect((e as AneLimitError).tensor).toBe("layers.0.mlp.gate_proj.weight");
    expect((e as Error).message).toMatch(/17408, 16, 1, 1/);
    expect((e as Error).message).toMatch(/16384/);
  });

  it("refuses an lm_head piece over the limit, naming lm_head; the default split passes", async () => {
    const ck = source({ vocab_size: 20000 });
    const ok = await buildComponent(ck, { kind: "lm_head" }, { ctx: 8, dtype: "fp32" });
    expect(ok.io.lmHead?.pieces.map((p) => p.rows)).toEqual([10000, 10000]);
    const e = await buildComponent(
      ck,
      { kind: "lm_head" },
      { ctx: 8, dtype: "fp32", lmHeadMaxRows: 20000 },
    ).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(AneLimitError);
    expect((e as AneLimitError).tensor).toBe("lm_head");
  });
});
