import {
  type BenchResult,
  runScenario,
  SCALES,
  SCENARIOS,
  type Scale,
  type ScenarioName,
  summaryLines,
} from "@anemll-qwen35/bench";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { choice, int, num, UsageError } from "../options.js";

export function registerBench(program: Command, ctx: Context): void {
  program
    .command("bench")
    .description(
      `run a benchmark scenario and write its JSON result and charts (${SCENARIOS.join(", ")}, or all)`,
    )
    .argument("<scenario>", `one of ${SCENARIOS.join(", ")}, or all`)
    .option(
      "--scale <scale>",
      "smoke (tiny fixtures, seconds) or full (synthetic 0.8B; pairing: 35B-A3B scaled to 8 layers, 32 experts)",
      choice("--scale", SCALES),
      "smoke",
    )
    .option("-o, --out <dir>", "folder for the JSON and the charts (default: packages/bench/results)")
    .option("--model <ref>", "checkpoint folder or hf:owner/name replacing the scale's model")
    .option("--tokens <n>", "decode steps per measurement", int("--tokens", 1))
    .option("--seconds <s>", "seconds per window of parallel and pairing", num("--seconds", 0.1))
    .option(
      "--ctx <n>",
      "agent: the chains' context (default 4096; capped by a model's max positions)",
      int("--ctx", 1),
    )
    .option("--calibration <file>", "agent: a `costplan calibrate` file for the ANE projections")
    .option(
      "--ane <backend>",
      "auto (Core ML where available), coreml or reference",
      choice("--ane", ["auto", "coreml", "reference"] as const),
      "auto",
    )
    .option("--no-mlx", "leave the MLX (GPU) side out")
    .option(
      "--draft <kind>",
      "speculative: model (a separate draft model, default) or mtp (the model's own multi-token-prediction head, on MLX)",
      choice("--draft", ["model", "mtp"] as const),
      "model",
    )
    .option("--no-charts", "write the JSON only")
    .action(async (scenario: string, o) => {
      const out = ctx.output();
      const names: ScenarioName[] =
        scenario === "all"
          ? [...SCENARIOS]
          : (SCENARIOS as readonly string[]).includes(scenario)
            ? [scenario as ScenarioName]
            : [];
      if (names.length === 0) {
        throw new UsageError(
          `unknown scenario "${scenario}": expected one of ${SCENARIOS.join(", ")} or all`,
        );
      }
      const ac = new AbortController();
      const onSigint = () => ac.abort();
      process.once("SIGINT", onSigint);
      const results: { file: string; charts: string[]; result: BenchResult }[] = [];
      try {
        for (const name of names) {
          const r = await runScenario(name, {
            scale: o.scale as Scale,
            out: o.out,
            model: o.model,
            tokens: o.tokens,
            seconds: o.seconds,
            ctx: o.ctx,
            calibration: o.calibration,
            ane: o.ane,
            noMlx: o.mlx === false,
            draft: o.draft,
            noCharts: o.charts === false,
            onLog: (line) => out.notice(line),
            signal: ac.signal,
          });
          results.push(r);
          for (const line of summaryLines(r.result)) out.line(line);
          out.line(`wrote ${r.file}${r.charts.length ? ` and ${r.charts.length} chart files` : ""}`);
        }
      } finally {
        process.removeListener("SIGINT", onSigint);
      }
      out.result(
        results.map((r) => ({
          file: r.file,
          charts: r.charts,
          scenario: r.result.scenario,
          status: r.result.status,
        })),
      );
    });
}
