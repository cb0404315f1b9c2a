import { InvalidArgumentError } from "@anemll-qwen35/core";
import { beforeAll, describe, expect, it } from "vitest";
import {
  generate,
  loadTokenizer,
  PromptCache,
  type StateSnapshot,
  type StepModel,
  type StepOutput,
  type Tokenizer,
} from "../src/index.js";
import { FIXTURE_TOKENIZER_DIR, SPECIAL_BASE } from "./helpers.js";

/**
 * A model whose state is a running hash of every id it consumed, and whose logits are a function
 * of that hash: any token lost, doubled or reordered by a restore changes what it says next.
 */
class HashModel implements StepModel {
  readonly contextLength = 4096;
  readonly outputKind = "logits" as const;
  position = 0;
  private h = 2166136261;
  prefilledTokens = 0;
  restores = 0;
  live = 0;
  constructor(private readonly vocab: number) {}
  reset(): void {
    this.position = 0;
    this.h = 2166136261;
  }
  async prefill(ids: Int32Array | number[]): Promise<StepOutput> {
    for (const id of ids) this.eat(id);
    this.prefilledTokens += ids.length;
    return this.out();
  }
  async decode(id: number): Promise<StepOutput> {
    this.eat(id);
    return this.out();
  }
  async snapshot(): Promise<StateSnapshot> {
    const model = this;
    let disposed = false;
    this.live++;
    return {
      position: this.position,
      bytes: 1000,
      h: this.h,
      get disposed() {
        return disposed;
      },
      dispose() {
        if (!disposed) model.live--;
        disposed = true;
      },
    } as StateSnapshot;
  }
  async restore(s: StateSnapshot): Promise<void> {
    const snap = s as StateSnapshot & { h: number; disposed: boolean };
    if (snap.disposed) throw new Error("restored a disposed snapshot");
    this.h = snap.h;
    this.position = s.position;
    this.restores++;
  }
  dispose(): void {}
  private eat(id: number) {
    this.h = Math.imul(this.h ^ id, 16777619) >>> 0;
    this.position++;
  }
  private out(): StepOutput {
    const logits = new Float32Array(this.vocab).fill(-5);
    logits[this.h % 200] = 10; // plain BPE ids, never EOS
    return { logits };
  }
}

const system = Array.from({ length: 40 }, (_, i) => 10 + i);
const ask = (n: number) => [...system, 300 + n, 301 + n, 302 + n];

describe("PromptCache with generate()", () => {
  let tok: Tokenizer;
  beforeAll(async () => {
    tok = await loadTokenizer(FIXTURE_TOKENIZER_DIR, { eosTokenIds: [SPECIAL_BASE] });
  });

  const run = (model: StepModel, prompt: number[], o: Parameters<typeof generate>[2] = {}) =>
    generate(model, tok, { prompt, maxTokens: 6, sampling: { temperature: 0 }, ...o });

  it("restores a shared prefix, prefills only the rest, and says the same as without a cache", async () => {
    const cached = new HashModel(tok.vocabSize);
    const plain = new HashModel(tok.vocabSize);
    const cache = new PromptCache({ maxBytes: 1e6 });
    const checkpoints = [system.length];

    const r1 = await run(cached, ask(1), { promptCache: cache, cacheCheckpoints: checkpoints });
    expect(r1.stats.cachedTokens).toBe(0);
    expect(r1.tokenIds).toEqual((await run(plain, ask(1))).tokenIds);

    const before = cached.prefilledTokens;
    const r2 = await run(cached, ask(2), { promptCache: cache, cacheCheckpoints: checkpoints });
    expect(r2.stats.cachedTokens).toBe(system.length);
    expect(cached.prefilledTokens - before).toBe(3);
    expect(r2.tokenIds).toEqual((await run(plain, ask(2))).tokenIds);

    // the same prompt again: everything but its last token comes from the cache
    const r3 = await run(cached, ask(2), { promptCache: cache });
    expect(r3.stats.cachedTokens).toBe(ask(2).length - 1);
    expect(r3.tokenIds).toEqual(r2.tokenIds);
    expect(cache.stats()).toMatchObject({ hits: 2, misses: 1 });
  });

  it("snapshots where a prompt leaves a stored one, so the third prompt with that start hits", async () => {
    const model = new HashModel(tok.vocabSize);
    const cache = new PromptCache({ maxBytes: 1e6 });
    await run(model, ask(1), { promptCache: cache });
    const second = await run(model, ask(2), { promptCache: cache });
    expect(second.stats.cachedTokens).toBe(0);
    const third = await run(model, ask(3), { promptCache: cache });
    expect(third.stats.cachedTokens).toBe(system.length);
  });

  it("evicts the least recently used snapshots beyond its byte budget, disposing them", async () => {
    const model = new HashModel(tok.vocabSize);
    const cache = new PromptCache({ maxBytes: 2500 }); // two snapshots of 1000 bytes
    const a = Array.from({ length: 30 }, (_, i) => 500 + i);
    const b = Array.from({ length: 30 }, (_, i) => 600 + i);
    const c = Array.from({ length: 30 }, (_, i) => 700 + i);
    await run(model, [...a, 1], { promptCache: cache });
    await run(model, [...b, 1], { promptCache: cache });
    await run(model, [...a, 2], { promptCache: cache }); // a is used again: b is now the oldest
    await run(model, [...c, 1], { promptCache: cache });
    expect(cache.stats()).toMatchObject({ entries: 2, bytes: 2000 });
    expect(model.live).toBe(2);
    expect((await run(model, [...a, 3], { promptCache: cache })).stats.cachedTokens).toBe(30);
    expect((await run(model, [...b, 3], { promptCache: cache })).stats.cachedTokens).toBe(0);
    cache.clear();
    expect(model.live).toBe(0);
  });

  it("keeps partitions apart: one never restores, nor branches at, another's prompts; the budget is shared", async () => {
    const model = new HashModel(tok.vocabSize);
    const cache = new PromptCache({ maxBytes: 6500 }); // six snapshots of 1000 bytes
    const alice = cache.partition("alice");
    const bob = cache.partition("bob");
    const checkpoints = [system.length];
    await run(model, ask(1), { promptCache: alice, cacheCheckpoints: checkpoints });
    // bob sends alice's system prompt with questions of his own: no hit on her snapshot, and no
    // snapshot at the branch from her prompt (his second request would hit it, telling him how
    // long a prefix he shares with her); from his own two prompts he gets his branch, as she did
    for (const n of [2, 3]) {
      expect((await run(model, ask(n), { promptCache: bob })).stats.cachedTokens).toBe(0);
    }
    expect((await run(model, ask(4), { promptCache: bob })).stats.cachedTokens).toBe(system.length);
    // alice still hits her own system turn; the partition "" (the cache itself) sees neither
    expect((await run(model, ask(5), { promptCache: alice })).stats.cachedTokens).toBe(system.length);
    expect((await run(model, ask(5), { promptCache: cache })).stats.cachedTokens).toBe(0);
    // one budget for all: the eighth snapshot evicted the oldest, whoever stored it
    expect(cache.stats().bytes).toBeLessThanOrEqual(6500);
    expect(cache.stats().evictions).toBeGreaterThan(0);
    cache.clear();
    expect(model.live).toBe(0);
  });

  it("stays out of the way: short prompts, models without snapshots, bad settings", async () => {
    const model = new HashModel(tok.vocabSize);
    const cache = new PromptCache({ maxBytes: 1e6, minTokens: 16 });
    await run(model, [1, 2, 3], { promptCache: cache });
    expect(cache.stats().entries).toBe(0);
    const bare: StepModel = {
      contextLength: model.contextLength,
      get position() {
        return model.position;
      },
      reset: () => model.reset(),
      prefill: (ids) => model.prefill(ids),
      decode: (id) => model.decode(id),
      dispose: () => {},
    };
    const r = await run(bare, ask(1), { promptCache: cache });
    expect(r.stats.cachedTokens).toBe(0);
    expect(cache.stats().entries).toBe(0);
    expect(() => new PromptCache({ maxBytes: -1 })).toThrow(InvalidArgumentError);
    const snap = await model.snapshot();
    expect(() => cache.store([1, 2], snap)).toThrow(/position/);
  });
});
