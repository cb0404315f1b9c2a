/**
 * Projected ANE decode speed with speculative decoding by the model's MTP head (issue 26): decode
 * on the ANE is bound by streaming the weights once a call, so a verify call of k + 1 rows costs
 * about one decode step, and the speed-up is what the head's acceptance buys back against its
 * drafting. Per round (γ drafts):
 *
 *   round = verify + γ · draft + a · head        tokens = 1 + a        (a: mean accepted drafts)
 *   verify = calls · dispatch + (trunk weights + per-row GDN states) / bandwidth
 *   draft  = 2 · dispatch + (head weights + lm_head weights) / bandwidth   (mtp, then the lm_head)
 *   head   = dispatch + head weights / bandwidth                            (the head's catch-up
 *            over accepted tokens: their entries are rewritten from the trunk's hidden states)
 *
 * The bandwidth is calibrated so that the plain chain runs at a measured decode speed (the
 * reference study's 66.7 / 11.4 tok/s), after the fitted per-prediction dispatch.
 */
import { FITTED_RUNTIME } from "./calibration.js";

export interface SpeculativeModelBytes {
  readonly name: string;
  /** Measured plain decode speed to calibrate against, tok/s, and where it comes from. */
  readonly plainTokS: number;
  readonly plainSource: string;
  /** Weight bytes a plain decode step reads: every super-block projection and the lm_head. */
  readonly trunkBytes: number;
  /** Of those, the lm_head's (a draft step reads it again to score the head's output). */
  readonly lmHeadBytes: number;
  /** The MTP head's weight bytes (its package). */
  readonly headBytes: number;
  /** One GDN state of every GDN layer (recurrent + conv window), bytes. */
  readonly gdnStateBytes: number;
  /** Predictions a decode step makes (super-block packages + lm_head; the embedding is read on the host). */
  readonly calls: number;
}

export interface SpeculativeAcceptance {
  readonly gamma: number;
  /** Mean accepted drafts per verify call (0 … γ). */
  readonly meanAccepted: number;
}

export interface SpeculativeProjectionRow {
  readonly gamma: number;
  readonly meanAccepted: number;
  readonly tokensPerCall: number;
  readonly roundMs: number;
  readonly tokS: number;
  /** tokS / the plain chain's. */
  readonly speedup: number;
}

export interface SpeculativeProjection {
  readonly name: string;
  readonly plainTokS: number;
  readonly plainSource: string;
  /** The bandwidth the plain speed implies, GB/s. */
  readonly effectiveGBps: number;
  readonly dispatchMs: number;
  readonly verifyMs: number;
  readonly draftMs: number;
  readonly headMs: number;
  readonly rows: readonly SpeculativeProjectionRow[];
}

/** Projected decode tok/s with the MTP head at each acceptance (see the module comment). */
export function projectSpeculativeDecode(
  m: SpeculativeModelBytes,
  acceptance: readonly SpeculativeAcceptance[],
  verifyRows: (gamma: number) => number = (g) => g + 1,
): SpeculativeProjection {
  const dispatchMs = FITTED_RUNTIME.dispatchMs.value;
  const plainMs = 1000 / m.plainTokS;
  const streamMs = plainMs - m.calls * dispatchMs;
  if (streamMs <= 0) throw new RangeError(`${m.name}: ${m.plainTokS} tok/s leaves no time after dispatch`);
  const bytesPerMs = m.trunkBytes / streamMs;
  const ms = (bytes: number) => bytes / bytesPerMs;
  const draftMs = 2 * dispatchMs + ms(m.headBytes + m.lmHeadBytes);
  const headMs = dispatchMs + ms(m.headBytes);
  const verifyMsFor = (T: number) =>
    // the GDN start is picked from the kept state and T rows (read T + 1), every row's states written
    m.calls * dispatchMs + ms(m.trunkBytes + (2 * T + 1 - 2) * m.gdnStateBytes);
  const rows = acceptance.map((a) => {
    const roundMs = verifyMsFor(verifyRows(a.gamma)) + a.gamma * draftMs + a.meanAccepted * headMs;
    const tokensPerCall = 1 + a.meanAccepted;
    const tokS = (1000 * tokensPerCall) / roundMs;
    return {
      gamma: a.gamma,
      meanAccepted: a.meanAccepted,
      tokensPerCall,
      roundMs,
      tokS,
      speedup: tokS / m.plainTokS,
    };
  });
  return {
    name: m.name,
    plainTokS: m.plainTokS,
    plainSource: m.plainSource,
    effectiveGBps: bytesPerMs / 1e6,
    dispatchMs,
    verifyMs: verifyMsFor(verifyRows(acceptance[0]?.gamma ?? 1)),
    draftMs,
    headMs,
    rows,
  };
}

/** The projection as a table: one line per γ beside the plain speed. */
export function formatSpeculativeProjection(p: SpeculativeProjection): string {
  const lines = [
    `${p.name}: plain ${p.plainTokS.toFixed(1)} tok/s (${p.plainSource}; ${p.effectiveGBps.toFixed(1)} GB/s after ${p.dispatchMs} ms dispatch a call)`,
    `  draft step ${p.draftMs.toFixed(2)} ms (mtp + lm_head), head catch-up ${p.headMs.toFixed(2)} ms, verify ${p.verifyMs.toFixed(2)} ms`,
    "  γ  accepted  tok/call  round ms   tok/s  × plain",
  ];
  for (const r of p.rows)
    lines.push(
      `  ${r.gamma}  ${r.meanAccepted.toFixed(2).padStart(8)}  ${r.tokensPerCall.toFixed(2).padStart(8)}  ${r.roundMs.toFixed(2).padStart(8)}  ${r.tokS.toFixed(1).padStart(6)}  ${r.speedup.toFixed(2).padStart(7)}`,
    );
  return lines.join("\n");
}
