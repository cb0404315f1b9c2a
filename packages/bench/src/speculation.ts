/**
 * Greedy speculative decoding, simulated exactly from two teacher-forced runs. With greedy
 * acceptance every accepted draft token equals the target's token, so inside a round the draft
 * always sees the target's prefix; hence "does the draft's argmax after the target's prefix equal
 * the target's next token" (one bit per position) decides every round: a round at position i with
 * lookahead γ accepts the run of matches starting at i (at most γ) and then emits one target token
 * (the correction, or the bonus token after γ accepted).
 */

export interface SpeculationRounds {
  /** Tokens emitted per round (accepted + 1). */
  readonly tokensPerRound: number[];
  /** Draft tokens accepted per round. */
  readonly acceptedPerRound: number[];
}

/** Rounds of greedy speculative decoding with lookahead `gamma` over `matches` (one per position). */
export function simulateRounds(matches: readonly boolean[], gamma: number): SpeculationRounds {
  if (!Number.isInteger(gamma) || gamma < 1)
    throw new RangeError(`gamma must be a positive integer, got ${gamma}`);
  const tokensPerRound: number[] = [];
  const acceptedPerRound: number[] = [];
  let i = 0;
  while (i < matches.length) {
    let a = 0;
    while (a < gamma && i + a < matches.length && matches[i + a]) a++;
    // the target emits one more token after the accepted ones (correction or bonus)
    const emitted = Math.min(a + 1, matches.length - i);
    acceptedPerRound.push(a);
    tokensPerRound.push(emitted);
    i += emitted;
  }
  return { tokensPerRound, acceptedPerRound };
}

/**
 * Expected speed-up of speculative decoding over plain target decoding: tokens per round × the
 * target's ms per token, over the round's cost (γ draft steps + one target verification of γ+1
 * tokens, measured).
 */
export function speedup(
  tokensPerRound: number,
  targetStepMs: number,
  draftStepMs: number,
  gamma: number,
  verifyMs: number,
): number {
  return (tokensPerRound * targetStepMs) / (gamma * draftStepMs + verifyMs);
}
