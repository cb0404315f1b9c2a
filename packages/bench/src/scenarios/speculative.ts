/**
 * speculative: greedy speculative decoding run for real — a cheaper draft model proposes γ tokens,
 * the target verifies them, both roll back to their state snapshots when tokens are rejected
 * (speculation.ts) — and its measured speed-up over the target decoding alone, in the same run.
 *
 * Drafts: the same model quantized harder (MLX 4-bit; the ANE chain in LUT4), the unpalettized
 * fp16 chain as a control (same weights: it must agree where the target's choice is clear), and,
 * at smoke scale, a different model with the same tokenizer (tiny-gqa), standing for "the models
 * write different text" (the reference study's 0.8B drafting for 9B). `--draft mtp` measures the
 * model's own MTP head instead (speculative-mtp.ts).
 */
import type { ChartSpec, Row } from "../charts.js";
import { promptFor, sideRun, targetRun, withOpened } from "../measure.js";
import { backendNotes, barChart } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide, type Side } from "../sides.js";
import { speculativeDecode } from "../speculation.js";
import { metric } from "../stats.js";
import { runSteps } from "../steps.js";
import { mtpCharts, mtpSpeculative } from "./speculative-mtp.js";

export const speculative: Scenario = {
  name: "speculative",
  question:
    "How often does a draft model propose the target's greedy token, and what speed-up does that give?",
  async run(ctx, p) {
    if (ctx.draft === "mtp") return mtpSpeculative(ctx, p);
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
    const vocab = target.model.vocabSize ?? 1024;
    const prompt = promptFor(target, p.promptTokens);
    const runs: Run[] = [];
    await withOpened(target, async (t) => {
      // the target alone: its greedy tokens and how long decoding them takes
      const alone = await runSteps(t.model, prompt, { decodeSteps: tokens - 1 });
      const aloneMs = alone.decodeMs.reduce((a, b) => a + b, 0);
      runs.push(targetRun(target, alone, tokens));
      for (const d of drafts) {
        ctx.signal?.throwIfAborted();
        ctx.log(`speculative: draft ${d.side.label} · ${d.why}`);
        const metrics = await withOpened(d.side, async (o) => {
          const metrics = [];
          let accepted = 0;
          let proposed = 0;
          for (const g of gammas) {
            const r = await speculativeDecode(t.model, o.model, prompt, {
              gamma: g,
              tokens,
              vocab,
              signal: ctx.signal,
            });
            accepted += r.acceptedPerRound.reduce((a, b) => a + b, 0);
            proposed += r.acceptedPerRound.length * g;
            const same = r.tokens.map((tok, i) => Number(tok === alone.tokens[i]));
            metrics.push(
              metric(
                `accepted_gamma${g}`,
                "tokens",
                r.acceptedPerRound,
                `draft tokens accepted per round, γ = ${g}`,
              ),
              metric(`tokens_per_round_gamma${g}`, "tokens", r.tokensPerRound),
              metric(
                `speedup_gamma${g}`,
                "x",
                [aloneMs / r.decodeMs],
                `target-alone decode time over the speculative loop's (${r.verify} verification), same run`,
              ),
              metric(`decode_ms_gamma${g}`, "ms", [r.decodeMs], "the speculative loop after the prompt"),
              metric(`draft_ms_gamma${g}`, "ms", [r.draftMs]),
              metric(`verify_ms_gamma${g}`, "ms", [r.verifyMs]),
              metric(`rollback_ms_gamma${g}`, "ms", [r.rollbackMs], `${r.rollbacks} restores of a snapshot`),
              metric(
                `same_tokens_gamma${g}`,
                "0/1",
                same,
                "1 where the loop emitted the target-alone greedy token (sequential verification: always)",
              ),
            );
          }
          const rate = accepted / proposed;
          return [
            metric("acceptance_rate", "fraction", [rate], "draft tokens accepted ÷ proposed, all γ"),
            ...metrics,
          ];
        });
        runs.push(
          sideRun(d.side, `draft ${d.side.backend} · ${d.why}`, {
            config: {
              role: "draft",
              draft: d.why,
              target: `${target.backend} · ${target.model.name}`,
              tokens,
            },
            metrics,
          }),
        );
      }
    });
    notes.push(
      "a real draft → verify → rollback loop: the draft proposes γ tokens, the target checks them (MLX: one call with every position's logits; an ANE chain: one decode per token, stopping at the first disagreement), and a model that consumed rejected tokens restores its state snapshot from the start of the round and consumes the accepted ones again",
      "speed-up = the target decoding alone ÷ the speculative loop, for the same number of tokens, measured in the same run",
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
    const drafts: ChartSpec[] =
      rows.length + speed.length === 0
        ? []
        : [
            barChart(
              "acceptance",
              "Draft acceptance (greedy agreement with the target)",
              rows,
              "acceptance rate",
            ),
            barChart("speedup", "Measured speed-up over target-only decoding", speed, "× target speed", {
              color: "gamma",
            }),
          ];
    return [...drafts, ...mtpCharts(result)];
  },
};
