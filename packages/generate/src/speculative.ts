/**
 * Speculative decoding with a model's own multi-token-prediction (MTP) head: the contract a runtime
 * implements (SpeculativeStepModel) and the acceptance rule the Generator applies.
 *
 * One round, after the Generator chose `next` from the last output: the head drafts γ tokens,
 * the main model scores [next, ...drafts] in one call (row j = its output after ids[0..j]), and
 * the drafts are accepted by the standard rule (Leviathan et al. 2023, "Fast Inference from
 * Transformers via Speculative Decoding", Algorithm 1): greedy keeps the longest prefix equal to
 * the target's arg-max; sampling keeps draft d with probability min(1, p(d)/q(d)) and, on a
 * rejection, draws from norm(max(0, p − q)), which leaves every emitted token distributed exactly
 * as the target p. The state then commits only [next, accepted drafts].
 */
import { SpeculativeUnsupportedError } from "./errors.js";
import type { Sampler } from "./sampler.js";
import type { StepModel, StepOptions, StepOutput } from "./step-model.js";

/** A StepModel that drafts with its own MTP head and scores several tokens in one call. */
export interface SpeculativeStepModel extends StepModel {
  /** The most draft tokens one verify call takes (k, fixed at conversion / load); 0: no head. */
  readonly maxDraftTokens: number;
  /**
   * Drafts `gamma` (1 ≤ gamma ≤ maxDraftTokens) tokens that follow `next` — the token the
   * generator chose from the last output, NOT yet consumed by the model. The MTP head is applied
   * recursively: draft i is chosen by `pick(output_i, i)` (argmax for greedy, a sampled id
   * otherwise) and fed to the next head step. Returns the chosen ids and the head's outputs (the
   * sampler needs q for the rejection rule). The main model's state does not move.
   */
  draft(
    next: number,
    gamma: number,
    pick: (out: StepOutput, i: number) => number,
    opts?: StepOptions,
  ): Promise<{ ids: number[]; outputs: StepOutput[] }>;
  /**
   * Scores [next, ...drafts] (1 + gamma ids) in ONE call from `position`: returns one output per
   * row (row j = the main model's output after consuming ids[0..j]). State is provisional.
   */
  verify(ids: number[], opts?: StepOptions): Promise<StepOutput[]>;
  /**
   * Commits the first `n` ids of the last verify (1 ≤ n ≤ ids.length): position advances by n, the
   * GDN/KV state and the MTP head's own cache are exactly as if those n ids had been decoded one by
   * one; nothing advances past a rejected token.
   */
  accept(n: number, opts?: StepOptions): Promise<void>;
}

/** True when `m` implements draft/verify/accept and has a head (maxDraftTokens ≥ 1). */
export function canSpeculate(m: StepModel): m is SpeculativeStepModel {
  const s = m as Partial<SpeculativeStepModel>;
  return (
    typeof s.draft === "function" &&
    typeof s.verify === "function" &&
    typeof s.accept === "function" &&
    typeof s.maxDraftTokens === "number" &&
    s.maxDraftTokens >= 1
  );
}

/** What speculation did in one generation (GenerationStats.speculative). */
export interface SpeculativeStats {
  /** Tokens the head drafted. */
  draftTokens: number;
  /** Drafted tokens the rule accepted. */
  acceptedTokens: number;
  /** Verify calls (one per round). */
  calls: number;
  /** acceptedTokens / draftTokens (0 when nothing was drafted). */
  acceptanceRate: number;
  /** Tokens each verify call produced: (acceptedTokens + calls) / calls, the accepted drafts plus one of the target's own. */
  tokensPerCall: number;
}

/** The typed error for `speculative: "mtp"` on a model that cannot do it (why, in the message). */
export function speculationUnsupported(model: StepModel): SpeculativeUnsupportedError {
  const s = model as Partial<SpeculativeStepModel>;
  const why =
    typeof s.draft === "function" && s.maxDraftTokens === 0
      ? "the model was loaded or converted without its MTP head (no mtp.* tensors in the checkpoint, or the head was left out)"
      : "this runtime's model has no draft/verify/accept (no MTP head)";
  return new SpeculativeUnsupportedError(`speculative: "mtp" needs a model with an MTP head: ${why}`);
}

/**
 * The rejection rule for one draft (sampling): accept `d` with probability min(1, p(d)/q(d)).
 * On rejection returns the replacement drawn from norm(max(0, p − q)) (p when that is all zero,
 * which only rounding can make happen). `p` and `q` are distributions over the same ids.
 */
export function rejectionStep(
  sampler: Sampler,
  p: Float64Array,
  q: Float64Array,
  d: number,
): { accepted: true } | { accepted: false; id: number } {
  const pd = p[d] ?? 0;
  const qd = q[d] ?? 0;
  // q(d) = 0 cannot happen for a d drawn from q; treat it as "always accept if p allows".
  if (pd > 0 && (qd <= 0 || sampler.uniform() * qd < pd)) return { accepted: true };
  const residual = new Float64Array(p.length);
  let mass = 0;
  for (let i = 0; i < p.length; i++) {
    const r = p[i] - (q[i] ?? 0);
    if (r > 0) {
      residual[i] = r;
      mass += r;
    }
  }
  return { accepted: false, id: sampler.drawFrom(mass > 0 ? residual : p, argmax(p)) };
}

/** The id of the largest entry. */
export function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}

/** Stats of a generation from its counters. */
export function speculativeStats(
  draftTokens: number,
  acceptedTokens: number,
  calls: number,
): SpeculativeStats {
  return {
    draftTokens,
    acceptedTokens,
    calls,
    acceptanceRate: draftTokens > 0 ? acceptedTokens / draftTokens : 0,
    tokensPerCall: calls > 0 ? (acceptedTokens + calls) / calls : 0,
  };
}
