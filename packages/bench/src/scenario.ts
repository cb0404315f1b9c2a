/**
 * What a scenario is: a question, and a function that measures runs for it at a scale. The
 * runner (run.ts) adds the machine, timestamps and the reproducing command, validates the
 * document and writes the JSON and the charts.
 */
import type { AneBackendChoice } from "./backends.js";
import type { ChartSpec } from "./charts.js";
import type { ScaleParams } from "./scale.js";
import type { BenchResult, Run, ScenarioName, Skip } from "./schema.js";

export interface ScenarioContext {
  readonly params: ScaleParams;
  /** Which ANE backend to use ("auto": Core ML where available, else the reference interpreter). */
  readonly ane: AneBackendChoice;
  /** Skip the MLX side (e.g. --no-mlx). */
  readonly noMlx: boolean;
  /** speculative: a separate draft model ("model", default) or the model's own MTP head ("mtp"). */
  readonly draft?: "model" | "mtp";
  readonly log: (line: string) => void;
  readonly signal?: AbortSignal;
}

export interface ScenarioOutput {
  readonly runs: Run[];
  readonly skipped: Skip[];
  readonly notes: string[];
}

export interface Scenario {
  readonly name: ScenarioName;
  readonly question: string;
  /** Measures the runs; `p` is `ctx.params`, the scale's parameters. */
  run(ctx: ScenarioContext, p: ScaleParams): Promise<ScenarioOutput>;
  /** The charts of a result, built from the document alone (so a file can be re-charted). */
  charts(result: BenchResult): ChartSpec[];
}
