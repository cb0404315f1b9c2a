/**
 * expert-skip: the reference study's ruled-out speculation on the 35B MoE — the same model with
 * its routed experts skipped (the shared expert's output only) drafting for the full model. The
 * target decodes greedily on MLX; the draft is teacher-forced along the target's tokens; the
 * acceptance is the per-position agreement, and rounds with lookahead γ are simulated from it
 * exactly (speculation.ts), as the speculative scenario does.
 *
 * The draft here is the checkpoint with the routed experts' down projections zeroed: the same
 * outputs as skipping them, but not the same cost (the zeroed experts still run), so no speed-up
 * is computed — only what the study measured, the acceptance.
 */
import type { ChartSpec } from "../charts.js";
import { expertSkipModel } from "../expert-skip.js";
import { nothingRan, promptFor, sideRun, targetRun, withOpened } from "../measure.js";
import { backendNotes, barChart, barRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import { isSkip, mlxSide } from "../sides.js";
import { metric } from "../stats.js";
import { runSteps } from "../steps.js";

/**
 * Tokens each speculative round would emit over a sequence of draft/target agreements with
 * lookahead `gamma`: the accepted run plus the target's own next token. (The draft here skips no
 * work — its experts are zeroed, not skipped — so only what acceptance allows is computed.)
 */
export function tokensPerRound(matches: readonly boolean[], gamma: number): number[] {
  if (!Number.isInteger(gamma) || gamma < 1)
    throw new RangeError(`gamma must be a positive integer, got ${gamma}`);
  const out: number[] = [];
  for (let i = 0; i < matches.length; ) {
    let a = 0;
    while (a < gamma && i + a < matches.length && matches[i + a]) a++;
    const emitted = Math.min(a + 1, matches.length - i);
    out.push(emitted);
    i += emitted;
  }
  return out;
}

/** The reference study's figure (35B-A3B on a Mac mini M4 Pro). */
export const STUDY_EXPERT_SKIP_ACCEPTANCE = 0.042;

export const expertSkip: Scenario = {
  name: "expert-skip",
  question:
    "Drafting with the MoE's shared expert only (routed experts skipped), how often is the draft's greedy token the full model's?",
  async run(ctx, p) {
    const spec = p.pairing.foreground;
    const bits = p.mlx.bits ?? null;
    const target = await mlxSide(ctx, spec, { bits });
    if (isSkip(target)) return nothingRan("expert-skip (MLX)", target.reason);
    ctx.log(`expert-skip: writing the shared-expert-only draft of ${spec.name}`);
    const draft = await mlxSide(ctx, expertSkipModel(spec), { bits });
    if (isSkip(draft)) return nothingRan("expert-skip draft", draft.reason);
    const tokens = p.speculative.tokens;
    const prompt = promptFor(target, p.promptTokens);
    ctx.log(`expert-skip: target ${target.label} · ${target.model.name}`);
    const ref = await withOpened(target, (t) => runSteps(t.model, prompt, { decodeSteps: tokens }));
    ctx.log("expert-skip: draft, teacher-forced on the target's tokens");
    const r = await withOpened(draft, (d) =>
      runSteps(d.model, prompt, { decodeSteps: tokens, forced: ref.tokens }),
    );
    const matches = r.tokens.map((tok, i) => tok === ref.tokens[i]);
    const agree = matches.map(Number);
    const acceptance = agree.reduce((a, b) => a + b, 0) / agree.length;
    const runs: Run[] = [
      targetRun(target, ref, tokens),
      sideRun(draft, `draft ${draft.backend} · shared expert only`, {
        config: { role: "draft", draft: "shared expert only", tokens },
        metrics: [
          metric(
            "acceptance_rate",
            "fraction",
            [acceptance],
            "mean agreement with the target's greedy tokens",
          ),
          metric(
            "agreement",
            "0/1",
            agree,
            "1 when the draft's greedy token equals the target's, per position",
          ),
          ...p.speculative.gammas.map((g) =>
            metric(
              `tokens_per_round_gamma${g}`,
              "tokens",
              tokensPerRound(matches, g),
              `tokens per round with lookahead ${g}`,
            ),
          ),
        ],
      }),
    ];
    return {
      runs,
      skipped: [],
      notes: [
        `acceptance ${(acceptance * 100).toFixed(1)}% over ${agree.length} positions; the reference study measured ${(STUDY_EXPERT_SKIP_ACCEPTANCE * 100).toFixed(1)}% on the real 35B-A3B`,
        "the draft zeroes the routed experts' down projections (same outputs as skipping them, not the same cost), so only the acceptance is reported",
        ...(target.model.weights?.startsWith("fixture") || target.model.weights?.startsWith("synthetic")
          ? ["random weights: which tokens agree says little about a trained model's shared expert"]
          : []),
        ...backendNotes(runs),
      ],
    };
  },
  charts(result): ChartSpec[] {
    const title = "Expert-skip draft: acceptance (greedy agreement with the full MoE)";
    return [barChart("acceptance", title, barRows(result.runs, "acceptance_rate"), "acceptance rate")];
  },
};
