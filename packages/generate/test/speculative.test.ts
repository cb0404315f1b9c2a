/**
 * Speculative decoding in generate() over a fake SpeculativeStepModel whose target and draft
 * distributions are known functions of the context: greedy output identical to plain decoding
 * (with stop rules, constraints and thinking), the sampled output's distribution equal to the
 * target's (a chi-square test with the power to fail a rule that just accepts drafts), the stats
 * and the typed errors.
 */
import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { beforeAll, describe, expect, it } from "vitest";
import {
  canSpeculate,
  type GenerateOptions,
  generate,
  loadTokenizer,
  type SpeculativeStepModel,
  SpeculativeUnsupportedError,
  type StepOutput,
  type Tokenizer,
} from "../src/index.js";
import { Xoshiro128 } from "../src/sampler.js";
import { ScriptedModel } from "./helpers.js";

const TINY_TRAINED = join(import.meta.dirname, "../../../fixtures/tiny-trained");

/** Logits after consuming `ctx` (all ids so far). */
type Row = (ctx: readonly number[]) => Float32Array;

/**
 * A SpeculativeStepModel over functions of the context: `target(ctx)` is the main model's output
 * after ctx, `drafter(ctx)` the head's guess of the same thing. It records every call and checks
 * the contract (the state moves only by prefill/decode/accept; accept ≤ the last verify).
 */
class FakeSpeculative implements SpeculativeStepModel {
  readonly outputKind = "logits" as const;
  consumed: number[] = [];
  private pending: number[] | undefined;
  readonly calls = { decode: 0, draft: 0, verify: 0, accept: 0 };
  constructor(
    private readonly target: Row,
    private readonly drafter: Row,
    readonly maxDraftTokens = 4,
    readonly contextLength = 4096,
  ) {}
  get position(): number {
    return this.consumed.length;
  }
  reset(): void {
    this.consumed = [];
    this.pending = undefined;
  }
  async prefill(ids: Int32Array | number[]): Promise<StepOutput> {
    this.consumed.push(...ids);
    return { logits: this.target(this.consumed) };
  }
  async decode(id: number): Promise<StepOutput> {
    this.calls.decode++;
    this.consumed.push(id);
    return { logits: this.target(this.consumed) };
  }
  async draft(next: number, gamma: number, pick: (out: StepOutput, i: number) => number) {
    this.calls.draft++;
    if (gamma < 1 || gamma > this.maxDraftTokens) throw new Error(`gamma ${gamma}`);
    const ctx = [...this.consumed, next];
    const ids: number[] = [];
    const outputs: StepOutput[] = [];
    for (let i = 0; i < gamma; i++) {
      const out = { logits: this.drafter(ctx) };
      const d = pick(out, i);
      ids.push(d);
      outputs.push(out);
      ctx.push(d);
    }
    return { ids, outputs };
  }
  async verify(ids: number[]): Promise<StepOutput[]> {
    this.calls.verify++;
    if (this.position + ids.length > this.contextLength) throw new Error("verify past the context");
    this.pending = ids.slice();
    return ids.map((_, j) => ({ logits: this.target([...this.consumed, ...ids.slice(0, j + 1)]) }));
  }
  async accept(n: number): Promise<void> {
    this.calls.accept++;
    if (!this.pending || n < 1 || n > this.pending.length) throw new Error(`accept(${n})`);
    this.consumed.push(...this.pending.slice(0, n));
    this.pending = undefined;
  }
  dispose(): void {}
}

/** Seeded pseudo-random logits over V ids as a function of the last two tokens (a weak "model"). */
function hashed(seed: number, V: number, spread = 6): Row {
  return (ctx) => {
    const a = ctx[ctx.length - 1] ?? 0;
    const b = ctx[ctx.length - 2] ?? 0;
    const rng = new Xoshiro128(seed * 1_000_003 + a * 7919 + b * 104_729);
    const l = new Float32Array(V);
    for (let i = 0; i < V; i++) l[i] = rng.next() * spread;
    return l;
  };
}

/** `target`, except that with probability ~`agree` the draft's arg-max is the target's (else another id). */
function noisy(target: Row, seed: number, V: number, agree: number): Row {
  return (ctx) => {
    const l = target(ctx).slice();
    const rng = new Xoshiro128(seed + ctx.length * 31 + (ctx[ctx.length - 1] ?? 0));
    if (rng.next() >= agree) l[Math.floor(rng.next() * V)] += 20;
    return l;
  };
}

let tok: Tokenizer;
let V: number;
beforeAll(async () => {
  tok = await loadTokenizer(TINY_TRAINED);
  V = tok.vocabSize;
}, 60_000);

/** The same generation twice: plain over `target`, then speculative with `drafter`. */
async function both(target: Row, drafter: Row, options: GenerateOptions, gamma: number) {
  const plainModel = new FakeSpeculative(target, drafter);
  const plain = await generate(plainModel, tok, options);
  const model = new FakeSpeculative(target, drafter);
  const spec = await generate(model, tok, { ...options, speculative: "mtp", gamma });
  return { plain, spec, model, plainModel };
}

describe("speculative greedy decoding is plain greedy decoding", () => {
  for (const gamma of [1, 2, 3, 4]) {
    for (const agree of [0, 0.6, 1]) {
      it(`γ=${gamma}, draft agreeing ~${agree * 100}%: same tokens, state and finish`, async () => {
        const target = hashed(gamma, V);
        const { plain, spec, model, plainModel } = await both(
          target,
          noisy(target, 99, V, agree),
          { prompt: "In the beginning", maxTokens: 40, eosTokenIds: [] },
          gamma,
        );
        expect(spec.tokenIds).toEqual(plain.tokenIds);
        expect(spec.text).toBe(plain.text);
        expect(spec.finishDetail).toEqual(plain.finishDetail);
        // the model consumed exactly the tokens plain decoding fed it, never a rejected draft
        expect(model.consumed).toEqual(plainModel.consumed);
        expect(spec.stats.decodeSteps).toBe(plain.stats.decodeSteps);
        const s = spec.stats.speculative!;
        expect(s.calls).toBe(model.calls.verify);
        expect(model.calls.accept).toBe(s.calls);
        expect(s.acceptedTokens + s.calls + model.calls.decode).toBe(spec.stats.decodeSteps);
        if (agree === 1) expect(s.acceptanceRate).toBe(1);
        if (agree === 0) expect(s.acceptedTokens).toBeLessThan(s.draftTokens / 4);
        expect(s.tokensPerCall).toBeCloseTo((s.acceptedTokens + s.calls) / s.calls, 12);
        expect(plain.stats.speculative).toBeUndefined();
      });
    }
  }

  it("a stop string or EOS inside an accepted run ends it where plain decoding ends", async () => {
    const target = hashed(5, V);
    const plain = await generate(new FakeSpeculative(target, target), tok, {
      prompt: "x",
      maxTokens: 30,
      eosTokenIds: [],
    });
    // stop at a token the (perfect) draft accepts mid-run: its text as a stop string, its id as EOS
    const at = 13;
    const piece = tok.decode(plain.tokenIds.slice(at, at + 1));
    for (const extra of [{ eosTokenIds: [plain.tokenIds[at]] }, { stop: [piece], eosTokenIds: [] }]) {
      const { plain: p, spec: s } = await both(target, target, { prompt: "x", maxTokens: 30, ...extra }, 4);
      expect(s.tokenIds).toEqual(p.tokenIds);
      expect(s.text).toBe(p.text);
      expect(s.finishDetail).toEqual(p.finishDetail);
      expect(s.tokenIds.length).toBeLessThan(30);
    }
  });

  it("maxTokens and a full context end it like plain decoding", async () => {
    const target = hashed(6, V);
    for (const maxTokens of [1, 2, 3, 7]) {
      const { plain, spec } = await both(target, target, { prompt: "a", maxTokens, eosTokenIds: [] }, 4);
      expect(spec.tokenIds).toEqual(plain.tokenIds);
      expect(spec.stats.generatedTokens).toBe(maxTokens);
    }
    const prompt = tok.encode("a short prompt");
    for (const room of [1, 2, 5, 9]) {
      const ctx = prompt.length + room;
      const plain = await generate(new FakeSpeculative(target, target, 4, ctx), tok, {
        prompt,
        eosTokenIds: [],
      });
      const model = new FakeSpeculative(target, target, 4, ctx);
      const spec = await generate(model, tok, { prompt, eosTokenIds: [], speculative: "mtp", gamma: 4 });
      expect(spec.tokenIds).toEqual(plain.tokenIds);
      expect(spec.finishDetail).toEqual({ type: "context_full" });
      expect(model.position).toBeLessThanOrEqual(ctx);
    }
  });

  it("a JSON schema constraint: the same valid output as plain constrained decoding", async () => {
    const target = hashed(8, V, 8);
    const schema = {
      type: "object",
      properties: { n: { type: "integer", minimum: 0, maximum: 99 }, s: { enum: ["ab", "cd"] } },
      required: ["n", "s"],
      additionalProperties: false,
    } as const;
    for (const gamma of [1, 3]) {
      const { plain, spec } = await both(
        target,
        noisy(target, 3, V, 0.7),
        { prompt: "json:", jsonSchema: schema, maxTokens: 40 },
        gamma,
      );
      expect(spec.text).toBe(plain.text);
      expect(spec.tokenIds).toEqual(plain.tokenIds);
      const v = JSON.parse(spec.text) as { n: number; s: string };
      expect(["ab", "cd"]).toContain(v.s);
    }
  });

  it("thinking, then a grammar: unconstrained until </think>, constrained after, as plain", async () => {
    const close = tok.tokenId("</think>")!;
    const base = hashed(9, V);
    // the target thinks for 6 tokens, then closes thinking; the grammar takes over after it
    const target: Row = (ctx) => {
      const l = base(ctx);
      if (ctx.length === prompt.length + 6) l[close] += 100;
      return l;
    };
    const prompt = tok.encode("<|im_start|>assistant\n<think>\n");
    const { plain, spec } = await both(
      target,
      noisy(target, 4, V, 0.8),
      { prompt, grammar: 'root ::= "yes" | "no"', maxTokens: 30 },
      3,
    );
    expect(spec.tokenIds).toEqual(plain.tokenIds);
    expect(spec.thinking).toBe(plain.thinking);
    expect(["yes", "no"]).toContain(spec.text.trim());
  });
});

describe("speculative sampling keeps the target distribution", () => {
  it("chi-square of 4-token continuations against the exact target (fails a rule that accepts drafts)", async () => {
    // Three tokens; the target and the draft are different bigram models over them.
    const alphabet = ["a", "b", "c"].map((c) => tok.encode(` ${c}`)[0]);
    expect(new Set(alphabet).size).toBe(3);
    const P = [
      [1.2, 0.1, -0.8],
      [-0.5, 0.9, 0.3],
      [0.4, -1.0, 1.1],
    ];
    const Q = [
      [-0.6, 1.0, 0.4],
      [0.8, -0.4, 0.1],
      [1.3, 0.2, -1.2],
    ];
    const indexOf = (id: number | undefined) => Math.max(0, alphabet.indexOf(id ?? -1));
    const bigram =
      (table: number[][]): Row =>
      (ctx) => {
        const l = new Float32Array(V).fill(Number.NEGATIVE_INFINITY);
        const row = table[indexOf(ctx[ctx.length - 1])];
        alphabet.forEach((id, k) => {
          l[id] = row[k];
        });
        return l;
      };
    const softmax = (r: number[]) => {
      const e = r.map(Math.exp);
      const s = e.reduce((x, y) => x + y, 0);
      return e.map((x) => x / s);
    };
    const p = P.map(softmax);
    const q = Q.map(softmax);
    const prompt = [tok.encode(" b")[0]];
    const L = 4;
    const cells = 3 ** L;
    // exact law of the 4 sampled tokens under the target, and under "accept every draft" (γ = 2:
    // t1 from the target, t2 t3 drafted, t4 the bonus token)
    const expected = new Float64Array(cells);
    const wrong = new Float64Array(cells);
    for (let c = 0; c < cells; c++) {
      const t = [0, 1, 2, 3].map((i) => Math.floor(c / 3 ** (L - 1 - i)) % 3);
      let last = indexOf(prompt[0]);
      let pe = 1;
      for (const k of t) {
        pe *= p[last][k];
        last = k;
      }
      expected[c] = pe;
      const s0 = indexOf(prompt[0]);
      wrong[c] = p[s0][t[0]] * q[t[0]][t[1]] * q[t[1]][t[2]] * p[t[2]][t[3]];
    }
    const N = 6000;
    // power: the chi-square a draft-accepting rule would score at this N (its non-centrality)
    const threshold = chiSquareCritical(cells - 1);
    let lambda = 0;
    for (let c = 0; c < cells; c++) lambda += (N * (wrong[c] - expected[c]) ** 2) / expected[c];
    expect(lambda).toBeGreaterThan(10 * threshold);

    const counts = new Float64Array(cells);
    let accepted = 0;
    let drafted = 0;
    for (let seed = 0; seed < N; seed++) {
      const model = new FakeSpeculative(bigram(P), bigram(Q), 2);
      const r = await generate(model, tok, {
        prompt,
        maxTokens: L,
        eosTokenIds: [],
        sampling: { temperature: 1, seed },
        speculative: "mtp",
        gamma: 2,
      });
      expect(r.tokenIds).toHaveLength(L);
      counts[r.tokenIds.reduce((c, id) => c * 3 + alphabet.indexOf(id), 0)]++;
      accepted += r.stats.speculative!.acceptedTokens;
      drafted += r.stats.speculative!.draftTokens;
    }
    let chi = 0;
    for (let c = 0; c < cells; c++) chi += (counts[c] - N * expected[c]) ** 2 / (N * expected[c]);
    expect(chi).toBeLessThan(threshold);
    // the rule did work: some drafts were accepted, some rejected
    expect(accepted / drafted).toBeGreaterThan(0.2);
    expect(accepted / drafted).toBeLessThan(0.9);
  }, 120_000);
});

describe("speculative: options and errors", () => {
  it("a model without the capability: E_SPECULATIVE_UNSUPPORTED", async () => {
    const model = new ScriptedModel([1, 2, 3], { vocabSize: V });
    expect(canSpeculate(model)).toBe(false);
    const err = await generate(model, tok, { prompt: "x", speculative: "mtp" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SpeculativeUnsupportedError);
    expect((err as SpeculativeUnsupportedError).code).toBe("E_SPECULATIVE_UNSUPPORTED");
    const headless = new FakeSpeculative(hashed(1, V), hashed(1, V), 0);
    expect(canSpeculate(headless)).toBe(false);
    await expect(generate(headless, tok, { prompt: "x", speculative: "mtp" })).rejects.toThrow(
      /without its MTP head/,
    );
  });

  it("gamma outside 1..maxDraftTokens is an InvalidArgumentError", async () => {
    const model = new FakeSpeculative(hashed(1, V), hashed(1, V), 3);
    for (const gamma of [0, 4, 1.5]) {
      await expect(generate(model, tok, { prompt: "x", speculative: "mtp", gamma })).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
  });

  it("sampling with a draft head that returns only top-1: E_SPECULATIVE_UNSUPPORTED", async () => {
    const model = new FakeSpeculative(hashed(1, V), hashed(1, V), 2);
    model.draft = async (next: number, gamma: number, pick: (out: StepOutput, i: number) => number) => {
      const ids = [pick({ top1: { id: next, value: 1 } }, 0)];
      return { ids: ids.slice(0, gamma), outputs: [] };
    };
    await expect(
      generate(model, tok, {
        prompt: "x",
        speculative: "mtp",
        sampling: { temperature: 1, seed: 1 },
        maxTokens: 5,
      }),
    ).rejects.toBeInstanceOf(SpeculativeUnsupportedError);
  });
});

/** The chi-square critical value at p = 0.001 (Wilson-Hilferty approximation). */
function chiSquareCritical(k: number): number {
  const z = 3.0902; // the standard normal's 0.999 quantile
  const a = 2 / (9 * k);
  return k * (1 - a + z * Math.sqrt(a)) ** 3;
}
