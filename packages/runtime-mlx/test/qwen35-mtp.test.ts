/**
 * The MTP head on MLX against tools/oracle/oracle_mtp.py's goldens (fixtures/tiny-trained,
 * golden-mtp.safetensors): its logits on every position (head cache filled by decode, by chunked
 * prefill and by speculative accepts), its recursive drafts, and greedy speculative generation
 * token-for-token equal to plain generation (prefill chunk edges, the prompt cache).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  generate,
  loadTokenizer,
  PromptCache,
  SpeculativeUnsupportedError,
  type StepOutput,
} from "@anemll-qwen35/generate";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadMlxModel, type MlxQwen35, mx } from "../src/index.js";
import { argmax, fixtureDir, logitsOf, maxAbsDiff, readGolden } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

const DIR = fixtureDir("tiny-trained");
const TOL = 1e-4;

interface MtpGolden {
  ids: number[];
  /** [T, V] teacher-forced head logits, position t from (h_t, ids[t+1]) */
  logits: Float32Array;
  draftPositions: number[];
  draftIds: number[][];
  /** [P, 3, V] */
  draftLogits: Float32Array;
}

function readMtp(key: "golden" | "heldout"): MtpGolden {
  const { arrays } = mx.loadSafetensors(join(DIR, "golden-mtp.safetensors"));
  try {
    const ints = (k: string) => Array.from(arrays[k].toTypedArray() as BigInt64Array, Number);
    const draftIds = ints(`${key}_draft_ids`);
    const steps = arrays[`${key}_draft_ids`].shape[1];
    return {
      ids: ints(`${key}_ids`),
      logits: arrays[`${key}_logits`].toTypedArray() as Float32Array,
      draftPositions: ints(`${key}_draft_positions`),
      draftIds: Array.from({ length: draftIds.length / steps }, (_, i) =>
        draftIds.slice(i * steps, (i + 1) * steps),
      ),
      draftLogits: arrays[`${key}_draft_logits`].toTypedArray() as Float32Array,
    };
  } finally {
    mx.dispose(arrays);
  }
}

const greedyPick = (out: StepOutput) => argmax(logitsOf(out));

describeMlx("the MTP head on MLX (tiny-trained, fp32) against the oracle", () => {
  let model: MlxQwen35;
  let V: number;
  beforeAll(async () => {
    model = await loadMlxModel(DIR, { dtype: "float32", prefillChunk: 5 });
    V = model.config.vocabSize;
  }, 60_000);
  afterAll(async () => {
    await model?.dispose();
  });

  it("loads the head: maxDraftTokens > 0; mtp: false leaves it out", async () => {
    expect(model.maxDraftTokens).toBeGreaterThan(0);
    await using bare = await loadMlxModel(DIR, { dtype: "float32", mtp: false });
    expect(bare.maxDraftTokens).toBe(0);
    expect(bare.memory().weightsBytes).toBeLessThan(model.memory().weightsBytes);
  });

  for (const key of ["golden", "heldout"] as const) {
    it(`${key}: head logits at every position, its cache filled by decode steps`, async () => {
      const g = readMtp(key);
      const T = g.logits.length / V;
      model.reset();
      await model.prefill([g.ids[0]]);
      let worst = 0;
      for (let t = 0; t < T; t++) {
        const { outputs } = await model.draft(g.ids[t + 1], 1, greedyPick);
        worst = Math.max(worst, maxAbsDiff(logitsOf(outputs[0]), g.logits, t * V, V));
        await model.decode(g.ids[t + 1]);
      }
      expect(worst).toBeLessThanOrEqual(TOL);
    }, 60_000);

    it(`${key}: head logits after a chunked prefill (chunk 5) and after speculative accepts`, async () => {
      const g = readMtp(key);
      const T = g.logits.length / V;
      let worst = 0;
      for (let t = 0; t < T; t += key === "golden" ? 1 : 9) {
        model.reset();
        await model.prefill(g.ids.slice(0, t + 1));
        const { outputs } = await model.draft(g.ids[t + 1], 1, greedyPick);
        worst = Math.max(worst, maxAbsDiff(logitsOf(outputs[0]), g.logits, t * V, V));
      }
      // the head's slots written by accept(): verify 4 ids, accept 3, then check the next position
      model.reset();
      await model.prefill(g.ids.slice(0, 3));
      for (let t = 2; t + 4 < T; t += 3) {
        await model.verify(g.ids.slice(t + 1, t + 5));
        await model.accept(3);
        expect(model.position).toBe(t + 4);
        const { outputs } = await model.draft(g.ids[t + 4], 1, greedyPick);
        worst = Math.max(worst, maxAbsDiff(logitsOf(outputs[0]), g.logits, (t + 3) * V, V));
      }
      expect(worst).toBeLessThanOrEqual(TOL);
    }, 120_000);

    it(`${key}: recursive greedy drafts (3 steps) equal the oracle's`, async () => {
      const g = readMtp(key);
      for (const [k, t] of g.draftPositions.entries()) {
        model.reset();
        await model.prefill(g.ids.slice(0, t + 1));
        const before = model.position;
        const { ids, outputs } = await model.draft(g.ids[t + 1], 3, greedyPick);
        expect(model.position).toBe(before); // the main model's state does not move
        expect(ids).toEqual(g.draftIds[k]);
        for (let s = 0; s < 3; s++) {
          expect(maxAbsDiff(logitsOf(outputs[s]), g.draftLogits, (k * 3 + s) * V, V)).toBeLessThanOrEqual(
            TOL,
          );
        }
      }
    });
  }

  it("verify rows are the logits plain decoding gives; accept(n) continues exactly like decoding", async () => {
    const g = readGolden("tiny-trained");
    const ids = [...g.promptIds, ...g.generatedIds];
    const P = g.promptIds.length;
    model.reset();
    await model.prefill(g.promptIds);
    const rows = await model.verify(ids.slice(P, P + 4));
    for (let j = 0; j < 4; j++) {
      // golden decode_logits row j: after consuming generated[0..j]
      expect(maxAbsDiff(logitsOf(rows[j]), g.decodeLogits, j * V, V)).toBeLessThanOrEqual(TOL);
    }
    await model.accept(2);
    expect(model.position).toBe(P + 2);
    const next = await model.decode(ids[P + 2]);
    expect(maxAbsDiff(logitsOf(next), g.decodeLogits, 2 * V, V)).toBeLessThanOrEqual(TOL);
  });

  it("a verify nobody accepts changes nothing: decode continues as plain, accept is refused", async () => {
    const g = readGolden("tiny-trained");
    const P = g.promptIds.length;
    model.reset();
    await model.prefill(g.promptIds);
    await model.verify([g.generatedIds[0], 5, 6, 7]);
    const next = await model.decode(g.generatedIds[0]);
    expect(maxAbsDiff(logitsOf(next), g.decodeLogits, 0, V)).toBeLessThanOrEqual(TOL);
    expect(model.position).toBe(P + 1);
    await expect(model.accept(2)).rejects.toThrow(/no verify to accept/);
    await expect(model.verify([])).rejects.toThrow(/takes 1 to/);
    await expect(model.draft(1, 0, greedyPick)).rejects.toThrow(/gamma must be/);
    await expect(model.verify([V + 5])).rejects.toThrow(/not an integer in/);
  });

  it("snapshot/restore carries the head's cache", async () => {
    const g = readMtp("golden");
    model.reset();
    await model.prefill(g.ids.slice(0, 6));
    const snap = await model.snapshot();
    const a = await model.draft(g.ids[6], 3, greedyPick);
    await model.decode(g.ids[6]);
    await model.decode(g.ids[7]);
    await model.restore(snap);
    const b = await model.draft(g.ids[6], 3, greedyPick);
    snap.dispose();
    expect(b.ids).toEqual(a.ids);
    expect(maxAbsDiff(logitsOf(b.outputs[2]), logitsOf(a.outputs[2]))).toBe(0);
  });
});

describeMlx("speculative rounds on MLX do not leak", () => {
  it("active memory stays flat over 200 draft/verify/accept rounds (preallocated KV caches)", async () => {
    await using model = await loadMlxModel(DIR, {
      dtype: "float32",
      contextLength: 1100,
      kvCache: { preallocate: true },
    });
    // the prompt from the JSON golden: typed arrays read from MLX arrays hold MLX memory until GC
    const doc = JSON.parse(readFileSync(join(DIR, "golden-mtp.json"), "utf8")) as {
      golden: { ids: number[]; n_prompt_tokens: number };
    };
    let next = argmax(logitsOf(await model.prefill(doc.golden.ids.slice(0, doc.golden.n_prompt_tokens))));
    let at30 = 0;
    let state30 = 0;
    for (let round = 1; round <= 200; round++) {
      const { ids } = await model.draft(next, 3, greedyPick);
      const rows = await model.verify([next, ...ids]);
      const n = 1 + (round % 4); // every accepted length
      await model.accept(n);
      next = argmax(logitsOf(rows[n - 1]));
      if (round === 30) {
        at30 = mx.getActiveMemory();
        state30 = model.memory().stateBytes;
      }
    }
    expect(model.memory().stateBytes).toBe(state30);
    // one-sided: a leak grows; a garbage collection (other tests' typed arrays) may only shrink it
    expect(mx.getActiveMemory() - at30).toBeLessThan(64 * 1024);
  }, 240_000);
});

describeMlx("greedy speculative generation on MLX is plain generation", () => {
  it("tiny-trained, γ = 1…4, prefill chunks of 3 and 512, with and without the prompt cache", async () => {
    const tokenizer = await loadTokenizer(DIR);
    const prompts = ["In the beginning God created", "And Ruth said, Intreat me not to leave thee"];
    for (const prefillChunk of [3, 512]) {
      await using model = await loadMlxModel(DIR, { dtype: "float32", prefillChunk });
      for (const prompt of prefillChunk === 3 ? prompts : prompts.slice(1)) {
        const plain = await generate(model, tokenizer, { prompt, maxTokens: 48, eosTokenIds: [] });
        for (const gamma of prefillChunk === 3 ? [1, 2, 3, 4] : [2, 4]) {
          const cache = new PromptCache({ maxBytes: 64 << 20, minTokens: 2 });
          for (const promptCache of [undefined, cache, cache]) {
            const spec = await generate(model, tokenizer, {
              prompt,
              maxTokens: 48,
              eosTokenIds: [],
              speculative: "mtp",
              gamma,
              promptCache,
            });
            expect(spec.tokenIds).toEqual(plain.tokenIds);
            expect(spec.finishDetail).toEqual(plain.finishDetail);
            expect(model.position).toBe(plain.stats.promptTokens + plain.stats.decodeSteps);
            const s = spec.stats.speculative!;
            expect(s.calls).toBeGreaterThan(0);
            expect(s.acceptedTokens).toBeGreaterThan(0); // a trained head drafts some right
          }
          expect(cache.stats().hits).toBeGreaterThan(0);
        }
      }
    }
  }, 300_000);

  it("sampled speculative generation runs on the real head: reproducible per seed, drafts accepted", async () => {
    const tokenizer = await loadTokenizer(DIR);
    await using model = await loadMlxModel(DIR, { dtype: "float32" });
    const run = (seed: number) =>
      generate(model, tokenizer, {
        prompt: "And Naomi said",
        maxTokens: 24,
        eosTokenIds: [],
        sampling: { temperature: 0.8, topP: 0.95, seed },
        speculative: "mtp",
        gamma: 3,
      });
    const [a, b, c] = [await run(1), await run(1), await run(2)];
    expect(a.tokenIds).toHaveLength(24);
    expect(b.tokenIds).toEqual(a.tokenIds);
    expect(c.tokenIds).not.toEqual(a.tokenIds);
    expect(a.stats.speculative!.acceptedTokens).toBeGreaterThan(0);
  }, 60_000);

  it("a fixture without a head: E_SPECULATIVE_UNSUPPORTED", async () => {
    const tokenizer = await loadTokenizer(fixtureDir("tiny-gqa"));
    await using model = await loadMlxModel(fixtureDir("tiny-gqa"), { dtype: "float32" });
    expect(model.maxDraftTokens).toBe(0);
    await expect(
      generate(model, tokenizer, { prompt: "hello", maxTokens: 4, speculative: "mtp" }),
    ).rejects.toBeInstanceOf(SpeculativeUnsupportedError);
  });
});
