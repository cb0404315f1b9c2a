import { InvalidArgumentError } from "@anemll-qwen35/core";
import { UnsupportedSamplingError } from "./errors.js";
import type { StepOutput } from "./step-model.js";

/**
 * How the next token is chosen from a row of logits. The pipeline follows Hugging Face's order:
 * penalties → temperature → top-k → top-p (on the top-k-renormalized distribution) → min-p → draw.
 */
export interface SamplingOptions {
  /** 0 (the default) picks the arg-max (greedy); > 0 divides the logits before the softmax. */
  temperature?: number;
  /** Keep only the k most likely tokens. 0 (default) = off. */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p. 1 (default) = off. */
  topP?: number;
  /** Drop tokens whose probability is below minP × the top token's. 0 (default) = off. */
  minP?: number;
  /** CTRL-style: a seen token's logit is divided by this when positive, multiplied when negative. 1 = off. */
  repetitionPenalty?: number;
  /** OpenAI-style: subtracted once from the logit of every token seen in the window. 0 = off. */
  presencePenalty?: number;
  /** OpenAI-style: subtracted per occurrence in the window. 0 = off. */
  frequencyPenalty?: number;
  /** How many of the most recent tokens (prompt included) the penalties look at. Default 64. */
  penaltyLastN?: number;
  /** PRNG seed; the same seed, options and logits give the same tokens on every platform. Default random. */
  seed?: number;
}

type Resolved = Required<SamplingOptions>;

/** Logit buckets for top-p over the whole vocabulary; more buckets = fewer tokens to sort at the edge. */
const NUCLEUS_BUCKETS = 4096;

/**
 * xoshiro128** (Blackman & Vigna, 2018), seeded through splitmix32.
 * Hand-written rather than a dependency: it is ten lines, and sampling must be bit-reproducible
 * across platforms and Node versions, which `Math.random` (unseedable, engine-defined) is not.
 */
export class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    // Fold seeds beyond 32 bits so that every safe integer gives a distinct-ish stream.
    let x = (seed >>> 0) ^ Math.imul(Math.floor(seed / 4294967296) >>> 0, 0x9e3779b1);
    const next = () => {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1; // the all-zero state is a fixed point
  }

  /** A generator at an exact state (four 32-bit words, not all zero); for tests against the reference. */
  static fromState(state: readonly [number, number, number, number]): Xoshiro128 {
    const g = new Xoshiro128(0);
    [g.s0, g.s1, g.s2, g.s3] = state.map((w) => w | 0);
    return g;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

export class Sampler {
  readonly options: Readonly<Resolved>;
  private readonly rng: Xoshiro128;
  private penalized: Float32Array | undefined;
  private weights: Float64Array | undefined;
  private buckets: Uint16Array | undefined;

  constructor(options: SamplingOptions = {}) {
    this.options = resolve(options);
    this.rng = new Xoshiro128(this.options.seed);
  }

  /** Greedy: the arg-max, no randomness. */
  get isGreedy(): boolean {
    return this.options.temperature === 0;
  }

  get usesPenalties(): boolean {
    const o = this.options;
    return (
      o.penaltyLastN > 0 && (o.repetitionPenalty !== 1 || o.presencePenalty !== 0 || o.frequencyPenalty !== 0)
    );
  }

  /**
   * Picks the next token from a step's output. An argmax-only head (`top1`) can serve only greedy,
   * penalty-free decoding; anything else throws `UnsupportedSamplingError`.
   */
  pick(output: StepOutput, history: ArrayLike<number> = [], vocabSize?: number): number {
    if ("logits" in output) return this.sample(output.logits, history, vocabSize);
    this.assertTop1Compatible();
    return output.top1.id;
  }

  /** Throws unless this configuration can run on a model that returns only the arg-max id. */
  assertTop1Compatible(): void {
    if (!this.isGreedy || this.usesPenalties) {
      throw new UnsupportedSamplingError(
        "the model returns only its top-1 token (arg-max head), so it can only decode greedily " +
          "without penalties; set temperature 0 and no repetition/presence/frequency penalty, " +
          "or use a model converted with a full logits head",
      );
    }
  }

  /**
   * Samples a token id from `logits` (only ids below `vocabSize` are candidates: Qwen3.5's padded
   * embedding rows have no token). `history` holds the recent token ids for the penalties; only
   * its last `penaltyLastN` entries are read. `logits` is never modified.
   */
  sample(logits: Float32Array, history: ArrayLike<number> = [], vocabSize = logits.length): number {
    const r = this.weigh(logits, history, vocabSize);
    if (r.w === undefined) return r.maxId;
    const u = this.rng.next();
    return r.cand
      ? r.cand[drawIndex(r.w, r.cand.length, r.sum, u, 0)]
      : drawIndex(r.w, r.n, r.sum, u, r.maxId);
  }

  /**
   * The distribution `sample()` draws from for these logits, as probabilities over the first
   * `vocabSize` ids (a point mass on the arg-max when greedy). For speculative decoding's rejection
   * rule, which needs p and q themselves; draws nothing.
   */
  distribution(
    logits: Float32Array,
    history: ArrayLike<number> = [],
    vocabSize = logits.length,
  ): Float64Array {
    const r = this.weigh(logits, history, vocabSize);
    const p = new Float64Array(r.n);
    if (r.w === undefined || !(r.sum > 0)) {
      p[r.maxId] = 1;
      return p;
    }
    const inv = 1 / r.sum;
    if (r.cand) for (let j = 0; j < r.cand.length; j++) p[r.cand[j]] = r.w[j] * inv;
    else for (let i = 0; i < r.n; i++) p[i] = r.w[i] * inv;
    return p;
  }

  /** A uniform draw in [0, 1) from this sampler's seeded generator. */
  uniform(): number {
    return this.rng.next();
  }

  /** An id drawn in proportion to `weights` (need not sum to 1); `fallback` when they are all 0. */
  drawFrom(weights: Float64Array, fallback: number): number {
    let sum = 0;
    for (let i = 0; i < weights.length; i++) sum += weights[i];
    return drawIndex(weights, weights.length, sum, this.rng.next(), fallback);
  }

  /**
   * The sampling pipeline up to the draw: unnormalized weights over the candidates (`cand`, or the
   * first n ids when undefined), or no weights when greedy (the answer is `maxId`).
   */
  private weigh(
    logits: Float32Array,
    history: ArrayLike<number>,
    vocabSize: number,
  ): { n: number; maxId: number; w?: Float64Array; cand?: Int32Array; sum: number } {
    const n = Math.min(vocabSize, logits.length);
    if (n <= 0) throw new InvalidArgumentError("sample: logits are empty");
    const l = this.usesPenalties ? this.applyPenalties(logits, n, history) : logits;
    const { temperature: t, topK, topP, minP } = this.options;

    let maxId = -1;
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < n; i++) {
      if (l[i] > max) {
        max = l[i];
        maxId = i;
      }
    }
    if (maxId < 0) throw new InvalidArgumentError("sample: every logit is -Infinity or NaN");
    if (t === 0) return { n, maxId, sum: 0 };

    const invT = 1 / t;
    // min-p keeps p_i >= minP * p_max, i.e. l_i >= max + t * ln(minP): a logit threshold, no softmax needed.
    const floor = minP > 0 ? max + t * Math.log(minP) : Number.NEGATIVE_INFINITY;

    let cand: Int32Array | undefined;
    if (topK > 0 && topK < n) cand = topIndices(l, n, topK);
    if (topP < 1) cand = this.nucleus(l, n, cand, max, invT, topP);

    if (cand === undefined) {
      // Plain temperature (± min-p): one pass over the whole vocabulary.
      const w = this.weightBuffer(n);
      let sum = 0;
      for (let i = 0; i < n; i++) {
        const x = l[i];
        const e = x >= floor ? weight(x, max, invT) : 0;
        w[i] = e;
        sum += e;
      }
      return { n, maxId, w, sum };
    }

    const w = this.weightBuffer(cand.length);
    let sum = 0;
    for (let j = 0; j < cand.length; j++) {
      const x = l[cand[j]];
      const e = x >= floor ? weight(x, max, invT) : 0;
      w[j] = e;
      sum += e;
    }
    return { n, maxId, w, cand, sum };
  }

  /**
   * Top-p without sorting the vocabulary. With top-k the candidates are few and already sorted, so
   * the nucleus is a prefix. Otherwise one pass buckets every token by logit (mass per bucket),
   * walking the buckets from the top finds the bucket where the cumulative mass reaches topP, and
   * only that bucket's members are sorted: the buckets above it are wholly inside the nucleus.
   */
  private nucleus(
    l: ArrayLike<number>,
    n: number,
    cand: Int32Array | undefined,
    max: number,
    invT: number,
    topP: number,
  ): Int32Array {
    if (cand) {
      let total = 0;
      for (let j = 0; j < cand.length; j++) total += weight(l[cand[j]], max, invT);
      let mass = 0;
      for (let j = 0; j < cand.length; j++) {
        mass += weight(l[cand[j]], max, invT);
        if (mass >= topP * total) return cand.subarray(0, j + 1);
      }
      return cand; // rounding left the whole set a hair short of topP × total
    }

    let lo = max;
    for (let i = 0; i < n; i++) if (l[i] < lo && l[i] > Number.NEGATIVE_INFINITY) lo = l[i];
    const B = Math.min(NUCLEUS_BUCKETS, n);
    const scale = max > lo ? (B - 1) / (max - lo) : 0;
    if (!this.buckets || this.buckets.length < n) this.buckets = new Uint16Array(n);
    const bucket = this.buckets;
    const mass = new Float64Array(B);
    const count = new Int32Array(B);
    let total = 0;
    for (let i = 0; i < n; i++) {
      const x = l[i];
      const b = x >= lo ? Math.floor((max - x) * scale) : B - 1; // NaN and -Infinity land last, weightless
      bucket[i] = b;
      mass[b] += weight(x, max, invT);
      count[b]++;
    }
    for (let b = 0; b < B; b++) total += mass[b];
    const target = topP * total;
    let cut = 0;
    let above = 0; // mass of buckets before `cut`
    let size = 0;
    while (cut < B - 1 && above + mass[cut] < target) {
      above += mass[cut];
      size += count[cut];
      cut++;
    }
    const inside = new Int32Array(size + count[cut]);
    let m = 0;
    let e = size;
    for (let i = 0; i < n; i++) {
      const b = bucket[i];
      if (b < cut) inside[m++] = i;
      else if (b === cut) inside[e++] = i;
    }
    const edge = inside.subarray(size);
    edge.sort((a, b) => l[b] - l[a] || a - b);
    let acc = above;
    for (let j = 0; j < edge.length; j++) {
      acc += weight(l[edge[j]], max, invT);
      if (acc >= target) return inside.subarray(0, size + j + 1);
    }
    return inside;
  }

  private applyPenalties(logits: Float32Array, n: number, history: ArrayLike<number>): Float32Array {
    if (!this.penalized || this.penalized.length < n) this.penalized = new Float32Array(n);
    const out = this.penalized.subarray(0, n);
    out.set(logits.subarray(0, n));
    const { repetitionPenalty: rp, presencePenalty: pp, frequencyPenalty: fp, penaltyLastN } = this.options;
    const counts = new Map<number, number>();
    for (let i = Math.max(0, history.length - penaltyLastN); i < history.length; i++) {
      const id = history[i];
      if (id >= 0 && id < n) counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const [id, count] of counts) {
      let x = out[id];
      if (rp !== 1) x = x > 0 ? x / rp : x * rp;
      out[id] = x - pp - fp * count;
    }
    return out;
  }

  private weightBuffer(n: number): Float64Array {
    if (!this.weights || this.weights.length < n) this.weights = new Float64Array(Math.max(n, 64));
    return this.weights;
  }
}

/**
 * exp((x - max) / T), the unnormalized softmax weight. Below e^-40 (4e-18, far under the 2^-32
 * resolution of a draw even summed over 248k tokens) it is taken as 0, which skips most of the
 * exp() calls for a real model's peaked logits. NaN gives 0.
 */
function weight(x: number, max: number, invT: number): number {
  const d = (x - max) * invT;
  return d > -40 ? Math.exp(d) : 0;
}

/** Inverse-CDF draw over the first n weights; `fallback` if the sum is not positive. */
function drawIndex(w: Float64Array, n: number, sum: number, u: number, fallback: number): number {
  if (!(sum > 0)) return fallback;
  let r = u * sum;
  let last = fallback;
  for (let i = 0; i < n; i++) {
    if (w[i] <= 0) continue;
    last = i;
    r -= w[i];
    if (r < 0) return i;
  }
  return last; // u*sum landed on the rounding edge: the last positive weight
}

/**
 * Indices of the k largest values among the first n, sorted by value (descending, ties by lower id).
 * A size-k min-heap over one pass: O(n log k), and for k ≪ n nearly every element is one compare.
 */
export function topIndices(values: ArrayLike<number>, n: number, k: number): Int32Array {
  k = Math.min(k, n);
  const heap = new Int32Array(k);
  let size = 0;
  // "a ranks below b": smaller value, or equal value and larger id (so lower ids win ties).
  const below = (a: number, b: number) => values[a] < values[b] || (values[a] === values[b] && a > b);
  const siftDown = (start: number) => {
    let i = start;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= size) return;
      let m = left;
      if (left + 1 < size && below(heap[left + 1], heap[left])) m = left + 1;
      if (!below(heap[m], heap[i])) return;
      const tmp = heap[i];
      heap[i] = heap[m];
      heap[m] = tmp;
      i = m;
    }
  };
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (Number.isNaN(v)) continue; // NaN never ranks
    if (size < k) {
      heap[size] = i;
      let c = size++;
      while (c > 0) {
        const p = (c - 1) >> 1;
        if (!below(heap[c], heap[p])) break;
        const tmp = heap[c];
        heap[c] = heap[p];
        heap[p] = tmp;
        c = p;
      }
    } else if (v > values[heap[0]]) {
      heap[0] = i;
      siftDown(0);
    }
  }
  const out = heap.slice(0, size);
  out.sort((a, b) => values[b] - values[a] || a - b);
  return out;
}

function resolve(o: SamplingOptions): Resolved {
  const r: Resolved = {
    temperature: o.temperature ?? 0,
    topK: o.topK ?? 0,
    topP: o.topP ?? 1,
    minP: o.minP ?? 0,
    repetitionPenalty: o.repetitionPenalty ?? 1,
    presencePenalty: o.presencePenalty ?? 0,
    frequencyPenalty: o.frequencyPenalty ?? 0,
    penaltyLastN: o.penaltyLastN ?? 64,
    seed: o.seed ?? randomSeed(),
  };
  for (const [field, ok, expected] of RULES) {
    const value = r[field];
    if (!ok(value)) throw new InvalidArgumentError(`sampling.${field} must be ${expected}, got ${value}`);
  }
  return r;
}

/** What each resolved sampling field must satisfy, and how the error says so. */
const RULES: [keyof Resolved, (v: number) => boolean, string][] = [
  ["temperature", (v) => Number.isFinite(v) && v >= 0, "a finite number >= 0"],
  ["topK", (v) => Number.isInteger(v) && v >= 0, "an integer >= 0"],
  ["topP", (v) => v > 0 && v <= 1, "in (0, 1]"],
  ["minP", (v) => v >= 0 && v < 1, "in [0, 1)"],
  ["repetitionPenalty", (v) => Number.isFinite(v) && v > 0, "a finite number > 0"],
  ["presencePenalty", Number.isFinite, "a finite number"],
  ["frequencyPenalty", Number.isFinite, "a finite number"],
  ["penaltyLastN", (v) => Number.isInteger(v) && v >= 0, "an integer >= 0"],
  ["seed", (v) => Number.isSafeInteger(v) && v >= 0, "a non-negative safe integer"],
];

function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}
