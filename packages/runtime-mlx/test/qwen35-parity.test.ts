/**
 * Parity of the MLX Qwen3.5 port (fp32) with the fixtures' independent references: Hugging Face
 * transformers (fp32, eager) and mlx-lm, on prompt logits, every cached decode step, greedy tokens
 * and per-layer hidden states. Tolerance: max |Δlogit| ≤ 1e-3.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadMlxModel, type MlxQwen35, type MxArray, mx } from "../src/index.js";
import { KvCache } from "../src/qwen35/cache.js";
import { forward } from "../src/qwen35/model.js";
import {
  argmax,
  FIXTURES,
  fixtureDir,
  type Golden,
  logitsOf,
  maxAbsDiff,
  readGolden,
  TIED,
} from "./fixtures.js";
import { describeMlx } from "./helpers.js";

const TOL = 1e-3;

for (const name of FIXTURES) {
  describeMlx(`Qwen3.5 on MLX, fp32 parity: ${name}`, () => {
    let model: MlxQwen35;
    let golden: Golden;
    let V: number;

    beforeAll(async () => {
      golden = readGolden(name);
      model = await loadMlxModel(fixtureDir(name), { dtype: "float32" });
      V = model.config.vocabSize;
    });
    afterAll(() => model?.dispose());

    it("loads the Hugging Face layout in fp32", () => {
      expect(model.format).toBe("hf");
      expect(model.dtype).toBe("float32");
      expect(model.quantization).toBeUndefined();
      expect(model.weights.tied).toBe(TIED.includes(name));
    });

    it("prompt logits match HF and mlx-lm at every position", async () => {
      model.reset();
      const logits = await model.prefillAll(golden.promptIds);
      expect(logits.length).toBe(golden.promptIds.length * V);
      expect(maxAbsDiff(logits, golden.promptLogits)).toBeLessThanOrEqual(TOL);
      expect(maxAbsDiff(logits, golden.mlxPromptLogits)).toBeLessThanOrEqual(TOL);
      expect(model.position).toBe(golden.promptIds.length);
    });

    it("every cached decode step matches, and the greedy tokens are the golden ones", async () => {
      model.reset();
      const tokens = [argmax(logitsOf(await model.prefill(golden.promptIds)))];
      let worstHf = 0;
      let worstMlx = 0;
      for (let i = 0; i < golden.json.n_decode_steps; i++) {
        const logits = logitsOf(await model.decode(tokens[i]));
        worstHf = Math.max(worstHf, maxAbsDiff(logits, golden.decodeLogits, i * V, V));
        worstMlx = Math.max(worstMlx, maxAbsDiff(logits, golden.mlxDecodeLogits, i * V, V));
        tokens.push(argmax(logits));
      }
      expect(worstHf).toBeLessThanOrEqual(TOL);
      expect(worstMlx).toBeLessThanOrEqual(TOL);
      expect(tokens).toEqual(golden.generatedIds);
    });

    it("hidden states after every layer match HF's", () => {
      const hidden: MxArray[] = [];
      const T = golden.promptIds.length;
      const D = model.config.hiddenSize;
      mx.tidy(() => {
        const ids = mx.array(Int32Array.from(golden.promptIds), [1, T]);
        const kv = model.config.layerTypes.map((t) =>
          t === "full_attention" ? new KvCache({ step: 256 }) : undefined,
        );
        forward(
          model.config,
          model.weights,
          ids,
          { kv, gdn: kv.map(() => undefined) },
          { logits: "all", hidden },
        );
        for (const c of kv) c?.reset();
        mx.keep(hidden);
      });
      expect(hidden.length).toBe(model.config.numHiddenLayers + 1);
      hidden.forEach((h, i) => {
        const got = mx.toFloat32Array(h);
        expect(
          maxAbsDiff(got, golden.hiddenStates, i * T * D, T * D),
          `hidden state ${i}`,
        ).toBeLessThanOrEqual(TOL);
      });
      mx.dispose(hidden);
    });
  });
}

describeMlx("Qwen3.5 on MLX: prefill chunks and pipelining do not change the numbers", () => {
  it("chunked prefill (3 tokens per pass) and the unpipelined decode agree with one pass", async () => {
    const golden = readGolden("tiny-gqa");
    const whole = await loadMlxModel(fixtureDir("tiny-gqa"), { dtype: "float32" });
    const chunked = await loadMlxModel(fixtureDir("tiny-gqa"), {
      dtype: "float32",
      prefillChunk: 3,
      pipeline: false,
    });
    try {
      const V = whole.config.vocabSize;
      const a = await whole.prefillAll(golden.promptIds);
      const b = await chunked.prefillAll(golden.promptIds);
      expect(maxAbsDiff(a, b)).toBeLessThanOrEqual(1e-5);
      chunked.reset();
      const last = logitsOf(await chunked.prefill(golden.promptIds));
      expect(maxAbsDiff(last, a, (golden.promptIds.length - 1) * V, V)).toBeLessThanOrEqual(1e-5);
      const next = logitsOf(await chunked.decode(golden.generatedIds[0]));
      expect(maxAbsDiff(next, golden.decodeLogits, 0, V)).toBeLessThanOrEqual(TOL);
    } finally {
      whole.dispose();
      chunked.dispose();
    }
  });

  it("a non-greedy token after a speculated step gives the logits of a fresh run", async () => {
    const golden = readGolden("tiny-tied");
    const piped = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32", pipeline: true });
    const plain = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32", pipeline: false });
    try {
      // feed tokens that are NOT the argmax, so each speculated step is thrown away
      const feed = [7, 300, 12, 901, 45];
      await piped.prefill(golden.promptIds);
      await plain.prefill(golden.promptIds);
      for (const id of feed) {
        const p = logitsOf(await piped.decode(id));
        const q = logitsOf(await plain.decode(id));
        expect(maxAbsDiff(p, q)).toBeLessThanOrEqual(1e-5);
      }
      expect(piped.position).toBe(golden.promptIds.length + feed.length);
    } finally {
      piped.dispose();
      plain.dispose();
    }
  });
});
