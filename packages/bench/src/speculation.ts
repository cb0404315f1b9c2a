/**
 * Greedy speculative decoding, run for real on two StepModels that hold their own sequence state
 * (the KV caches and the GatedDeltaNet states). Per round:
 *   draft   proposes γ tokens, one decode step each, from the last emitted token;
 *   target  verifies them: "batch" = one call consuming the pending token and the γ proposals with
 *           every position's logits (MLX's prefillAll), "sequential" = one decode per token,
 *           stopping at the first disagreement (what an ANE chain, one token per step, can do);
 *   accept  the proposals up to the first that differs from the target's greedy token, then emit
 *           the target's own token there (the correction, or the bonus after γ accepted);
 *   rollback a model that consumed rejected tokens goes back to its snapshot from the start of the
 *           round and consumes the accepted ones again: a GatedDeltaNet state cannot be rewound.
 * With greedy acceptance the emitted tokens are the target's own greedy tokens.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { canSnapshot, type SnapshotModel, type StepModel } from "@anemll-qwen35/generate";
import { greedy } from "./steps.js";

/** A target that returns every position's logits from one call (runtime-mlx's prefillAll). */
interface AllLogits {
  prefillAll(ids: Int32Array | number[]): Promise<Float32Array>;
}

const hasPrefillAll = (m: StepModel): m is StepModel & AllLogits =>
  typeof (m as Partial<AllLogits>).prefillAll === "function";

export interface SpeculativeOptions {
  /** Draft tokens proposed per round (γ). */
  readonly gamma: number;
  /** Tokens to emit after the prompt (the first comes from the prompt's prefill). */
  readonly tokens: number;
  /** How the target checks the proposals (default: "batch" when it has prefillAll). */
  readonly verify?: "batch" | "sequential";
  /** The target's vocabulary (rows of prefillAll's output); needed for "batch". */
  readonly vocab?: number;
  readonly signal?: AbortSignal;
}

export interface SpeculativeRun {
  /** The emitted tokens: the target's greedy tokens. */
  readonly tokens: number[];
  readonly acceptedPerRound: number[];
  /** Accepted + the target's own token. */
  readonly tokensPerRound: number[];
  readonly verify: "batch" | "sequential";
  /** Time after the prompt: drafting, verifying and rolling back, in all and apart. */
  readonly decodeMs: number;
  readonly draftMs: number;
  readonly verifyMs: number;
  readonly rollbackMs: number;
  readonly rollbacks: number;
}

function needSnapshots(m: StepModel, role: string): SnapshotModel {
  if (!canSnapshot(m))
    throw new InvalidArgumentError(`speculative decoding: the ${role} cannot snapshot its state`);
  return m;
}

/** Runs greedy speculative decoding of `prompt` with `draft` proposing for `target`. */
export async function speculativeDecode(
  targetModel: StepModel,
  draftModel: StepModel,
  prompt: readonly number[],
  o: SpeculativeOptions,
): Promise<SpeculativeRun> {
  const { gamma } = o;
  if (!Number.isInteger(gamma) || gamma < 1)
    throw new RangeError(`gamma must be a positive integer, got ${gamma}`);
  const target = needSnapshots(targetModel, "target");
  const draft = needSnapshots(draftModel, "draft");
  const verify = o.verify ?? (hasPrefillAll(target) ? "batch" : "sequential");
  if (verify === "batch" && (!hasPrefillAll(target) || !o.vocab))
    throw new InvalidArgumentError(
      "batch verification needs a target with prefillAll and the vocabulary size",
    );

  await target.reset();
  await draft.reset();
  const tokens = [greedy(await target.prefill(prompt.slice()))];
  await draft.prefill(prompt.slice());
  const acceptedPerRound: number[] = [];
  const tokensPerRound: number[] = [];
  let draftMs = 0;
  let verifyMs = 0;
  let rollbackMs = 0;
  let rollbacks = 0;
  const t0 = performance.now();

  /** Brings `m` back to its snapshot and feeds it `ids` (the accepted part of the round). */
  const rollback = async (
    m: SnapshotModel,
    snap: Awaited<ReturnType<SnapshotModel["snapshot"]>>,
    ids: number[],
  ) => {
    const t = performance.now();
    await m.restore(snap);
    if (ids.length) await m.prefill(ids);
    rollbacks++;
    rollbackMs += performance.now() - t;
  };

  while (tokens.length < o.tokens) {
    o.signal?.throwIfAborted();
    const pending = tokens[tokens.length - 1]; // emitted, consumed by neither model yet
    const g = Math.min(gamma, o.tokens - tokens.length); // never propose past the end
    const snapDraft = await draft.snapshot();
    const snapTarget = verify === "batch" ? await target.snapshot() : undefined;
    try {
      // draft: γ proposals; it consumes pending and the first γ-1 of them
      let t = performance.now();
      const proposed: number[] = [];
      let feed = pending;
      for (let i = 0; i < g; i++) {
        proposed.push(greedy(await draft.decode(feed)));
        feed = proposed[i];
      }
      draftMs += performance.now() - t;

      // target: its greedy token after pending and after each accepted proposal
      t = performance.now();
      const own: number[] = [];
      if (verify === "batch") {
        const vocab = o.vocab as number;
        const rows = await (target as SnapshotModel & AllLogits).prefillAll([pending, ...proposed]);
        for (let j = 0; j <= g; j++) own.push(greedy({ logits: rows.subarray(j * vocab, (j + 1) * vocab) }));
      } else {
        own.push(greedy(await target.decode(pending)));
        for (let j = 0; j < g && proposed[j] === own[j]; j++)
          own.push(greedy(await target.decode(proposed[j])));
      }
      verifyMs += performance.now() - t;

      let accepted = 0;
      while (accepted < g && proposed[accepted] === own[accepted]) accepted++;
      const kept = [pending, ...proposed.slice(0, accepted)];
      // target: batch consumed pending + all γ; sequential stopped right after the accepted ones
      if (snapTarget && accepted < g) await rollback(target, snapTarget, kept);
      // draft: consumed pending + the first γ-1 proposals
      if (accepted === g) await draft.prefill([proposed[g - 1]]);
      else if (accepted < g - 1) await rollback(draft, snapDraft, kept);
      tokens.push(...proposed.slice(0, accepted), own[accepted]);
      acceptedPerRound.push(accepted);
      tokensPerRound.push(accepted + 1);
    } finally {
      snapDraft.dispose();
      snapTarget?.dispose();
    }
  }
  return {
    tokens: tokens.slice(0, o.tokens),
    acceptedPerRound,
    tokensPerRound,
    verify,
    decodeMs: performance.now() - t0,
    draftMs,
    verifyMs,
    rollbackMs,
    rollbacks,
  };
}
