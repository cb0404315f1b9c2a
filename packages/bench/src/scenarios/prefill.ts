/**
 * prefill: prompt tokens per second per backend at the scale's prompt lengths (64, 256 and 1,024
 * tokens at full scale). The ANE chain runs each prompt two ways, labelled: batched (its packages'
 * prefill function, T tokens a call) and token by token (the decode function, one call per
 * token); MLX runs it batched (one forward per prefill chunk). For each length the first prompt is
 * reported apart (the first after load is the cold one), the following repeats as warm.
 */

import { openAne } from "../backends.js";
import type { ChartSpec } from "../charts.js";
import { promptFor, sideRun } from "../measure.js";
import { backendNotes, lineChart, lineRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide, type Side } from "../sides.js";
import { metric } from "../stats.js";
import { runSteps } from "../steps.js";

type Mode = "batched" | "token-by-token";

export const prefill: Scenario = {
  name: "prefill",
  question:
    "How many prompt tokens per second does each backend consume at 64, 256 and 1,024-token prompts, batched and token by token?",
  async run(ctx, p) {
    const lengths = p.prefillPrompts;
    const chainCtx = Math.max(p.ctx, ...lengths);
    const ane = await aneSide(ctx, p.model, { ctx: chainCtx });
    const T = ane.manifest?.prefill?.tokens;
    const ways: { side: Side; mode: Mode; how: string }[] = [];
    if (T !== undefined) {
      ways.push({
        side: { ...ane, open: () => openAne(ane.dir, { backend: ctx.ane, prefillFunction: true }) },
        mode: "batched",
        how: `batched: the packages' prefill function, ${T} tokens a call (a masked call for a rest ≥ ${Math.ceil(T / 8)} tokens, decode for a shorter one)`,
      });
    }
    ways.push({
      side: { ...ane, open: () => openAne(ane.dir, { backend: ctx.ane, prefillFunction: false }) },
      mode: "token-by-token",
      how: "token by token: the decode function, one call per prompt token (the lm_head only for the last)",
    });
    const skipped: Skip[] = [];
    if (T === undefined)
      skipped.push({ what: `${ane.backend} batched`, reason: "the chain has no prefill function" });
    const m = await mlxSide(ctx, p.model, { contextLength: chainCtx });
    if (isSkip(m)) skipped.push(m);
    else
      ways.push({ side: m, mode: "batched", how: "batched: one forward over the prompt per prefill chunk" });

    const runs: Run[] = [];
    for (const { side, mode, how } of ways) {
      ctx.signal?.throwIfAborted();
      ctx.log(`prefill: ${side.label} ${mode} · ${side.model.name}`);
      const opened = await side.open();
      try {
        for (const [i, n] of lengths.entries()) {
          const prompt = promptFor(side, n);
          const times: number[] = [];
          for (let r = 0; r <= p.prefillRepeats; r++) {
            ctx.signal?.throwIfAborted();
            times.push((await runSteps(opened.model, prompt, { decodeSteps: 0 })).prefillMs);
          }
          const warm = times.slice(1);
          const first =
            i === 0
              ? "the first prompt after load (cold)"
              : `the first ${n}-token prompt (after the shorter ones)`;
          runs.push(
            sideRun(side, `${side.backend} · ${mode} · ${n} tokens`, {
              config: { promptTokens: n, mode, repeats: p.prefillRepeats },
              metrics: [
                metric(
                  "prefill_tok_s",
                  "tok/s",
                  warm.map((ms) => (n * 1000) / ms),
                  "per warm prompt",
                ),
                metric("prefill_ms", "ms", warm, "each warm prompt"),
                metric("first_prefill_ms", "ms", [times[0]], first),
                ...(i === 0 ? [metric("load_ms", "ms", [opened.loadMs], "opening the model")] : []),
              ],
              notes: [how],
            }),
          );
        }
      } finally {
        await opened.model.dispose();
      }
    }
    return { runs, skipped, notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const way = (r: Run) => ({ way: `${r.backend} ${r.config.mode}` });
    return [
      lineChart(
        "tok-s",
        `Prefill tok/s vs prompt length (warm), batched and token by token · ${result.scale}`,
        lineRows(runs, "prefill_tok_s", (r) => Number(r.config.promptTokens), way),
        { xTitle: "prompt tokens", xType: "ordinal", yTitle: "prompt tok/s", color: "way" },
      ),
    ];
  },
};
