import { cpSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { SpeculativeUnsupportedError } from "@anemll-qwen35/generate";
import { loadGolden } from "@anemll-qwen35/ir/checkpoint";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { chooseBackend, loadModel, ModelLoadError } from "../src/index.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const TINY = join(FIXTURES, "tiny-tied");
const work = scratchDir("models-");

describe("loadModel on a converted chain", () => {
  const chain = join(work, "chain");
  beforeAll(async () => {
    const plain = { kind: "none" } as const;
    await convert({
      model: TINY,
      out: chain,
      ctx: 128,
      dtype: "fp32",
      body: plain,
      lmHead: plain,
      embed: plain,
    });
  }, timeLimit(120_000));

  it("auto picks Core ML where it runs, else the reference interpreter, and generates the golden tokens", async () => {
    const g = await loadGolden(TINY);
    const loaded = await loadModel(chain, { backend: process.platform === "darwin" ? "reference" : "auto" });
    try {
      if (!coreMLAvailability().available)
        expect(loaded.backend).toEqual({ name: "reference", detail: "reference (fp32)" });
      expect(loaded.contextLength).toBe(128);
      expect(loaded.dir).toBe(chain);
      expect(loaded.chatTemplate?.source).toContain("<|im_start|>");
      // generation_config.json of the source checkpoint travels with the chain
      expect(loaded.sampling).toMatchObject({ temperature: 0.7, topK: 20, topP: 0.8 });
      const r = await loaded.generate({
        prompt: g.promptIds,
        maxTokens: g.generatedIds.length,
        sampling: { temperature: 0 },
      });
      expect(r.tokenIds).toEqual(g.generatedIds.slice(0, r.tokenIds.length));
      expect(r.tokenIds.length).toBeGreaterThan(0);
    } finally {
      await loaded.dispose();
    }
  });

  it("disposes through Symbol.asyncDispose, once", async () => {
    const loaded = await loadModel(chain, { backend: "reference" });
    await loaded[Symbol.asyncDispose]();
    await loaded.dispose(); // a second dispose is a no-op
    await expect(loaded.model.prefill([1])).rejects.toThrow(/disposed/);
  });

  it("loads token ids only with tokenizer: false, or a tokenizer from another folder", async () => {
    const ids = await loadModel(chain, { backend: "reference", tokenizer: false });
    expect(ids.tokenizer).toBeUndefined();
    expect(() => ids.generate({ prompt: [1, 2] })).toThrow(ModelLoadError);
    await ids.dispose();

    const bare = join(work, "bare");
    mkdirSync(bare);
    cpSync(chain, bare, { recursive: true, filter: (src) => !src.includes("tokenizer") });
    await expect(loadModel(bare, { backend: "reference" })).rejects.toThrow(/--tokenizer/);
    const withTok = await loadModel(bare, { backend: "reference", tokenizer: TINY });
    expect(withTok.tokenizer.encode("hello").length).toBeGreaterThan(0);
    await withTok.dispose();
  });

  it("refuses backends that do not fit the folder, and folders that are neither kind", async () => {
    await expect(loadModel(chain, { backend: "mlx" })).rejects.toThrow(/converted chain/);
    await expect(loadModel(TINY, { backend: "reference" })).rejects.toThrow(/convert it first/);
    await expect(loadModel(chain, { backend: "tpu" as "mlx" })).rejects.toThrow(/unknown backend "tpu"/);
    await expect(loadModel(join(work, "nope"))).rejects.toThrow(ModelLoadError);
    const empty = join(work, "empty");
    mkdirSync(empty);
    await expect(loadModel(empty)).rejects.toThrow(/neither a converted chain/);
    expect(chooseBackend("checkpoint", "auto", "x")).toBe("mlx");
  });
});

describe.runIf(mlxAvailable().available)(
  "loadModel on a checkpoint (MLX; skipped where the MLX addon is not built)",
  () => {
    it("opens the checkpoint on MLX with its tokenizer and generates the golden tokens", async () => {
      const g = await loadGolden(TINY);
      const loaded = await loadModel(TINY, { dtype: "float32" });
      try {
        expect(loaded.backend).toEqual({ name: "mlx", detail: "mlx (float32)" });
        const r = await loaded.generate({
          prompt: g.promptIds,
          maxTokens: g.generatedIds.length,
          sampling: { temperature: 0 },
        });
        expect(r.tokenIds).toEqual(g.generatedIds.slice(0, r.tokenIds.length));
      } finally {
        await loaded.dispose();
      }
    });

    it('speculative: "mtp" makes every generate() speculate; a model without a head is refused at load', async () => {
      const trained = join(FIXTURES, "tiny-trained");
      const g = await loadGolden(trained);
      await using loaded = await loadModel(trained, { dtype: "float32", speculative: "mtp", gamma: 3 });
      expect(loaded.speculation).toEqual({ speculative: "mtp", gamma: 3 });
      const r = await loaded.generate({ prompt: g.promptIds, maxTokens: 12, sampling: { temperature: 0 } });
      expect(r.tokenIds).toEqual(g.generatedIds.slice(0, r.tokenIds.length));
      expect(r.stats.speculative?.calls).toBeGreaterThan(0);
      // a call can turn it off
      const plain = await loaded.generate({
        prompt: g.promptIds,
        maxTokens: 12,
        sampling: { temperature: 0 },
        speculative: undefined,
      });
      expect(plain.stats.speculative).toBeUndefined();
      expect(plain.tokenIds).toEqual(r.tokenIds);
      await expect(loadModel(TINY, { dtype: "float32", speculative: "mtp" })).rejects.toBeInstanceOf(
        SpeculativeUnsupportedError,
      );
      await expect(loadModel(trained, { dtype: "float32", mtp: false, speculative: "mtp" })).rejects.toThrow(
        /E_SPECULATIVE_UNSUPPORTED|multi-token-prediction head/,
      );
      await expect(
        loadModel(trained, { dtype: "float32", speculative: "mtp", gamma: 99 }),
      ).rejects.toBeInstanceOf(InvalidArgumentError);
    });
  },
);
