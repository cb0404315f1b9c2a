/**
 * The multi-token-prediction head's parameter table (qwen35MtpParameters), its layer count from the
 * config and its checker (checkMtpWeights), which runs beside the text model's and never fails it.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fromFloat32, numel, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  checkMtpWeights,
  checkWeights,
  hfName,
  mtpLayerCount,
  parseQwen35Config,
  qwen35MtpParameters,
  qwen35Parameters,
  SafetensorsCheckpoint,
  type TensorSpec,
  writeSafetensors,
} from "../../src/checkpoint/index.js";
import { qwen08bTextConfig, tempDir, tinyConfigJson } from "./helpers.js";

/** The tiny config with `mtp_num_hidden_layers` set in its text_config. */
function withMtp(layers: unknown, opts: Parameters<typeof tinyConfigJson>[0] = {}) {
  const cfg = tinyConfigJson(opts) as { text_config: Record<string, unknown> };
  return { ...cfg, text_config: { ...cfg.text_config, mtp_num_hidden_layers: layers } };
}

/** config.json + model.safetensors: the text model, plus the given extra tensors. */
async function writeCheckpoint(dir: string, configJson: object, extra: readonly TensorSpec[]) {
  const config = parseQwen35Config(configJson);
  const text = qwen35Parameters(config, { tied: true }).map((p) => ({
    name: hfName(p.canonical, "vl"),
    dtype: p.storedDtype,
    shape: p.shape,
  }));
  await writeFile(join(dir, "config.json"), JSON.stringify(configJson));
  await writeSafetensors(
    join(dir, "model.safetensors"),
    [...text, ...extra].map((s) => ({
      name: s.name,
      tensor: tensor(s.dtype, s.shape, fromFloat32(s.dtype, new Float32Array(numel(s.shape)))),
    })),
  );
}

const headSpecs = (configJson: object): TensorSpec[] =>
  qwen35MtpParameters(parseQwen35Config(configJson), { layers: 1 }).map((p) => ({
    name: p.canonical,
    dtype: p.storedDtype,
    shape: p.shape,
  }));

describe("qwen35MtpParameters", () => {
  it("lists the head in Qwen3.5's names and shapes (0.8B): fc, two pre-fc norms, a full-attention layer, norm", () => {
    const c = parseQwen35Config(qwen08bTextConfig(24, { mtp_num_hidden_layers: 1 }));
    expect(mtpLayerCount(c)).toBe(1);
    const table = qwen35MtpParameters(c, { layers: mtpLayerCount(c) });
    expect(table.map((p) => p.canonical)).toEqual([
      "mtp.fc.weight",
      "mtp.pre_fc_norm_embedding.weight",
      "mtp.pre_fc_norm_hidden.weight",
      "mtp.layers.0.input_layernorm.weight",
      "mtp.layers.0.post_attention_layernorm.weight",
      "mtp.layers.0.self_attn.q_proj.weight",
      "mtp.layers.0.self_attn.k_proj.weight",
      "mtp.layers.0.self_attn.v_proj.weight",
      "mtp.layers.0.self_attn.o_proj.weight",
      "mtp.layers.0.self_attn.q_norm.weight",
      "mtp.layers.0.self_attn.k_norm.weight",
      "mtp.layers.0.mlp.gate_proj.weight",
      "mtp.layers.0.mlp.up_proj.weight",
      "mtp.layers.0.mlp.down_proj.weight",
      "mtp.norm.weight",
    ]);
    const by = new Map(table.map((p) => [p.canonical, p]));
    expect(by.get("mtp.fc.weight")).toMatchObject({
      shape: [1024, 2048],
      kind: "projection",
      role: "mtp.fc",
      layer: -1,
    });
    // the layer has the shapes of the text model's full-attention layers (layer 3)
    const text = new Map(qwen35Parameters(c, { tied: true }).map((p) => [p.canonical, p]));
    for (const rest of [
      "self_attn.q_proj.weight",
      "self_attn.o_proj.weight",
      "mlp.down_proj.weight",
      "self_attn.k_norm.weight",
    ]) {
      const p = by.get(`mtp.layers.0.${rest}`)!;
      expect(p.shape, rest).toEqual(text.get(`layers.3.${rest}`)!.shape);
      expect(p.role, rest).toBe(`mtp.${text.get(`layers.3.${rest}`)!.role}`);
      expect(p.layer, rest).toBe(24); // after the trunk's 24 layers, as vLLM numbers it
    }
    expect(by.get("mtp.layers.0.self_attn.q_proj.weight")!.shape).toEqual([4096, 1024]);
    // every norm of the head is zero-centred (1 + w); everything is stored BF16
    const norms = table.filter((p) => p.kind === "norm");
    expect(norms.map((p) => p.role)).toEqual([
      "mtp.norm.pre_fc_embedding",
      "mtp.norm.pre_fc_hidden",
      "mtp.norm.input",
      "mtp.norm.post_attention",
      "mtp.attn.q_norm",
      "mtp.attn.k_norm",
      "mtp.norm.final",
    ]);
    expect(norms.every((p) => p.zeroCentred && p.shape.length === 1)).toBe(true);
    expect(table.every((p) => p.storedDtype === "bf16" && !p.float32)).toBe(true);
    // no embedding or lm_head of its own: the head shares the text model's
    expect(table.some((p) => p.kind === "embedding" || p.canonical.includes("lm_head"))).toBe(false);
  });

  it("MoE heads carry an MoE MLP, fused or per expert (the official 3.5-35B-A3B stores it per expert)", () => {
    const c = parseQwen35Config(withMtp(1, { moe: true }));
    const fused = qwen35MtpParameters(c, { layers: 1 }).map((p) => p.canonical);
    expect(fused).toContain("mtp.layers.0.mlp.gate.weight");
    expect(fused).toContain("mtp.layers.0.mlp.experts.gate_up_proj");
    expect(fused).toContain("mtp.layers.0.mlp.shared_expert_gate.weight");
    const perExpert = qwen35MtpParameters(c, { layers: 1, expertLayout: "per-expert" }).map(
      (p) => p.canonical,
    );
    expect(perExpert).toContain("mtp.layers.0.mlp.experts.3.up_proj.weight");
    expect(perExpert).not.toContain("mtp.layers.0.mlp.experts.gate_up_proj");
  });

  it("the text model's table and parameter counts leave the head out", () => {
    const c = parseQwen35Config(withMtp(1));
    expect(qwen35Parameters(c, { tied: true }).some((p) => p.canonical.startsWith("mtp."))).toBe(false);
  });
});

describe("mtpLayerCount", () => {
  it("reads mtp_num_hidden_layers (0 when absent) and names the field when it is not a count", () => {
    expect(mtpLayerCount(parseQwen35Config(tinyConfigJson()))).toBe(0);
    expect(mtpLayerCount(parseQwen35Config(withMtp(2)))).toBe(2);
    for (const bad of [-1, 1.5, "1", 1000]) {
      const c = parseQwen35Config(withMtp(bad));
      expect(() => mtpLayerCount(c), String(bad)).toThrow(ConfigError);
      expect(() => mtpLayerCount(c)).toThrow(
        /text_config\.mtp_num_hidden_layers.*expected an integer from 0 to 64/,
      );
    }
  });
});

describe("checkMtpWeights", () => {
  it("a complete head: present and complete, and the text model's check still drops it", async () => {
    const dir = await tempDir();
    const cfg = withMtp(1);
    await writeCheckpoint(dir, cfg, headSpecs(cfg));
    await using ck = await SafetensorsCheckpoint.open(dir);
    const config = parseQwen35Config(cfg);
    const r = checkMtpWeights(config, ck, dir);
    expect(r).toMatchObject({ present: true, complete: true, layers: 1, problems: [], unexpected: [] });
    const text = checkWeights(config, ck, dir);
    expect(text.ok).toBe(true);
    expect(text.map.dropped.length).toBe(headSpecs(cfg).length);
    expect(text.map.toHf.has("mtp.fc.weight")).toBe(false);
  });

  it("no head: not present and nothing to report", async () => {
    const dir = await tempDir();
    const cfg = withMtp(1);
    await writeCheckpoint(dir, cfg, []);
    await using ck = await SafetensorsCheckpoint.open(dir);
    expect(checkMtpWeights(parseQwen35Config(cfg), ck)).toMatchObject({
      present: false,
      complete: false,
      problems: [],
    });
  });

  it("a partial or mis-shaped head is reported by name, while the text model's check passes", async () => {
    const dir = await tempDir();
    const cfg = withMtp(1);
    const specs = headSpecs(cfg)
      .filter((s) => s.name !== "mtp.layers.0.mlp.up_proj.weight")
      .map((s) => (s.name === "mtp.fc.weight" ? { ...s, shape: [16, 16] } : s));
    specs.push({ name: "mtp.layers.1.input_layernorm.weight", dtype: "bf16", shape: [16] });
    await writeCheckpoint(dir, cfg, specs);
    await using ck = await SafetensorsCheckpoint.open(dir);
    const config = parseQwen35Config(cfg);
    const r = checkMtpWeights(config, ck, dir);
    expect(r.present).toBe(true);
    expect(r.complete).toBe(false);
    expect(r.missing).toEqual(["mtp.layers.0.mlp.up_proj.weight"]);
    expect(r.misshaped).toEqual(["mtp.fc.weight"]);
    expect(r.unexpected).toEqual(["mtp.layers.1.input_layernorm.weight"]);
    expect(r.problems.map((p) => p.detail)).toEqual([
      'tensor "mtp.fc.weight" has shape [16, 16], expected [16, 32] from the config',
      'missing tensor "mtp.layers.0.mlp.up_proj.weight" (expected shape [24, 16])',
    ]);
    expect(checkWeights(config, ck, dir).ok).toBe(true);
  });
});
