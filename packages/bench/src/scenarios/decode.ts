/**
 * decode: tokens per second of one-token decode steps, per backend, warm (after a warm-up step)
 * and cold (load / compile time and the first prompt reported on their own).
 */
import type { ChartSpec } from "../charts.js";
import { backendNotes, barRows } from "../report.js";
import type { Scenario, ScenarioOutput } from "../scenario.js";
import type { Run } from "../schema.js";
import { sidesFor } from "../sides.js";
import { metric } from "../stats.js";
import { promptIds, runSteps } from "../steps.js";

export const decode: Scenario = {
  name: "decode",
  question:
    "How many tokens per second does each backend decode, warm, and what do load and the first prompt cost cold?",
  async run(ctx): Promise<ScenarioOutput> {
    const p = ctx.params;
    const { sides, skipped } = await sidesFor(ctx);
    const runs: Run[] = [];
    for (const side of sides) {
      ctx.signal?.throwIfAborted();
      ctx.log(`decode: ${side.label} · ${side.model.name}`);
      const opened = await side.open();
      try {
        const prompt = promptIds(p.promptTokens, side.model.vocabSize ?? 1024);
        const t = await runSteps(opened.model, prompt, { decodeSteps: p.warmupSteps + p.decodeSteps });
        const warm = t.decodeMs.slice(p.warmupSteps);
        const compile = Object.values(opened.compileSeconds);
        runs.push({
          id: `${side.backend} · ${side.model.name}`,
          backend: side.backend,
          model: side.model,
          conversion: side.conversion,
          config: {
            promptTokens: prompt.length,
            decodeSteps: p.decodeSteps,
            warmupSteps: p.warmupSteps,
          },
          metrics: [
            metric(
              "decode_tok_s",
              "tok/s",
              warm.map((ms) => 1000 / ms),
              "1000 / ms of each warm decode step",
            ),
            metric("decode_ms", "ms", warm, "each warm decode step"),
            metric("load_ms", "ms", [opened.loadMs], "opening the model (Core ML: compile + load)"),
            metric("first_prefill_ms", "ms", [t.prefillMs], "the first prompt after load (cold)"),
            metric("first_decode_ms", "ms", [t.decodeMs[0]], "the first decode step after load (cold)"),
            ...(compile.length
              ? [metric("compile_s", "s", compile, "Core ML compile per component (first use of a package)")]
              : []),
          ],
          notes: side.convertSeconds ? [`converted now in ${side.convertSeconds.toFixed(1)} s`] : [],
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
        title: `Decode tok/s (warm, median with p10–p90) · ${result.scale}`,
        rows: barRows(runs, "decode_tok_s"),
        x: "run",
        y: "median",
        yTitle: "tok/s",
        lo: "p10",
        hi: "p90",
      },
      {
        kind: "bar",
        name: "cold",
        title: "Cold start: load and first prompt (ms)",
        rows: [
          ...barRows(runs, "load_ms", () => ({ phase: "load" })),
          ...barRows(runs, "first_prefill_ms", () => ({ phase: "first prompt" })),
        ],
        x: "run",
        y: "median",
        yTitle: "ms",
        color: "phase",
      },
    ];
  },
};
