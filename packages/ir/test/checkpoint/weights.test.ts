import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { bf16BitsToF32, fromFloat32, numel, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  checkWeights,
  hfName,
  parseQwen35Config,
  Qwen35Checkpoint,
  qwen35Parameters,
  SafetensorsCheckpoint,
  type TensorSpec,
  WeightError,
  writeSafetensors,
  writeSyntheticCheckpoint,
} from "../../src/checkpoint/index.js";
import { buildWeightMap, mapHfName } from "../../src/checkpoint/weights.js";
import { qwen08bTextConfig, tempDir, tinyConfigJson, vals } from "./helpers.js";

/** Writes config.json + model.safetensors with value(name, i) at flat index i. */
async function writeCheckpoint(
  dir: string,
  configJson: object,
  specs: readonly TensorSpec[],
  value: (name: string, i: number) => number = (_, i) => i % 7,
) {
  await writeFile(join(dir, "config.json"), JSON.stringify(configJson));
  await writeSafetensors(
    join(dir, "model.safetensors"),
    specs.map((s) => {
      const v = Float32Array.from({ length: numel(s.shape) }, (_, i) => value(s.name, i));
      return { name: s.name, tensor: tensor(s.dtype, s.shape, fromFloat32(s.dtype, v)) };
    }),
  );
}

/** Specs for a config in the given layout: every expected tensor, bf16 (A_log, GDN norm f32). */
function specsFor(
  configJson: object,
  opts: { expertLayout?: "fused" | "per-expert"; layout?: "vl" | "text" } = {},
) {
  const config = parseQwen35Config(configJson);
  const layout = opts.layout ?? config.source.layout;
  return qwen35Parameters(config, { tied: config.tieWordEmbeddings, expertLayout: opts.expertLayout }).map(
    (t) => ({
      name: hfName(t.canonical, layout),
      dtype: /A_log$|linear_attn\.norm\.weight$/.test(t.canonical) ? ("f32" as const) : ("bf16" as const),
      shape: t.shape,
    }),
  );
}

describe("weight map", () => {
  it("maps HF names to canonical names and drops the vision tower and MTP head", () => {
    expect(mapHfName("model.language_model.embed_tokens.weight")).toEqual({
      kind: "weight",
      canonical: "embed",
      layout: "vl",
    });
    expect(mapHfName("model.embed_tokens.weight")).toEqual({
      kind: "weight",
      canonical: "embed",
      layout: "text",
    });
    expect(mapHfName("model.language_model.norm.weight")).toMatchObject({ canonical: "norm" });
    expect(mapHfName("lm_head.weight")).toMatchObject({ canonical: "lm_head" });
    expect(mapHfName("model.language_model.layers.7.linear_attn.A_log")).toMatchObject({
      canonical: "layers.7.linear_attn.A_log",
    });
    expect(mapHfName("model.layers.3.mlp.experts.gate_up_proj")).toMatchObject({
      canonical: "layers.3.mlp.experts.gate_up_proj",
    });
    expect(mapHfName("model.layers.3.mlp.experts.17.down_proj.weight")).toMatchObject({
      canonical: "layers.3.mlp.experts.17.down_proj.weight",
    });
    expect(mapHfName("model.visual.blocks.0.attn.qkv.weight")).toEqual({ kind: "dropped", reason: "visual" });
    expect(mapHfName("mtp.layers.0.self_attn.q_proj.weight")).toEqual({ kind: "dropped", reason: "mtp" });
    expect(mapHfName("model.rotary_emb.inv_freq")).toEqual({ kind: "unknown" });
    expect(mapHfName("vision_tower.x")).toEqual({ kind: "unknown" });
    expect(hfName("layers.0.linear_attn.A_log", "vl")).toBe(
      "model.language_model.layers.0.linear_attn.A_log",
    );
    expect(hfName("embed", "text")).toBe("model.embed_tokens.weight");
    expect(hfName("lm_head", "vl")).toBe("lm_head.weight");
  });

  it("rejects MLX-converted names and mixed prefixes", () => {
    expect(() => buildWeightMap(["language_model.model.embed_tokens.weight"])).toThrow(/MLX's layout/);
    expect(() =>
      buildWeightMap(["model.language_model.norm.weight", "model.layers.0.mlp.up_proj.weight"]),
    ).toThrow(/mixes "model.language_model." and "model." prefixes/);
    expect(() => buildWeightMap(["model.language_model.norm.weight", "model.norm.weight"])).toThrow(
      WeightError,
    );
  });

  it("expected tensors follow the reference shapes (0.8B spot checks)", () => {
    const c = parseQwen35Config(qwen08bTextConfig(4));
    const shapes = new Map(qwen35Parameters(c, { tied: true }).map((t) => [t.canonical, t.shape]));
    // reference §3.3, 0.8B
    expect(shapes.get("embed")).toEqual([248320, 1024]);
    expect(shapes.has("lm_head")).toBe(false);
    expect(shapes.get("layers.3.self_attn.q_proj.weight")).toEqual([4096, 1024]);
    expect(shapes.get("layers.3.self_attn.k_proj.weight")).toEqual([512, 1024]);
    expect(shapes.get("layers.3.self_attn.o_proj.weight")).toEqual([1024, 2048]);
    expect(shapes.get("layers.3.self_attn.q_norm.weight")).toEqual([256]);
    expect(shapes.get("layers.0.linear_attn.in_proj_qkv.weight")).toEqual([6144, 1024]);
    expect(shapes.get("layers.0.linear_attn.in_proj_z.weight")).toEqual([2048, 1024]);
    expect(shapes.get("layers.0.linear_attn.in_proj_a.weight")).toEqual([16, 1024]);
    expect(shapes.get("layers.0.linear_attn.conv1d.weight")).toEqual([6144, 1, 4]);
    expect(shapes.get("layers.0.linear_attn.A_log")).toEqual([16]);
    expect(shapes.get("layers.0.linear_attn.norm.weight")).toEqual([128]);
    expect(shapes.get("layers.0.linear_attn.out_proj.weight")).toEqual([1024, 2048]);
    expect(shapes.get("layers.0.mlp.down_proj.weight")).toEqual([1024, 3584]);
  });
});

describe("checkWeights", () => {
  it("passes a complete checkpoint and lists the dropped and unexpected tensors", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson();
    const specs = [
      ...specsFor(cfg),
      { name: "model.visual.pos_embed.weight", dtype: "bf16" as const, shape: [4, 8] },
      { name: "mtp.fc.weight", dtype: "bf16" as const, shape: [16, 32] },
      { name: "model.language_model.rotary.inv_freq", dtype: "f32" as const, shape: [4] },
    ];
    await writeCheckpoint(dir, cfg, specs);
    await using ckpt = await SafetensorsCheckpoint.open(dir);
    const r = checkWeights(parseQwen35Config(cfg), ckpt, dir);
    expect(r.ok).toBe(true);
    expect(r.tied).toBe(true);
    expect([...r.map.dropped].sort()).toEqual(["model.visual.pos_embed.weight", "mtp.fc.weight"]);
    expect(r.unexpected).toEqual(["model.language_model.rotary.inv_freq"]);
  });

  it("reports every missing, mis-shaped and mis-typed tensor with expected and actual", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson({ tied: false });
    const specs = specsFor(cfg)
      .filter(
        (s) =>
          s.name !== "lm_head.weight" && s.name !== "model.language_model.layers.3.self_attn.k_norm.weight",
      )
      .map((s) =>
        s.name.endsWith("layers.0.linear_attn.in_proj_qkv.weight")
          ? { ...s, shape: [40, 16] }
          : s.name.endsWith("layers.1.linear_attn.A_log")
            ? { ...s, dtype: "i32" as const }
            : s,
      );
    await writeCheckpoint(dir, cfg, specs);
    await using ckpt = await SafetensorsCheckpoint.open(dir);
    const r = checkWeights(parseQwen35Config(cfg), ckpt, dir);
    expect(r.ok).toBe(false);
    // lm_head absent => tied by the final rule, so it is not "missing"
    expect(r.tied).toBe(true);
    expect(r.missing).toEqual(["layers.3.self_attn.k_norm.weight"]);
    expect(r.misshaped).toEqual(["layers.0.linear_attn.in_proj_qkv.weight"]);
    expect(r.wrongDtype).toEqual(["layers.1.linear_attn.A_log"]);
    expect(r.problems.length).toBe(3);
    const shape = r.problems.find((p) => p.tensor?.endsWith("in_proj_qkv.weight"))!;
    expect(shape).toBeInstanceOf(WeightError);
    expect(shape.expected).toBe("[32, 16]"); // conv_dim = 2 * 2*4 + 4*4 = 32
    expect(shape.actual).toBe("[40, 16]");
    expect(shape.file).toBe(join(dir, "model.safetensors"));
    const missing = r.problems.find((p) => p.tensor?.endsWith("k_norm.weight"))!;
    expect(missing.message).toMatch(
      /missing tensor "model.language_model.layers.3.self_attn.k_norm.weight" \(expected shape \[8\]\)/,
    );
    const dtype = r.problems.find((p) => p.tensor?.endsWith("A_log"))!;
    expect(dtype.actual).toBe("i32");
    expect(dtype.expected).toBe("bf16 | f16 | f32");
  });

  it("accepts fused 3-D and per-expert 2-D MoE experts, and reports a missing expert", async () => {
    const cfg = tinyConfigJson({ moe: true, tied: false });
    const config = parseQwen35Config(cfg);
    for (const expertLayout of ["fused", "per-expert"] as const) {
      const dir = await tempDir();
      await writeCheckpoint(dir, cfg, specsFor(cfg, { expertLayout }));
      await using ckpt = await SafetensorsCheckpoint.open(dir);
      const r = checkWeights(config, ckpt);
      expect(r.problems.map((p) => p.message)).toEqual([]);
      expect(r.tied).toBe(false);
    }
    const dir = await tempDir();
    const specs = specsFor(cfg, { expertLayout: "per-expert" }).filter(
      (s) => s.name !== "model.language_model.layers.2.mlp.experts.3.up_proj.weight",
    );
    await writeCheckpoint(dir, cfg, specs);
    await using ckpt = await SafetensorsCheckpoint.open(dir);
    expect(checkWeights(config, ckpt).missing).toEqual(["layers.2.mlp.experts.3.up_proj.weight"]);
  });
});

describe("Qwen35Checkpoint", () => {
  it("opens a synthetic VL checkpoint: config, canonical names, tensors as stored and as fp32", async () => {
    const dir = await tempDir();
    await writeSyntheticCheckpoint({ config: tinyConfigJson(), out: join(dir, "ckpt"), seed: 3 });
    await using ckpt = await Qwen35Checkpoint.open(join(dir, "ckpt"));
    expect(ckpt.config.hiddenSize).toBe(16);
    expect(ckpt.weightMap.layout).toBe("vl");
    expect(ckpt.tiedEmbeddings).toBe(true);
    expect(ckpt.names()).toContain("lm_head");
    expect(ckpt.names()).toContain("layers.3.self_attn.q_proj.weight");
    expect(ckpt.names().some((n) => n.startsWith("mtp") || n.includes("visual"))).toBe(false);
    expect(ckpt.weightMap.dropped.length).toBeGreaterThan(0);
    const embed = await ckpt.get("embed");
    expect(embed.dtype).toBe("bf16");
    expect(embed.shape).toEqual([32, 16]);
    const alog = await ckpt.get("layers.0.linear_attn.A_log");
    expect(alog.dtype).toBe("f32");
    expect(ckpt.info("layers.0.linear_attn.norm.weight").dtype).toBe("f32");
    const f = await ckpt.getFloat32("embed");
    expect(f.dtype).toBe("f32");
    expect(Array.from(f.data.slice(0, 5))).toEqual(
      Array.from((embed.data as Uint16Array).slice(0, 5), bf16BitsToF32),
    );
    // tied: lm_head is the embedding
    expect(ckpt.hfNameOf("lm_head")).toBe("model.language_model.embed_tokens.weight");
    expect(vals(await ckpt.get("lm_head"))).toEqual(vals(embed));
    await expect(ckpt.get("layers.9.mlp.up_proj.weight")).rejects.toThrow(WeightError);
  });

  it("untied: lm_head is its own tensor", async () => {
    const dir = await tempDir();
    await writeSyntheticCheckpoint({
      config: tinyConfigJson({ tied: false }),
      out: join(dir, "c"),
      vision: false,
      mtp: false,
    });
    await using ckpt = await Qwen35Checkpoint.open(join(dir, "c"));
    expect(ckpt.tiedEmbeddings).toBe(false);
    expect(ckpt.hfNameOf("lm_head")).toBe("lm_head.weight");
    expect(vals(await ckpt.get("lm_head"))).not.toEqual(vals(await ckpt.get("embed")));
  });

  it("assembles fused expert tensors from per-expert 2-D tensors (gate rows, then up rows)", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson({ moe: true, tied: false, layout: "text" });
    const specs = specsFor(cfg, { expertLayout: "per-expert" }).map((s) => ({ ...s, dtype: "f32" as const }));
    // value encodes (expert, projection, flat index)
    const code = (name: string, i: number) => {
      const m = /experts\.(\d+)\.(gate|up|down)_proj/.exec(name);
      return m ? Number(m[1]) * 10000 + ["gate", "up", "down"].indexOf(m[2]) * 1000 + i : 0.5;
    };
    await writeCheckpoint(dir, cfg, specs, code);
    await using ckpt = await Qwen35Checkpoint.open(dir);
    expect(ckpt.weightMap.layout).toBe("text");
    expect(ckpt.has("layers.1.mlp.experts.gate_up_proj")).toBe(true);
    const gu = await ckpt.get("layers.1.mlp.experts.gate_up_proj");
    const [E, F, D] = [4, 8, 16];
    expect(gu.shape).toEqual([E, 2 * F, D]);
    const at = (e: number, r: number, c: number) => gu.data[(e * 2 * F + r) * D + c];
    expect(at(0, 0, 0)).toBe(0); // expert 0 gate row 0
    expect(at(2, 3, 5)).toBe(2 * 10000 + 0 * 1000 + 3 * D + 5); // gate part
    expect(at(2, F + 3, 5)).toBe(2 * 10000 + 1 * 1000 + 3 * D + 5); // up part
    const down = await ckpt.get("layers.1.mlp.experts.down_proj");
    expect(down.shape).toEqual([E, D, F]);
    expect(down.data[(3 * D + 2) * F + 7]).toBe(3 * 10000 + 2 * 1000 + 2 * F + 7);
  });

  it("throws one WeightError listing all problems on open, or reports them with validate: false", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson();
    const specs = specsFor(cfg).filter(
      (s) => !s.name.endsWith("layers.2.mlp.up_proj.weight") && !s.name.endsWith(".norm.weight"),
    );
    await writeCheckpoint(dir, cfg, specs);
    const err = (await Qwen35Checkpoint.open(dir).catch((e) => e)) as WeightError;
    expect(err).toBeInstanceOf(WeightError);
    expect(err.code).toBe("E_WEIGHT");
    // final norm + 3 GDN gated norms + one up_proj
    expect(err.problems.length).toBe(5);
    expect(err.message).toMatch(/5 weight problem\(s\)/);
    expect(err.message).toContain("model.language_model.layers.2.mlp.up_proj.weight");
    expect(err.message).toContain("model.language_model.norm.weight");
    await using ckpt = await Qwen35Checkpoint.open(dir, { validate: false });
    expect(ckpt.report.missing.length).toBe(5);
  });

  it("config errors surface as ConfigError naming config.json", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson() as { text_config: Record<string, unknown> };
    await writeCheckpoint(dir, cfg, specsFor(cfg));
    cfg.text_config.vocab_size = 0;
    await writeFile(join(dir, "config.json"), JSON.stringify(cfg));
    await expect(Qwen35Checkpoint.open(dir)).rejects.toThrow(
      /config.json: field "text_config.vocab_size": expected a positive integer, got 0/,
    );
  });
});
