/**
 * prefill: prompt tokens per second per backend. The ANE chain's decode graph takes one token per
 * call, so its prefill is a loop of steps without the lm_head; MLX runs the prompt as one batch.
 * The first prompt after load is reported as cold, the following repeats as warm.
 */
import type { ChartSpec } from "../charts.js";
import { backendNotes, barRows } from "../report.js";
import type { Scenario, ScenarioOutput } from "../scenario.js";
import type { Run } from "../schema.js";
import { sidesFor } from "../sides.js";
import { metric } from "../stats.js";
import { promptIds, runSteps } from "../steps.js";

export const prefill: Scenario = {
  name: "prefill",
  question: "How many prompt tokens per second does each backend consume, warm and cold?",
  async run(ctx): Promise<ScenarioOutput> {
    const p = ctx.params;
    const { sides, skipped } = await sidesFor(ctx);
    const runs: Run[] = [];
    for (const side of sides) {
      ctx.signal?.throwIfAborted();
      ctx.log(`prefill: ${side.label} · ${side.model.name}`);
      const opened = await side.open();
      try {
        const prompt = promptIds(p.prefillTokens, side.model.vocabSize ?? 1024);
        const times: number[] = [];
        for (let i = 0; i <= p.prefillRepeats; i++) {
          times.push((await runSteps(opened.model, prompt, { decodeSteps: 0 })).prefillMs);
        }
        const warm = times.slice(1);
        runs.push({
          id: `${side.backend} · ${side.model.name}`,
          backend: side.backend,
          model: side.model,
          conversion: side.conversion,
          config: { promptTokens: prompt.length, repeats: p.prefillRepeats },
          metrics: [
            metric(
              "prefill_tok_s",
              "tok/s",
              warm.map((ms) => (prompt.length * 1000) / ms),
              "per warm prompt",
            ),
            metric("prefill_ms", "ms", warm, "each warm prompt"),
            metric("cold_prefill_ms", "ms", [times[0]], "the first prompt after load"),
            metric("load_ms", "ms", [opened.loadMs], "opening the model"),
          ],
          notes: side.backend.startsWith("ane")
            ? ["chain prefill = one decode-graph step per prompt token (no lm_head)"]
            : [],
        });
      } finally {
        await opened.model.dispose();
      }
    }
    return { runs, skipped, notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    return [
      {
        kind: "bar",
        name: "tok-s",
        title: `Prefill tok/s (${runs[0]?.config.promptTokens ?? "?"}-token prompt, warm) · ${result.scale}`,
        rows: barRows(runs, "prefill_tok_s"),
        x: "run",
        y: "median",
        yTitle: "prompt tok/s",
        lo: "p10",
        hi: "p90",
      },
    ];
  },
};
