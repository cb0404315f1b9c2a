/**
 * Checkpoint formats: Hugging Face layout (fused or per-expert MoE tensors) and MLX layout (mlx-lm's
 * sanitized names, +1 already in the norms, conv [C, K, 1], optionally quantized), detected and never
 * given the +1 twice; quantization at load; and mlx-lm itself as an independent check of both.
 */
import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { WeightError } from "@anemll-qwen35/ir/checkpoint";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadMlxModel, MlxModelLoadError, type MxArray, mx, saveMlxCheckpoint } from "../src/index.js";
import { copyFixture, fixtureDir, maxAbsDiff, REPO_ROOT, readGolden, tempDir } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

const IDS = [5, 77, 300, 12, 960, 961, 2, 511, 1000];

async function promptLogits(dir: string, opts: Parameters<typeof loadMlxModel>[1] = {}) {
  const model = await loadMlxModel(dir, { dtype: "float32", ...opts });
  try {
    return { format: model.format, quantization: model.quantization, logits: await model.prefillAll(IDS) };
  } finally {
    model.dispose();
  }
}

describeMlx("Qwen3.5 checkpoint formats", () => {
  let tmp: string;
  beforeAll(() => {
    tmp = tempDir("formats");
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it("an MLX-format copy (our own save, +1 baked in) loads as mlx and gives identical logits", async () => {
    const out = await saveMlxCheckpoint(fixtureDir("tiny-tied"), join(tmp, "tied-mlx"), { dtype: "float32" });
    // the stored norms are exactly 1 + the HF weights (in fp32), and the conv is [C, K, 1]
    const saved = mx.loadSafetensors(join(out, "model.safetensors")).arrays;
    const hf = copyFixtureTensors("tiny-tied");
    try {
      const norm = mx.toFloat32Array(saved["language_model.model.layers.0.input_layernorm.weight"]);
      const raw = mx.toFloat32Array(hf["model.language_model.layers.0.input_layernorm.weight"]);
      expect(
        maxAbsDiff(
          norm,
          Float32Array.from(raw, (w) => w + 1),
        ),
      ).toBe(0);
      const gated = mx.toFloat32Array(saved["language_model.model.layers.0.linear_attn.norm.weight"]);
      expect(
        maxAbsDiff(gated, mx.toFloat32Array(hf["model.language_model.layers.0.linear_attn.norm.weight"])),
      ).toBe(0);
      expect(saved["language_model.model.layers.0.linear_attn.conv1d.weight"].shape).toEqual([
        256 * 2 + 256,
        4,
        1,
      ]);
      expect(Object.keys(saved).some((k) => k.includes("lm_head"))).toBe(false); // tied
      expect(Object.keys(saved).some((k) => k.includes("visual") || k.startsWith("mtp."))).toBe(false);
    } finally {
      mx.dispose([saved, hf]);
    }
    const a = await promptLogits(fixtureDir("tiny-tied"));
    const b = await promptLogits(out);
    expect(a.format).toBe("hf");
    expect(b.format).toBe("mlx");
    expect(maxAbsDiff(a.logits, b.logits)).toBe(0);
    const golden = readGolden("tiny-tied");
    const ref = await loadMlxModel(out, { dtype: "float32" });
    try {
      expect(maxAbsDiff(await ref.prefillAll(golden.promptIds), golden.promptLogits)).toBeLessThanOrEqual(
        1e-3,
      );
    } finally {
      ref.dispose();
    }
  });

  it("a quantized MLX-format MoE checkpoint loads with the same logits as quantizing at load", async () => {
    const out = await saveMlxCheckpoint(fixtureDir("tiny-moe"), join(tmp, "moe-q4"), {
      dtype: "float32",
      bits: 4,
    });
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(config.quantization).toMatchObject({ bits: 4, group_size: 64, mode: "affine" });
    expect(config.quantization["language_model.model.layers.0.mlp.gate"]).toMatchObject({ bits: 8 });
    const saved = mx.loadSafetensors(join(out, "model.safetensors")).arrays;
    try {
      // gate_up split into switch_mlp banks: [E, F, D] packed 8 values per uint32 at 4 bits
      expect(saved["language_model.model.layers.0.mlp.switch_mlp.gate_proj.weight"].shape).toEqual([
        8, 64, 16,
      ]);
      expect(saved["language_model.model.layers.0.mlp.switch_mlp.gate_proj.weight"].dtype).toBe("uint32");
      expect(saved["language_model.model.layers.0.mlp.gate.weight"].shape).toEqual([8, 32]); // 8-bit router
    } finally {
      mx.dispose(saved);
    }
    const atLoad = await promptLogits(fixtureDir("tiny-moe"), { bits: 4 });
    const stored = await promptLogits(out);
    expect(atLoad.quantization).toEqual({ bits: 4, groupSize: 64 });
    expect(stored).toMatchObject({ format: "mlx", quantization: { bits: 4, groupSize: 64 } });
    expect(maxAbsDiff(atLoad.logits, stored.logits)).toBe(0);
    // the 4-bit weights really are in use
    const exact = await promptLogits(fixtureDir("tiny-moe"));
    expect(maxAbsDiff(exact.logits, atLoad.logits)).toBeGreaterThan(1e-3);
    await expect(loadMlxModel(out, { bits: 4 })).rejects.toThrow(/already quantized/);
  });

  it("per-expert 2-D MoE tensors give the same model as the fused 3-D ones", async () => {
    const E = 8;
    const F = 64;
    const out = copyFixture("tiny-moe", join(tmp, "moe-per-expert"), (t) => {
      for (const name of [...t.keys()]) {
        const m = /^(model\.language_model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$/.exec(name);
        if (!m) continue;
        const fused = t.get(name)!;
        for (let e = 0; e < E; e++) {
          if (m[2] === "down_proj") {
            t.set(`${m[1]}.${e}.down_proj.weight`, mx.squeeze(mx.slice(fused, [e], [e + 1]), 0));
          } else {
            t.set(`${m[1]}.${e}.gate_proj.weight`, mx.squeeze(mx.slice(fused, [e, 0], [e + 1, F]), 0));
            t.set(`${m[1]}.${e}.up_proj.weight`, mx.squeeze(mx.slice(fused, [e, F], [e + 1, 2 * F]), 0));
          }
        }
        t.delete(name);
        fused.dispose();
      }
    });
    const fused = await promptLogits(fixtureDir("tiny-moe"));
    const perExpert = await promptLogits(out);
    expect(perExpert.format).toBe("hf");
    expect(maxAbsDiff(fused.logits, perExpert.logits)).toBe(0);
  });

  it("refuses a checkpoint whose names and conv layout disagree (the +1 would be guessed)", async () => {
    const out = copyFixture("tiny-gqa", join(tmp, "ambiguous"), (t) => {
      for (const [name, a] of [...t]) {
        if (!name.startsWith("model.language_model.")) continue;
        t.delete(name);
        t.set(`language_model.model.${name.slice("model.language_model.".length)}`, a);
      }
    });
    const error = await loadMlxModel(out).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MlxModelLoadError);
    expect((error as Error).message).toMatch(
      /MLX \(language_model\.model\.\*\) layout but the conv1d weights are in the Hugging Face/,
    );
  });

  it("names the stored tensor when an MLX-format checkpoint lacks one", async () => {
    const src = await saveMlxCheckpoint(fixtureDir("tiny-gqa"), join(tmp, "gqa-mlx"), { dtype: "float32" });
    const { arrays } = mx.loadSafetensors(join(src, "model.safetensors"));
    const broken = join(tmp, "gqa-mlx-broken");
    try {
      delete arrays["language_model.model.layers.2.linear_attn.A_log"];
      arrays["language_model.model.layers.3.self_attn.k_norm.weight"] = mx.zeros([128]);
      copyDir(src, broken, arrays);
    } finally {
      mx.dispose(arrays);
    }
    const error = (await loadMlxModel(broken).catch((e: unknown) => e)) as WeightError;
    expect(error).toBeInstanceOf(WeightError);
    expect(error.problems.map((p) => p.tensor).sort()).toEqual([
      "language_model.model.layers.2.linear_attn.A_log",
      "language_model.model.layers.3.self_attn.k_norm.weight",
    ]);
    expect(error.message).toMatch(
      /"language_model\.model\.layers\.3\.self_attn\.k_norm\.weight" has shape \[128\], expected \[256\]/,
    );
  });

  // mlx-lm as an independent check. Importing it takes seconds, so one process does both jobs and
  // starts first, running while the tests above do.
  const oracle = join(REPO_ROOT, ".venv-oracle/bin/python");
  const haveOracle = existsSync(oracle);
  let oracleRun: Promise<void> | undefined;
  let savedQ4: string;
  beforeAll(async () => {
    if (!haveOracle) return;
    savedQ4 = await saveMlxCheckpoint(fixtureDir("tiny-moe"), join(tmp, "moe-q4-oracle"), {
      dtype: "float32",
      bits: 4,
    });
    const jobs = [
      { dir: savedQ4, ids: IDS, out: join(tmp, "saved.f32"), bits: null },
      { dir: fixtureDir("tiny-gqa"), ids: IDS, out: join(tmp, "q8.f32"), bits: 8 },
    ];
    oracleRun = new Promise((resolve, reject) => {
      execFile(
        oracle,
        [join(REPO_ROOT, "packages/runtime-mlx/test/oracle/mlxlm_logits.py"), JSON.stringify(jobs)],
        (error, _out, stderr) => (error ? reject(new Error(`mlx-lm oracle failed: ${stderr}`)) : resolve()),
      );
    });
    oracleRun.catch(() => {}); // reported by the test below
  });
  const readF32 = (file: string) => {
    const buf = readFileSync(file);
    return new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  };

  it.skipIf(!haveOracle)(
    `mlx-lm agrees: it loads our quantized MLX save, and its own quantization equals ours [needs ${oracle}]`,
    async () => {
      await oracleRun;
      const ours = await promptLogits(savedQ4);
      expect(maxAbsDiff(ours.logits, readF32(join(tmp, "saved.f32")))).toBeLessThanOrEqual(1e-3);
      const atLoad = await promptLogits(fixtureDir("tiny-gqa"), { bits: 8 });
      expect(maxAbsDiff(atLoad.logits, readF32(join(tmp, "q8.f32")))).toBeLessThanOrEqual(1e-3);
    },
    240_000, // waits on the mlx-lm process: 12 s alone, over a minute on a loaded machine
  );
});

/** The HF fixture's tensors by name (caller disposes). */
function copyFixtureTensors(name: "tiny-tied"): Record<string, MxArray> {
  const out: Record<string, MxArray> = {};
  for (const f of [
    "model.safetensors-00001-of-00002.safetensors",
    "model.safetensors-00002-of-00002.safetensors",
  ]) {
    Object.assign(out, mx.loadSafetensors(join(fixtureDir(name), f)).arrays);
  }
  return out;
}

/** A copy of an MLX-format folder with other tensors. */
function copyDir(src: string, out: string, arrays: Record<string, MxArray>): void {
  mkdirSync(out, { recursive: true });
  copyFileSync(join(src, "config.json"), join(out, "config.json"));
  mx.saveSafetensors(join(out, "model.safetensors"), arrays);
}
