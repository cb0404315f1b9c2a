/**
 * runScenario(): one scenario at one scale → a validated result document, its JSON file and its
 * charts (SVG + PNG + the Vega-Lite spec), all in one folder.
 */
import { mkdir } from "node:fs/promises";
import { loadavg } from "node:os";
import { basename, dirname, resolve } from "node:path";
import type { AneBackendChoice } from "./backends.js";
import { writeChart } from "./charts.js";
import { BenchOptionError } from "./errors.js";
import { describeMachine } from "./machine.js";
import { defaultResultsDir, readResult, resultStem, validateResult, writeResult } from "./results.js";
import { scaleParams } from "./scale.js";
import { scenarios } from "./scenarios/index.js";
import {
  type BenchResult,
  RESULT_FORMAT,
  RESULT_FORMAT_VERSION,
  SCALES,
  SCENARIOS,
  type Scale,
  type ScenarioName,
} from "./schema.js";

export interface RunScenarioOptions {
  /** Default "smoke". */
  scale?: Scale;
  /** Output folder (default packages/bench/results in the repository). */
  out?: string;
  /** A checkpoint folder or hf: reference replacing the scale's model. */
  model?: string;
  /** Decode steps replacing the scale's. */
  tokens?: number;
  /** Seconds per window of the parallel and pairing scenarios, replacing the scale's. */
  seconds?: number;
  /** The agent scenario's conversion ctx (default 4096; capped by a model's max positions). */
  ctx?: number;
  /** A `costplan calibrate` file for the agent scenario's ANE projections. */
  calibration?: string;
  /** ANE backend (default "auto": Core ML where available, else the reference interpreter). */
  ane?: AneBackendChoice;
  /** Leave the MLX side out. */
  noMlx?: boolean;
  /** speculative: "model" (a separate draft model, default) or "mtp" (the model's own MTP head). */
  draft?: "model" | "mtp";
  /** Skip the charts (JSON only). */
  noCharts?: boolean;
  onLog?: (line: string) => void;
  signal?: AbortSignal;
}

export interface ScenarioRunResult {
  readonly result: BenchResult;
  /** The JSON file written. */
  readonly file: string;
  /** Chart files written (absolute paths). */
  readonly charts: string[];
}

export function isScenarioName(name: string): name is ScenarioName {
  return (SCENARIOS as readonly string[]).includes(name);
}

/** The command line that reproduces a run with these options. */
export function reproduceCommand(name: ScenarioName, o: RunScenarioOptions): string {
  const parts = ["anemll-qwen35", "bench", name, "--scale", o.scale ?? "smoke"];
  if (o.model) parts.push("--model", o.model);
  if (o.tokens) parts.push("--tokens", String(o.tokens));
  if (o.seconds) parts.push("--seconds", String(o.seconds));
  if (o.ctx) parts.push("--ctx", String(o.ctx));
  if (o.calibration) parts.push("--calibration", o.calibration);
  if (o.ane && o.ane !== "auto") parts.push("--ane", o.ane);
  if (o.noMlx) parts.push("--no-mlx");
  if (o.draft && o.draft !== "model") parts.push("--draft", o.draft);
  return parts.join(" ");
}

export async function runScenario(name: string, o: RunScenarioOptions = {}): Promise<ScenarioRunResult> {
  if (!isScenarioName(name)) {
    throw new BenchOptionError(
      "scenario",
      `unknown scenario "${name}": expected one of ${SCENARIOS.join(", ")}`,
    );
  }
  const scale = o.scale ?? "smoke";
  if (!(SCALES as readonly string[]).includes(scale)) {
    throw new BenchOptionError("--scale", `must be one of ${SCALES.join(", ")}, got "${scale}"`);
  }
  if (o.tokens !== undefined && (!Number.isInteger(o.tokens) || o.tokens < 1)) {
    throw new BenchOptionError("--tokens", `must be a positive integer, got ${o.tokens}`);
  }
  if (o.ctx !== undefined && (!Number.isInteger(o.ctx) || o.ctx < 1)) {
    throw new BenchOptionError("--ctx", `must be a positive integer, got ${o.ctx}`);
  }
  if (o.seconds !== undefined && !(o.seconds > 0)) {
    throw new BenchOptionError("--seconds", `must be a positive number, got ${o.seconds}`);
  }
  if (o.draft !== undefined && o.draft !== "model" && o.draft !== "mtp") {
    throw new BenchOptionError("--draft", `must be model or mtp, got "${o.draft}"`);
  }
  const scenario = scenarios[name];
  const log = o.onLog ?? (() => {});
  const startedAt = new Date().toISOString();
  const machine = describeMachine();
  log(`${name} (${scale}): preparing the models (a first full-scale run converts them: minutes)…`);
  const params = scaleParams(scale, {
    model: o.model,
    tokens: o.tokens,
    seconds: o.seconds,
    ctx: o.ctx,
    calibration: o.calibration,
  });
  const out = await scenario.run(
    { params, ane: o.ane ?? "auto", noMlx: o.noMlx ?? false, draft: o.draft, log, signal: o.signal },
    params,
  );
  const result: BenchResult = {
    format: RESULT_FORMAT,
    formatVersion: RESULT_FORMAT_VERSION,
    scenario: name,
    scale,
    question: scenario.question,
    startedAt,
    finishedAt: new Date().toISOString(),
    command: reproduceCommand(name, { ...o, scale }),
    status: out.runs.length === 0 ? "skipped" : out.skipped.length ? "partial" : "ok",
    machine: { ...machine, loadAverageEnd: loadavg() },
    runs: out.runs,
    skipped: out.skipped,
    notes: out.notes,
    charts: [],
  };
  validateResult(result);
  const dir = resolve(o.out ?? defaultResultsDir());
  await mkdir(dir, { recursive: true });
  result.charts = o.noCharts ? [] : await writeCharts(dir, result);
  const file = await writeResult(dir, result);
  // the summary is the caller's to print (summaryLines): the CLI prints it once, on stdout
  return { result, file, charts: result.charts.map((f) => resolve(dir, f)) };
}

/** Renders a result's charts into `dir`; returns the file names written. */
export async function writeCharts(
  dir: string,
  result: BenchResult,
  stem = resultStem(result),
): Promise<string[]> {
  const names: string[] = [];
  for (const c of scenarios[result.scenario].charts(result)) {
    if (c.rows.length === 0) continue;
    names.push(...(await writeChart(dir, stem, c)));
  }
  return names;
}

/**
 * Re-renders the charts of a result file from its JSON alone (e.g. after a chart style change),
 * next to it, and records them in the file.
 */
export async function rechart(file: string): Promise<ScenarioRunResult> {
  const result = await readResult(file);
  const dir = dirname(resolve(file));
  // the file keeps its name (results of older versions are named by date only)
  const stem = basename(file, ".json");
  result.charts = await writeCharts(dir, result, stem);
  const written = await writeResult(dir, result, stem);
  return { result, file: written, charts: result.charts.map((f) => resolve(dir, f)) };
}

/** A few human lines per result: each run's headline metric. */
export function summaryLines(r: BenchResult): string[] {
  const lines = [`${r.scenario} (${r.scale}): ${r.status}`];
  for (const run of r.runs) {
    const m = run.metrics[0];
    if (m)
      lines.push(
        `  ${run.id}: ${m.name} median ${fmt(m.summary.median)} ${m.unit} (p10 ${fmt(m.summary.p10)}, p90 ${fmt(m.summary.p90)})`,
      );
  }
  for (const s of r.skipped) lines.push(`  skipped ${s.what}: ${s.reason}`);
  for (const n of r.notes) lines.push(`  note: ${n}`);
  return lines;
}

function fmt(x: number): string {
  return Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(2) : x.toPrecision(3);
}
