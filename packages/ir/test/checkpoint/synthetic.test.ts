import { readFileSync } from "node:fs";
import { mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { numel, tensorToFloat32 } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  defaultSyntheticDir,
  INDEX_FILE,
  parameterCounts,
  parseQwen35Config,
  planSyntheticCheckpoint,
  publishedConfigJson,
  Qwen35Checkpoint,
  SafetensorsCheckpoint,
  SYNTHETIC_SIZES,
  type SyntheticSize,
  syntheticTensors,
  writeSyntheticCheckpoint,
} from "../../src/checkpoint/index.js";
import { listDir, tempDir, tinyConfigJson } from "./helpers.js";

// the published configs, as kept by ir's config tests
const DATA = fileURLToPath(new URL("./data/", import.meta.url));
const TEST_DATA: Partial<Record<SyntheticSize, string>> = {
  "0.8b": "qwen3.5-0.8b.config.json",
  "2b": "qwen3.5-2b.config.json",
  "4b": "qwen3.5-4b.text-config.json",
  "9b": "qwen3.5-9b.config.json",
  "35b-a3b": "qwen3.5-35b-a3b.config.json",
};

const stats = (x: Float32Array) => {
  const mean = x.reduce((a, b) => a + b, 0) / x.length;
  const std = Math.sqrt(x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length);
  return { mean, std };
};

/**
 * Per-size values of the published models (hidden, layers, q/kv heads, GDN v/qk heads, FFN, tied),
 * copied from Qwen's model cards and configs independently of the writer's table.
 */
const PUBLISHED: Record<
  SyntheticSize,
  [number, number, number, number, number, number, number | string, boolean]
> = {
  "0.8b": [1024, 24, 8, 2, 16, 16, 3584, true],
  "2b": [2048, 24, 8, 2, 16, 16, 6144, true],
  "4b": [2560, 32, 16, 4, 32, 16, 9216, true],
  "9b": [4096, 32, 16, 4, 32, 16, 12288, false],
  "27b": [5120, 64, 24, 4, 48, 16, 17408, false],
  "35b-a3b": [2048, 40, 16, 2, 32, 16, "moe 256x512 top-8, shared 512", false],
};

describe("published configs of the synthetic generator", () => {
  for (const size of SYNTHETIC_SIZES) {
    it(`${size}: the published geometry, and the tensor shapes that follow from it`, () => {
      const [D, L, H, Hkv, Hv, Hk, ffn, tied] = PUBLISHED[size];
      const c = parseQwen35Config(publishedConfigJson(size));
      expect([c.hiddenSize, c.numHiddenLayers, c.numAttentionHeads, c.numKeyValueHeads]).toEqual([
        D,
        L,
        H,
        Hkv,
      ]);
      expect([c.linearNumValueHeads, c.linearNumKeyHeads, c.tieWordEmbeddings]).toEqual([Hv, Hk, tied]);
      expect(
        c.moe
          ? `moe ${c.moe.numExperts}x${c.moe.moeIntermediateSize} top-${c.moe.numExpertsPerTok}, shared ${c.moe.sharedExpertIntermediateSize}`
          : c.intermediateSize,
      ).toEqual(ffn);
      expect(c.layerTypes.filter((t) => t === "full_attention").length).toBe(L / 4);
      const shapes = new Map(syntheticTensors(publishedConfigJson(size)).map((t) => [t.name, t.shape]));
      const p = "model.language_model.layers.";
      const convDim = 2 * Hk * 128 + Hv * 128;
      expect(shapes.get(`${p}3.self_attn.q_proj.weight`)).toEqual([2 * H * 256, D]);
      expect(shapes.get(`${p}3.self_attn.k_proj.weight`)).toEqual([Hkv * 256, D]);
      expect(shapes.get(`${p}3.self_attn.o_proj.weight`)).toEqual([D, H * 256]);
      expect(shapes.get(`${p}0.linear_attn.in_proj_qkv.weight`)).toEqual([convDim, D]);
      expect(shapes.get(`${p}0.linear_attn.conv1d.weight`)).toEqual([convDim, 1, 4]);
      expect(shapes.get(`${p}0.linear_attn.in_proj_z.weight`)).toEqual([Hv * 128, D]);
      expect(shapes.get(`${p}0.linear_attn.A_log`)).toEqual([Hv]);
      expect(shapes.get(`${p}0.linear_attn.out_proj.weight`)).toEqual([D, Hv * 128]);
      expect(shapes.get("model.language_model.embed_tokens.weight")).toEqual([248320, D]);
      expect(shapes.get("lm_head.weight")).toEqual(tied ? undefined : [248320, D]);
      if (typeof ffn === "number") expect(shapes.get(`${p}0.mlp.down_proj.weight`)).toEqual([D, ffn]);
      expect(shapes.has(`${p}${L - 1}.self_attn.q_proj.weight`)).toBe(true);
      expect(shapes.has(`${p}${L}.input_layernorm.weight`)).toBe(false);
    });
  }

  it("conv_dim per size: 6144 (0.8B/2B), 8192 (4B/9B/35B), 10240 (27B)", () => {
    const convDim = (size: SyntheticSize) =>
      syntheticTensors(publishedConfigJson(size)).find((t) =>
        t.name.endsWith("layers.0.linear_attn.conv1d.weight"),
      )!.shape[0];
    expect(SYNTHETIC_SIZES.map(convDim)).toEqual([6144, 6144, 8192, 8192, 10240, 8192]);
  });

  for (const size of SYNTHETIC_SIZES.filter((s) => TEST_DATA[s])) {
    it(`${size}: same text model as the test-data config (written separately from the reference)`, () => {
      const ours = parseQwen35Config(publishedConfigJson(size));
      const data = parseQwen35Config(JSON.parse(readFileSync(join(DATA, TEST_DATA[size]!), "utf8")));
      expect(ours.source.layout).toBe("vl");
      expect(parameterCounts(ours)).toEqual(parameterCounts(data));
      expect(ours.layerTypes).toEqual(data.layerTypes);
      expect(ours.tieWordEmbeddings).toBe(data.tieWordEmbeddings);
      expect(ours.moe).toEqual(data.moe);
    });
  }

  it("0.8B tensor list: official VL layout, exactly 36 F32 tensors (18 GDN layers x A_log, norm)", () => {
    const specs = syntheticTensors(publishedConfigJson("0.8b"));
    const f32 = specs.filter((s) => s.dtype === "f32");
    expect(f32.length).toBe(36);
    expect(f32.every((s) => /linear_attn\.(A_log|norm\.weight)$/.test(s.name))).toBe(true);
    expect(specs.some((s) => s.name === "lm_head.weight")).toBe(false);
    expect(specs.some((s) => s.name.startsWith("model.visual."))).toBe(true);
    expect(specs.some((s) => s.name.startsWith("mtp.layers.0.self_attn.q_proj"))).toBe(true);
    const text = specs.filter((s) => s.name.startsWith("model.language_model."));
    expect(text.reduce((n, s) => n + numel(s.shape), 0)).toBe(752_393_024);
  });

  it("plans: parameters by part and bytes; 9B's text model is its published 8.95 B", () => {
    const plan = planSyntheticCheckpoint({ size: "9b" });
    expect(plan.parameters.text).toBe(parameterCounts(plan.config).total);
    expect(plan.parameters.text).toBe(8_953_803_264);
    expect(plan.parameters.total).toBe(plan.parameters.text + plan.parameters.mtp + plan.parameters.vision);
    expect(plan.bytes).toBe(
      plan.tensors.reduce((n, t) => n + numel(t.shape) * (t.dtype === "f32" ? 4 : 2), 0),
    );
    const text = planSyntheticCheckpoint({ size: "27b", vision: false, mtp: false });
    expect(text.parameters).toMatchObject({ mtp: 0, vision: 0 });
    expect(text.parameters.text / 1e9).toBeGreaterThan(26);
    expect(text.parameters.text / 1e9).toBeLessThan(28);
  });

  it("35B-A3B: fused experts in the main layers, per-expert in the MTP head, lm_head present", () => {
    const specs = syntheticTensors(publishedConfigJson("35b-a3b"));
    const byName = new Map(specs.map((s) => [s.name, s.shape]));
    expect(byName.get("model.language_model.layers.0.mlp.experts.gate_up_proj")).toEqual([256, 1024, 2048]);
    expect(byName.get("model.language_model.layers.0.mlp.experts.down_proj")).toEqual([256, 2048, 512]);
    expect(byName.get("mtp.layers.0.mlp.experts.255.down_proj.weight")).toEqual([2048, 512]);
    expect(byName.get("lm_head.weight")).toEqual([248320, 2048]);
    // reference §3.3 shapes
    expect(byName.get("model.language_model.layers.3.self_attn.q_proj.weight")).toEqual([8192, 2048]);
    expect(byName.get("model.language_model.layers.0.linear_attn.in_proj_qkv.weight")).toEqual([8192, 2048]);
    expect(byName.get("model.language_model.layers.0.linear_attn.conv1d.weight")).toEqual([8192, 1, 4]);
  });

  it("default folder is under ANEMLL_QWEN35_CACHE or ~/.cache, never a relative path", () => {
    const saved = process.env.ANEMLL_QWEN35_CACHE;
    try {
      process.env.ANEMLL_QWEN35_CACHE = "/x/cache";
      expect(defaultSyntheticDir("0.8b")).toBe("/x/cache/synthetic/0.8b");
      delete process.env.ANEMLL_QWEN35_CACHE;
      expect(defaultSyntheticDir("9b")).toMatch(/\.cache\/anemll-qwen35\/synthetic\/9b$/);
    } finally {
      if (saved === undefined) delete process.env.ANEMLL_QWEN35_CACHE;
      else process.env.ANEMLL_QWEN35_CACHE = saved;
    }
  });
});

describe("writeSyntheticCheckpoint", () => {
  it("writes a valid, sharded, official-layout checkpoint with sensible weight scales", async () => {
    const dir = await tempDir();
    const out = join(dir, "big");
    // wider than the tiny config so the statistics are meaningful: D=256, F=1024
    const cfg = tinyConfigJson() as { text_config: Record<string, unknown> };
    Object.assign(cfg.text_config, { hidden_size: 256, intermediate_size: 1024, vocab_size: 512 });
    const r = await writeSyntheticCheckpoint({ config: cfg, out, maxShardBytes: 1 << 20, seed: 1 });
    expect(r.skipped).toBe(false);
    expect(r.files.length).toBeGreaterThan(1);
    expect(r.files.every((f) => /^model\.safetensors-\d{5}-of-\d{5}\.safetensors$/.test(f))).toBe(true);
    const index = JSON.parse(await readFile(join(out, INDEX_FILE), "utf8"));
    expect(index.metadata.total_size).toBe(r.bytes);

    await using ck = await Qwen35Checkpoint.open(out);
    expect(ck.report.ok).toBe(true);
    const proj = stats(tensorToFloat32(await ck.get("layers.0.mlp.up_proj.weight")));
    expect(Math.abs(proj.mean)).toBeLessThan(0.002);
    expect(proj.std).toBeGreaterThan(0.018);
    expect(proj.std).toBeLessThan(0.022);
    const norm = stats(tensorToFloat32(await ck.get("layers.0.input_layernorm.weight")));
    expect(Math.abs(norm.mean)).toBeLessThan(0.01); // zero-centred: the model uses 1 + w
    const gated = stats(tensorToFloat32(await ck.get("layers.0.linear_attn.norm.weight")));
    expect(Math.abs(gated.mean - 1)).toBeLessThan(0.05); // plain weight around 1
    const alog = tensorToFloat32(await ck.get("layers.0.linear_attn.A_log"));
    expect(alog.every((v) => v >= 0 && v <= Math.log(16))).toBe(true);
    expect(new Set(alog).size).toBe(alog.length);
  });

  it("is deterministic per seed, skips an identical existing checkpoint, and rewrites on change", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson();
    const a = join(dir, "a");
    const b = join(dir, "b");
    await writeSyntheticCheckpoint({ config: cfg, out: a, seed: 7 });
    await writeSyntheticCheckpoint({ config: cfg, out: b, seed: 7, maxShardBytes: 2048 });
    await using ca = await SafetensorsCheckpoint.open(a);
    await using cb = await SafetensorsCheckpoint.open(b);
    expect(ca.names()).toEqual(cb.names());
    for (const n of ca.names()) expect(await ca.readBytes(n)).toEqual(await cb.readBytes(n)); // independent of sharding

    const shard = join(a, ca.shardFiles[0]);
    const mtime = (await stat(shard)).mtimeMs;
    const again = await writeSyntheticCheckpoint({ config: cfg, out: a, seed: 7 });
    expect(again.skipped).toBe(true);
    expect((await stat(shard)).mtimeMs).toBe(mtime);

    const reseeded = await writeSyntheticCheckpoint({ config: cfg, out: a, seed: 8 });
    expect(reseeded.skipped).toBe(false);
    await using cc = await SafetensorsCheckpoint.open(a);
    const name = "model.language_model.embed_tokens.weight";
    expect(await cc.readBytes(name)).not.toEqual(await cb.readBytes(name));
    expect((await listDir(dir)).sort()).toEqual(["a", "b"]);
  });

  it("replaces only an empty folder or an earlier synthetic checkpoint, unless forced", async () => {
    const dir = await tempDir();
    const cfg = tinyConfigJson();
    const foreign = join(dir, "foreign");
    await mkdir(foreign);
    await writeFile(join(foreign, "notes.txt"), "mine");
    await expect(writeSyntheticCheckpoint({ config: cfg, out: foreign })).rejects.toThrow(
      /foreign is not empty \(1 entries\).*--force/,
    );
    expect(await readFile(join(foreign, "notes.txt"), "utf8")).toBe("mine");
    const ours = join(dir, "ours");
    await writeSyntheticCheckpoint({ config: cfg, out: ours, seed: 1 });
    // "empty": an earlier synthetic checkpoint is kept too; the identical one is still a no-op
    await expect(
      writeSyntheticCheckpoint({ config: cfg, out: ours, seed: 2, replace: "empty" }),
    ).rejects.toThrow(/holds another synthetic checkpoint/);
    expect(
      (await writeSyntheticCheckpoint({ config: cfg, out: ours, seed: 1, replace: "empty" })).skipped,
    ).toBe(true);
    expect((await writeSyntheticCheckpoint({ config: cfg, out: ours, seed: 2 })).skipped).toBe(false);
    const forced = await writeSyntheticCheckpoint({ config: cfg, out: foreign, force: true });
    expect(forced.skipped).toBe(false);
    expect(await listDir(foreign)).not.toContain("notes.txt");
    const file = join(dir, "file");
    await writeFile(file, "x");
    await expect(writeSyntheticCheckpoint({ config: cfg, out: file, force: true })).rejects.toThrow(
      /is a file/,
    );
  });

  it("an abort leaves no folder behind", async () => {
    const dir = await tempDir();
    const ac = new AbortController();
    let n = 0;
    const run = writeSyntheticCheckpoint({
      config: tinyConfigJson(),
      out: join(dir, "x"),
      signal: ac.signal,
      onProgress: () => {
        if (++n === 3) ac.abort();
      },
    });
    await expect(run).rejects.toMatchObject({ name: "AbortError" });
    expect(await listDir(dir)).toEqual([]);
  });
});
