import { InvalidArgumentError } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { Sampler, type SamplingOptions, UnsupportedSamplingError } from "../src/index.js";
import { topIndices, Xoshiro128 } from "../src/sampler.js";

/** Logits whose softmax (T = 1) is exactly `probs`. */
function logitsOf(probs: number[]): Float32Array {
  return Float32Array.from(probs, (p) => Math.log(p));
}

function histogram(options: SamplingOptions, logits: Float32Array, draws: number, history: number[] = []) {
  const s = new Sampler(options);
  const counts = new Map<number, number>();
  for (let i = 0; i < draws; i++) {
    const id = s.sample(logits, history);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

function freq(counts: Map<number, number>, id: number, draws: number): number {
  return (counts.get(id) ?? 0) / draws;
}

/** Deterministic pseudo-random logits for big-vocabulary tests. */
function randomLogits(n: number, seed: number, scale = 3): Float32Array {
  const g = new Xoshiro128(seed);
  return Float32Array.from({ length: n }, () => (g.next() - 0.5) * 2 * scale);
}

describe("Xoshiro128 (xoshiro128**)", () => {
  it("matches a BigInt transcription of the reference algorithm", () => {
    const M = 0xffffffffn;
    const rotl = (x: bigint, k: bigint) => ((x << k) | (x >> (32n - k))) & M;
    const state = [0x01234567n, 0x89abcdefn, 0xdeadbeefn, 0x0badf00dn];
    const ref = () => {
      const [s0, s1, s2, s3] = state;
      const result = (rotl((s1 * 5n) & M, 7n) * 9n) & M;
      const t = (s1 << 9n) & M;
      state[2] = s2 ^ s0;
      state[3] = s3 ^ s1;
      state[1] = s1 ^ state[2];
      state[0] = s0 ^ state[3];
      state[2] ^= t;
      state[3] = rotl(state[3], 11n);
      return Number(result);
    };
    const g = Xoshiro128.fromState([0x01234567, 0x89abcdef, 0xdeadbeef, 0x0badf00d]);
    for (let i = 0; i < 2000; i++) expect(g.nextUint32()).toBe(ref());
  });

  it("is reproducible per seed, differs across seeds, and looks uniform", () => {
    const a = new Xoshiro128(42);
    const b = new Xoshiro128(42);
    const c = new Xoshiro128(43);
    const sa = Array.from({ length: 100 }, () => a.next());
    expect(Array.from({ length: 100 }, () => b.next())).toEqual(sa);
    expect(Array.from({ length: 100 }, () => c.next())).not.toEqual(sa);
    const g = new Xoshiro128(7);
    const bins = new Array(10).fill(0);
    let outside = 0;
    for (let i = 0; i < 100_000; i++) {
      const u = g.next();
      if (!(u >= 0 && u < 1)) outside++;
      else bins[Math.floor(u * 10)]++;
    }
    expect(outside).toBe(0);
    for (const n of bins) expect(Math.abs(n - 10_000)).toBeLessThan(500);
  });
});

describe("topIndices (partial selection)", () => {
  it("equals a full sort's first k, ties broken by lower id", () => {
    const v = Float32Array.from({ length: 5000 }, (_, i) => Math.round(Math.sin(i * 12.9898) * 20));
    const full = Array.from(v.keys()).sort((a, b) => v[b] - v[a] || a - b);
    for (const k of [1, 7, 64, 5000])
      expect(Array.from(topIndices(v, v.length, k))).toEqual(full.slice(0, k));
  });
});

describe("Sampler", () => {
  const probs = [0.5, 0.25, 0.15, 0.1];

  it("greedy (temperature 0, the default) is the arg-max whatever the seed", () => {
    const logits = randomLogits(3000, 1);
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    for (const seed of [1, 2, 3]) expect(new Sampler({ seed }).sample(logits)).toBe(best);
    expect(new Sampler().isGreedy).toBe(true);
  });

  it("the same seed gives the same tokens; another seed does not", () => {
    const logits = randomLogits(2000, 5, 1);
    const run = (seed: number) => {
      const s = new Sampler({ temperature: 1, topK: 50, topP: 0.95, seed });
      return Array.from({ length: 64 }, () => s.sample(logits));
    };
    expect(run(11)).toEqual(run(11));
    expect(run(11)).not.toEqual(run(12));
  });

  it("temperature 1 draws from the softmax; higher flattens, lower sharpens", () => {
    const N = 40_000;
    const t1 = histogram({ temperature: 1, seed: 1 }, logitsOf(probs), N);
    for (const [i, p] of probs.entries()) expect(Math.abs(freq(t1, i, N) - p)).toBeLessThan(0.015);
    const hot = histogram({ temperature: 2, seed: 2 }, logitsOf(probs), N);
    const cold = histogram({ temperature: 0.5, seed: 3 }, logitsOf(probs), N);
    // p_i ∝ p_i^(1/T): T=2 → sqrt, T=0.5 → square.
    const pow = (e: number) => probs.map((p) => p ** e).map((x, _, a) => x / a.reduce((s, y) => s + y, 0));
    for (const [i, p] of pow(0.5).entries()) expect(Math.abs(freq(hot, i, N) - p)).toBeLessThan(0.015);
    for (const [i, p] of pow(2).entries()) expect(Math.abs(freq(cold, i, N) - p)).toBeLessThan(0.015);
    expect(freq(hot, 0, N)).toBeLessThan(freq(t1, 0, N));
    expect(freq(cold, 0, N)).toBeGreaterThan(freq(t1, 0, N));
  });

  it("top-k keeps exactly the k most likely tokens", () => {
    const logits = randomLogits(20_000, 9, 1);
    const top = new Set(topIndices(logits, logits.length, 5));
    const h = histogram({ temperature: 1.5, topK: 5, seed: 4 }, logits, 2000);
    expect(new Set(h.keys())).toEqual(top);
  });

  it("top-p keeps the smallest head reaching p, renormalized", () => {
    const N = 30_000;
    const h = histogram({ temperature: 1, topP: 0.7, seed: 5 }, logitsOf(probs), N);
    expect([...h.keys()].sort()).toEqual([0, 1]); // 0.5 < 0.7 <= 0.75
    expect(Math.abs(freq(h, 0, N) - 0.5 / 0.75)).toBeLessThan(0.015);
    const h2 = histogram({ temperature: 1, topP: 0.8, seed: 6 }, logitsOf(probs), N);
    expect([...h2.keys()].sort()).toEqual([0, 1, 2]);
  });

  it("top-p over a 248,320 vocabulary (bucketed, no full sort) samples only inside the nucleus", () => {
    const logits = randomLogits(248_320, 21, 2);
    const p = 0.3;
    // Independent answer: a full sort of the softmax.
    const max = logits.reduce((m, x) => Math.max(m, x), Number.NEGATIVE_INFINITY);
    const w = Array.from(logits, (x) => Math.exp(x - max));
    const total = w.reduce((s, x) => s + x, 0);
    const order = Array.from(w.keys()).sort((a, b) => w[b] - w[a]);
    let mass = 0;
    let size = 0;
    while (mass < p * total) mass += w[order[size++]];
    expect(size).toBeGreaterThan(1000); // far past the first 64-wide selection
    const allowed = new Set(order.slice(0, size));
    const s = new Sampler({ temperature: 1, topP: p, seed: 8 });
    for (let i = 0; i < 50; i++) expect(allowed.has(s.sample(logits))).toBe(true);
  });

  it("top-k then top-p: the nucleus is taken within the top-k distribution", () => {
    // top-2 renormalizes to [2/3, 1/3]; top-p 0.6 then keeps only token 0.
    const h = histogram({ temperature: 1, topK: 2, topP: 0.6, seed: 7 }, logitsOf(probs), 2000);
    expect([...h.keys()]).toEqual([0]);
  });

  it("min-p drops tokens below minP × the top probability", () => {
    const h = histogram({ temperature: 1, minP: 0.25, seed: 9 }, logitsOf([0.5, 0.3, 0.14, 0.06]), 20_000);
    expect([...h.keys()].sort()).toEqual([0, 1, 2]); // 0.06 < 0.125 <= 0.14
    const h2 = histogram({ temperature: 1, minP: 0.5, seed: 10 }, logitsOf([0.5, 0.3, 0.14, 0.06]), 20_000);
    expect([...h2.keys()].sort()).toEqual([0, 1]);
  });

  it("repetition penalty divides positive and multiplies negative logits of seen tokens", () => {
    expect(new Sampler({ repetitionPenalty: 1.1 }).sample(Float32Array.from([2, 1.9]), [0])).toBe(1);
    expect(new Sampler({ repetitionPenalty: 1.01 }).sample(Float32Array.from([2, 1.9]), [0])).toBe(0);
    // Negative: -1 × 1.5 = -1.5 < -1.2.
    expect(new Sampler({ repetitionPenalty: 1.5 }).sample(Float32Array.from([-1, -1.2]), [0])).toBe(1);
    // It lowers the sampled share of a seen token.
    const N = 20_000;
    const plain = histogram({ temperature: 1, seed: 11 }, logitsOf(probs), N, [0]);
    const penal = histogram({ temperature: 1, repetitionPenalty: 1.3, seed: 11 }, logitsOf(probs), N, [0]);
    expect(freq(penal, 0, N)).toBeLessThan(freq(plain, 0, N) - 0.05);
  });

  it("presence and frequency penalties subtract per seen token / per occurrence", () => {
    const l = Float32Array.from([1, 0.5]);
    expect(new Sampler({ presencePenalty: 0.6 }).sample(l, [0, 0, 0])).toBe(1);
    expect(new Sampler({ presencePenalty: 0.4 }).sample(l, [0, 0, 0])).toBe(0);
    expect(new Sampler({ frequencyPenalty: 0.2 }).sample(l, [0])).toBe(0); // 0.8 > 0.5
    expect(new Sampler({ frequencyPenalty: 0.2 }).sample(l, [0, 0, 0])).toBe(1); // 0.4 < 0.5
    expect(l).toEqual(Float32Array.from([1, 0.5])); // the caller's logits are untouched
  });

  it("penalties look only at the last penaltyLastN tokens", () => {
    const l = Float32Array.from([1, 0.5, 0]);
    expect(new Sampler({ presencePenalty: 1, penaltyLastN: 3 }).sample(l, [0, 2, 2, 2])).toBe(0);
    expect(new Sampler({ presencePenalty: 1, penaltyLastN: 4 }).sample(l, [0, 2, 2, 2])).toBe(1);
  });

  it("never picks ids past vocabSize (padded embedding rows)", () => {
    const l = new Float32Array(10).fill(0);
    l[8] = 50;
    l[3] = 1;
    expect(new Sampler().sample(l, [], 8)).toBe(3);
    const s = new Sampler({ temperature: 5, seed: 3 });
    for (let i = 0; i < 200; i++) expect(s.sample(l, [], 8)).toBeLessThan(8);
  });

  it("top-1 outputs serve greedy decoding and refuse anything else", () => {
    expect(new Sampler().pick({ top1: { id: 77, value: 3 } })).toBe(77);
    expect(() => new Sampler({ temperature: 0.7 }).pick({ top1: { id: 77, value: 3 } })).toThrow(
      UnsupportedSamplingError,
    );
    expect(() => new Sampler({ repetitionPenalty: 1.2 }).pick({ top1: { id: 1, value: 3 } })).toThrow(
      UnsupportedSamplingError,
    );
    expect(new Sampler().pick({ logits: Float32Array.from([0, 3, 1]) })).toBe(1);
  });

  it("rejects out-of-range options naming the field", () => {
    expect(() => new Sampler({ topP: 0 })).toThrow(InvalidArgumentError);
    expect(() => new Sampler({ temperature: -1 })).toThrow(/sampling\.temperature/);
    expect(() => new Sampler({ topK: 2.5 })).toThrow(/sampling\.topK/);
    expect(() => new Sampler({ minP: 1 })).toThrow(/sampling\.minP/);
    expect(() => new Sampler({ repetitionPenalty: 0 })).toThrow(/repetitionPenalty/);
    expect(() => new Sampler({ seed: -3 })).toThrow(/seed/);
    expect(() => new Sampler().sample(new Float32Array(3).fill(Number.NaN))).toThrow(InvalidArgumentError);
  });
});
