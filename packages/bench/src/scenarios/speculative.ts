/**
 * speculative: how often a cheaper draft model proposes the token the target would have chosen
 * (greedy), and the speed-up that acceptance buys once the draft's and the verification's costs
 * are paid. The target decodes greedily; each draft is teacher-forced along the target's tokens;
 * rounds are simulated exactly from the per-position agreement (speculation.ts).
 *
 * Drafts: the same model quantized harder (MLX 4-bit; the ANE chain in LUT4), the unpalettized
 * fp16 chain as a control (same weights: it must agree where the target's choice is clear), and,
 * at smoke scale, a different model with the same tokenizer (tiny-gqa), standing for "the models
 * write different text" (the reference study's 0.8B drafting for 9B).
 */
import type { StepModel } from "@anemll-qwen35/generate";
import type { ChartSpec, Row } from "../charts.js";
import { backendNotes } from "../report.js";
import type { Scenario, ScenarioOutput } from "../scenario.js";
import type { Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide, type Side } from "../sides.js";
import { simulateRounds, speedup } from "../speculation.js";
import { metric, summarize } from "../stats.js";
import { promptIds, runSteps } from "../steps.js";

const median = (xs: readonly number[]) => summarize(xs).median;

/** ms for the target to consume `n` more tokens in one call, after the prompt (median of 3). */
async function verifyMs(
  model: StepModel,
  prompt: readonly number[],
  next: readonly number[],
): Promise<number> {
  const times: number[] = [];
  for (let r = 0; r < 3; r++) {
    await model.reset();
    await model.prefill(prompt.slice());
    const t = performance.now();
    await model.prefill(next.slice());
    times.push(performance.now() - t);
  }
  return median(times);
}

export const speculative: Scenario = {
  name: "speculative",
  question:
    "How often does a draft model propose the target's greedy token, and what speed-up does that give?",
  async run(ctx): Promise<ScenarioOutput> {
    const p = ctx.params;
    const { tokens, gammas } = p.speculative;
    const skipped: Skip[] = [];
    const notes: string[] = [];
    // target: the scale's model on MLX, unquantized; without MLX, the unquantized ANE chain
    const mlxTarget = await mlxSide(ctx, p.model, { bits: null });
    let target: Side;
    const drafts: { side: Side; why: string }[] = [];
    if (isSkip(mlxTarget)) {
      skipped.push({ what: "MLX target and MLX drafts", reason: mlxTarget.reason });
      target = await aneSide(ctx, p.model, { body: "none", lmHead: "none" });
      notes.push("target: the unquantized (fp16) ANE chain, because MLX is unavailable");
    } else {
      target = mlxTarget;
      const q = await mlxSide(ctx, p.model, { bits: 4 });
      if (!isSkip(q)) drafts.push({ side: q, why: "same model, MLX 4-bit" });
    }
    drafts.push({
      side: await aneSide(ctx, p.model, { body: "lut4", lmHead: "lut4" }),
      why: "same model, ANE chain LUT4",
    });
    // the control: the unpalettized chain is the same model and should agree with the target
    // wherever the target's choice is clear
    drafts.push({
      side: await aneSide(ctx, p.model, { body: "none", lmHead: "none" }),
      why: "same model, ANE chain fp16 (control)",
    });
    if (p.otherModel) {
      const other = isSkip(mlxTarget) ? await aneSide(ctx, p.otherModel) : await mlxSide(ctx, p.otherModel);
      if (!isSkip(other)) drafts.push({ side: other, why: `a different model (${p.otherModel.name})` });
    }

    ctx.log(`speculative: target ${target.label} · ${target.model.name}`);
    const prompt = promptIds(p.promptTokens, target.model.vocabSize ?? 1024);
    const runs: Run[] = [];
    const t = await target.open();
    let targetTokens: number[];
    let targetMs: number;
    const verify: Record<number, number> = {};
    try {
      const run = await runSteps(t.model, prompt, { decodeSteps: tokens });
      targetTokens = run.tokens;
      targetMs = median(run.decodeMs);
      for (const g of gammas) verify[g] = await verifyMs(t.model, prompt, targetTokens.slice(0, g + 1));
      runs.push({
        id: `target ${target.backend} · ${target.model.name}`,
        backend: target.backend,
        model: target.model,
        conversion: target.conversion,
        config: { role: "target", tokens },
        metrics: [
          metric("decode_ms", "ms", run.decodeMs, "target greedy decode steps"),
          ...(run.margins.length
            ? [
                metric(
                  "logit_margin",
                  "logit",
                  run.margins,
                  "target's top-1 minus top-2 logit per position: small margins make any perturbation flip the greedy token",
                ),
              ]
            : []),
          ...gammas.map((g) =>
            metric(`verify_ms_gamma${g}`, "ms", [verify[g]], `target consuming ${g + 1} tokens in one call`),
          ),
        ],
        notes: [],
      });
    } finally {
      await t.model.dispose();
    }

    for (const d of drafts) {
      ctx.signal?.throwIfAborted();
      ctx.log(`speculative: draft ${d.side.label} · ${d.why}`);
      const o = await d.side.open();
      try {
        const r = await runSteps(o.model, prompt, { decodeSteps: tokens, forced: targetTokens });
        const matches = r.tokens.map((tok, i) => tok === targetTokens[i]);
        const draftMs = median(r.decodeMs);
        const agree = matches.map(Number);
        const metrics = [
          metric(
            "acceptance_rate",
            "fraction",
            [agree.reduce((a, b) => a + b, 0) / agree.length],
            "mean agreement",
          ),
          metric(
            "agreement",
            "0/1",
            agree,
            "1 when the draft's greedy token equals the target's, per position",
          ),
        ];
        for (const g of gammas) {
          const rounds = simulateRounds(matches, g);
          const perRound = rounds.tokensPerRound.reduce((a, b) => a + b, 0) / rounds.tokensPerRound.length;
          metrics.push(
            metric(
              `accepted_gamma${g}`,
              "tokens",
              rounds.acceptedPerRound,
              `draft tokens accepted per round, lookahead ${g}`,
            ),
            metric(`tokens_per_round_gamma${g}`, "tokens", rounds.tokensPerRound),
            metric(
              `speedup_gamma${g}`,
              "x",
              [speedup(perRound, targetMs, draftMs, g, verify[g])],
              "vs plain target decoding",
            ),
          );
        }
        metrics.push(metric("draft_decode_ms", "ms", r.decodeMs));
        runs.push({
          id: `draft ${d.side.backend} · ${d.why}`,
          backend: d.side.backend,
          model: d.side.model,
          conversion: d.side.conversion,
          config: { role: "draft", draft: d.why, target: `${target.backend} · ${target.model.name}`, tokens },
          metrics,
          notes: [],
        });
      } finally {
        await o.model.dispose();
      }
    }
    notes.push(
      "acceptance = per-position agreement of greedy tokens with the draft teacher-forced on the target's tokens; rounds and speed-up are simulated exactly from it",
      "speed-up = tokens per round × target ms/token ÷ (γ × draft ms/token + target ms to consume γ+1 tokens in one call); an ANE chain consumes tokens one step at a time, so its verification is never cheaper than γ+1 decode steps",
    );
    return { runs, skipped, notes: [...notes, ...backendNotes(runs)] };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const rows: Row[] = [];
    const speed: Row[] = [];
    for (const r of runs.filter((x) => x.config.role === "draft")) {
      for (const m of r.metrics) {
        if (m.name === "acceptance_rate")
          rows.push({ run: String(r.config.draft), median: m.summary.median });
        const g = /^speedup_gamma(\d+)$/.exec(m.name);
        if (g) speed.push({ run: String(r.config.draft), gamma: `γ=${g[1]}`, median: m.summary.median });
      }
    }
    return [
      {
        kind: "bar",
        name: "acceptance",
        title: "Draft acceptance (greedy agreement with the target)",
        rows,
        x: "run",
        y: "median",
        yTitle: "acceptance rate",
      },
      {
        kind: "bar",
        name: "speedup",
        title: "Simulated speed-up over target-only decoding",
        rows: speed,
        x: "run",
        y: "median",
        yTitle: "× target speed",
        color: "gamma",
      },
    ];
  },
};
