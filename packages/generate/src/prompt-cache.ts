/**
 * A prompt cache: snapshots of one model's state (StepModel.snapshot()) keyed by the token prefix
 * they hold, least recently used evicted first within a byte budget. A prompt that starts with a
 * stored prefix restores that state and prefills only the rest: requests sharing a system prompt
 * and tool schemas skip that part of the prefill.
 *
 * Qwen3.5's GatedDeltaNet state cannot be rewound, so a snapshot serves only prompts that extend
 * its whole key. Snapshots are taken on the way through a prompt, at (a) the points the caller
 * names (the end of the system prompt and tools), (b) the point where the prompt leaves a stored
 * key (a branch: the next prompt with that start will hit it) and (c) one token before the end
 * (the next request repeating the prompt prefills one token).
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { StateSnapshot } from "./step-model.js";

export interface PromptCacheOptions {
  /** The most bytes the snapshots may hold together (required; see StateSnapshot.bytes). */
  maxBytes: number;
  /** Shortest prefix worth a snapshot (default 16 tokens). */
  minTokens?: number;
}

export interface PromptCacheStats {
  readonly entries: number;
  readonly bytes: number;
  readonly hits: number;
  readonly misses: number;
  /** Prompt tokens served from snapshots in all. */
  readonly cachedTokens: number;
  readonly evictions: number;
}

interface Entry {
  readonly ids: Int32Array;
  readonly snapshot: StateSnapshot;
}

export const DEFAULT_PROMPT_CACHE_MIN_TOKENS = 16;

export class PromptCache {
  readonly maxBytes: number;
  readonly minTokens: number;
  /** In use order: the least recently used first. */
  private readonly entries = new Map<string, Entry>();
  private held = 0;
  private counts = { hits: 0, misses: 0, cachedTokens: 0, evictions: 0 };

  constructor(o: PromptCacheOptions) {
    if (!Number.isFinite(o.maxBytes) || o.maxBytes < 0)
      throw new InvalidArgumentError(`prompt cache: maxBytes must be a number ≥ 0, got ${o.maxBytes}`);
    const minTokens = o.minTokens ?? DEFAULT_PROMPT_CACHE_MIN_TOKENS;
    if (!Number.isInteger(minTokens) || minTokens < 1)
      throw new InvalidArgumentError(`prompt cache: minTokens must be an integer ≥ 1, got ${minTokens}`);
    this.maxBytes = o.maxBytes;
    this.minTokens = minTokens;
  }

  /**
   * The snapshot of the longest stored prefix of `ids` that leaves at least one token to prefill
   * (the model must still compute the last token's output), marked as used; undefined on a miss.
   */
  lookup(ids: ArrayLike<number>): { tokens: number; snapshot: StateSnapshot } | undefined {
    let best: { key: string; entry: Entry } | undefined;
    for (const [key, entry] of this.entries) {
      const n = entry.ids.length;
      if (n < ids.length && n > (best?.entry.ids.length ?? 0) && commonPrefix(entry.ids, ids) === n)
        best = { key, entry };
    }
    if (!best) {
      this.counts.misses++;
      return undefined;
    }
    this.entries.delete(best.key);
    this.entries.set(best.key, best.entry);
    this.counts.hits++;
    this.counts.cachedTokens += best.entry.ids.length;
    return { tokens: best.entry.ids.length, snapshot: best.entry.snapshot };
  }

  /**
   * Where to take snapshots while prefilling `ids` from position `from` (a hit's length): the
   * caller's `checkpoints`, the longest prefix shared with a stored key (a branch point), and one
   * token before the end; each past `from`, at least `minTokens` long, and not stored already.
   */
  plan(ids: ArrayLike<number>, from: number, checkpoints: readonly number[] = []): number[] {
    let branch = 0;
    for (const e of this.entries.values()) branch = Math.max(branch, commonPrefix(e.ids, ids));
    const points = new Set([...checkpoints, branch, ids.length - 1]);
    return [...points]
      .filter((p) => Number.isInteger(p) && p > from && p < ids.length && p >= this.minTokens)
      .filter((p) => !this.entries.has(keyOf(ids, p)))
      .sort((a, b) => a - b);
  }

  /**
   * Keeps `snapshot` as the state after `ids` (it must hold exactly that many tokens), then evicts
   * the least recently used snapshots until the budget holds. A snapshot larger than the whole
   * budget is disposed at once. The cache owns the snapshot from now on.
   */
  store(ids: ArrayLike<number>, snapshot: StateSnapshot): void {
    if (snapshot.position !== ids.length) {
      snapshot.dispose();
      throw new InvalidArgumentError(
        `prompt cache: a snapshot at position ${snapshot.position} cannot stand for ${ids.length} tokens`,
      );
    }
    if (snapshot.bytes > this.maxBytes) {
      snapshot.dispose();
      return;
    }
    const key = keyOf(ids, ids.length);
    this.remove(key);
    this.entries.set(key, { ids: Int32Array.from(ids), snapshot });
    this.held += snapshot.bytes;
    for (const k of this.entries.keys()) {
      if (this.held <= this.maxBytes) break;
      this.remove(k);
      this.counts.evictions++;
    }
  }

  /** Disposes every snapshot. */
  clear(): void {
    for (const k of [...this.entries.keys()]) this.remove(k);
  }

  stats(): PromptCacheStats {
    return { entries: this.entries.size, bytes: this.held, ...this.counts };
  }

  private remove(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.held -= e.snapshot.bytes;
    e.snapshot.dispose();
  }
}

/** How many leading ids `a` and `b` share. */
export function commonPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

function keyOf(ids: ArrayLike<number>, length: number): string {
  return Array.prototype.slice.call(ids, 0, length).join(",");
}
