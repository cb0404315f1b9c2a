/**
 * prefill: prompt tokens per second per backend. The ANE chain's decode graph takes one token per
 * call, so its prefill is a loop of steps without the lm_head; MLX runs the prompt as one batch.
 * The first prompt after load is reported as cold, the following repeats as warm.
 */
import type { ChartSpec } from "../charts.js";
import { eachSide, promptFor } from "../measure.js";
import { barChart, barRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import { metric } from "../stats.js";
import { runSteps } from "../steps.js";

export const prefill: Scenario = {
  name: "prefill",
  question: "How many prompt tokens per second does each backend consume, warm and cold?",
  run: (ctx, p) =>
    eachSide(ctx, "prefill", async (side, opened) => {
      const prompt = promptFor(side, p.prefillTokens);
      const times: number[] = [];
      for (let i = 0; i <= p.prefillRepeats; i++) {
        times.push((await runSteps(opened.model, prompt, { decodeSteps: 0 })).prefillMs);
      }
      const warm = times.slice(1);
      return {
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
      };
    }),
  charts(result): ChartSpec[] {
    const title = `Prefill tok/s (${result.runs[0]?.config.promptTokens ?? "?"}-token prompt, warm) · ${result.scale}`;
    return [
      barChart("tok-s", title, barRows(result.runs, "prefill_tok_s"), "prompt tok/s", { whiskers: true }),
    ];
  },
};
