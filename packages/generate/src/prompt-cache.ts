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
  /** The client partition that stored it (see PromptCache.partition). */
  readonly partition: string;
  readonly ids: Int32Array;
  readonly snapshot: StateSnapshot;
}

/** What the partitions of one cache share: the snapshots, the byte budget and the counts. */
interface Store {
  /** In use order: the least recently used first. */
  readonly entries: Set<Entry>;
  held: number;
  readonly counts: { hits: number; misses: number; cachedTokens: number; evictions: number };
}

export const DEFAULT_PROMPT_CACHE_MIN_TOKENS = 16;

export class PromptCache {
  readonly maxBytes: number;
  readonly minTokens: number;
  private shared: Store = {
    entries: new Set(),
    held: 0,
    counts: { hits: 0, misses: 0, cachedTokens: 0, evictions: 0 },
  };
  private partitionName = "";

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
   * A view of this cache that sees only the snapshots stored through views of the same `name`
   * (one per client, e.g. per API key): its lookups never restore, and its plans never branch at,
   * another partition's prompts, so neither the tokens restored nor the time taken tell one client
   * what another sent. The partitions share the byte budget (least recently used evicted first,
   * whoever stored it) and the counts. This cache itself is the partition named "".
   */
  partition(name: string): PromptCache {
    const view = new PromptCache({ maxBytes: this.maxBytes, minTokens: this.minTokens });
    view.shared = this.shared;
    view.partitionName = name;
    return view;
  }

  /**
   * The snapshot of the longest stored prefix of `ids` that leaves at least one token to prefill
   * (the model must still compute the last token's output), marked as used; undefined on a miss.
   */
  lookup(ids: ArrayLike<number>): { tokens: number; snapshot: StateSnapshot } | undefined {
    const { entries, counts } = this.shared;
    let best: Entry | undefined;
    for (const e of this.own()) {
      const n = e.ids.length;
      if (n < ids.length && n > (best?.ids.length ?? 0) && commonPrefix(e.ids, ids) === n) best = e;
    }
    if (!best) {
      counts.misses++;
      return undefined;
    }
    entries.delete(best);
    entries.add(best);
    counts.hits++;
    counts.cachedTokens += best.ids.length;
    return { tokens: best.ids.length, snapshot: best.snapshot };
  }

  /**
   * Where to take snapshots while prefilling `ids` from position `from` (a hit's length): the
   * caller's `checkpoints`, the longest prefix shared with a stored key (a branch point), and one
   * token before the end; each past `from`, at least `minTokens` long, and not stored already.
   */
  plan(ids: ArrayLike<number>, from: number, checkpoints: readonly number[] = []): number[] {
    let branch = 0;
    const stored = new Set<number>();
    for (const e of this.own()) {
      const shared = commonPrefix(e.ids, ids);
      branch = Math.max(branch, shared);
      if (shared === e.ids.length) stored.add(shared);
    }
    const points = new Set([...checkpoints, branch, ids.length - 1]);
    return [...points]
      .filter((p) => Number.isInteger(p) && p > from && p < ids.length && p >= this.minTokens)
      .filter((p) => !stored.has(p))
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
    for (const e of this.own()) {
      if (e.ids.length === ids.length && commonPrefix(e.ids, ids) === ids.length) this.remove(e);
    }
    const s = this.shared;
    s.entries.add({ partition: this.partitionName, ids: Int32Array.from(ids), snapshot });
    s.held += snapshot.bytes;
    for (const e of s.entries) {
      if (s.held <= this.maxBytes) break;
      this.remove(e);
      s.counts.evictions++;
    }
  }

  /** Disposes every snapshot, of every partition. */
  clear(): void {
    for (const e of [...this.shared.entries]) this.remove(e);
  }

  /** Counts of the whole cache, every partition together. */
  stats(): PromptCacheStats {
    const { entries, held, counts } = this.shared;
    return { entries: entries.size, bytes: held, ...counts };
  }

  /** This partition's entries (a copy: callers may remove while iterating). */
  private own(): Entry[] {
    const out: Entry[] = [];
    for (const e of this.shared.entries) if (e.partition === this.partitionName) out.push(e);
    return out;
  }

  private remove(e: Entry): void {
    const s = this.shared;
    if (!s.entries.delete(e)) return;
    s.held -= e.snapshot.bytes;
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
