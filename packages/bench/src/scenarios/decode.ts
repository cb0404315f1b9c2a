/**
 * decode: tokens per second of one-token decode steps, per backend, warm (after a warm-up step)
 * and cold (load / compile time and the first prompt reported on their own).
 */
import type { ChartSpec } from "../charts.js";
import { eachSide, promptFor, tokSMetric, warmDecode } from "../measure.js";
import { barChart, barRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import { metric } from "../stats.js";

export const decode: Scenario = {
  name: "decode",
  question:
    "How many tokens per second does each backend decode, warm, and what do load and the first prompt cost cold?",
  run: (ctx, p) =>
    eachSide(ctx, "decode", async (side, opened) => {
      const prompt = promptFor(side, p.promptTokens);
      const t = await warmDecode(opened.model, prompt, p);
      const compile = Object.values(opened.compileSeconds);
      return {
        config: { promptTokens: prompt.length, decodeSteps: p.decodeSteps, warmupSteps: p.warmupSteps },
        metrics: [
          tokSMetric(t.warm),
          metric("decode_ms", "ms", t.warm, "each warm decode step"),
          metric("load_ms", "ms", [opened.loadMs], "opening the model (Core ML: compile + load)"),
          metric("first_prefill_ms", "ms", [t.prefillMs], "the first prompt after load (cold)"),
          metric("first_decode_ms", "ms", [t.decodeMs[0]], "the first decode step after load (cold)"),
          ...(compile.length
            ? [metric("compile_s", "s", compile, "Core ML compile per component (first use of a package)")]
            : []),
        ],
        notes: side.convertSeconds ? [`converted now in ${side.convertSeconds.toFixed(1)} s`] : [],
      };
    }),
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const cold = [
      ...barRows(runs, "load_ms", () => ({ phase: "load" })),
      ...barRows(runs, "first_prefill_ms", () => ({ phase: "first prompt" })),
    ];
    return [
      barChart(
        "tok-s",
        `Decode tok/s (warm, median with p10–p90) · ${result.scale}`,
        barRows(runs, "decode_tok_s"),
        "tok/s",
        {
          whiskers: true,
        },
      ),
      barChart("cold", "Cold start: load and first prompt (ms)", cold, "ms", { color: "phase" }),
    ];
  },
};
