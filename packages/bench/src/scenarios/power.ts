/**
 * power: ANE, GPU and CPU power while each backend decodes (and idle, as the floor), sampled with
 * powermetrics on macOS as root; joules per token follow from power and tok/s. Anywhere else the
 * scenario is skipped with the reason in the JSON.
 */
import type { StepModel } from "@anemll-qwen35/generate";
import type { ChartSpec, Row } from "../charts.js";
import { eachSide, nothingRan, promptFor } from "../measure.js";
import { type PowerSamples, powerUnavailableReason, samplePower } from "../powermetrics.js";
import { barChart } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Metric, Run } from "../schema.js";
import { metric } from "../stats.js";
import { greedy } from "../steps.js";

const INTERVAL_MS = 250;

async function decodeFor(model: StepModel, prompt: number[], ms: number): Promise<number> {
  await model.reset();
  let next = greedy(await model.prefill(prompt));
  let steps = 0;
  const start = performance.now();
  while (performance.now() - start < ms) {
    if (model.position >= model.contextLength - 1) {
      await model.reset();
      next = greedy(await model.prefill(prompt));
    }
    next = greedy(await model.decode(next));
    steps++;
  }
  return steps / ((performance.now() - start) / 1000);
}

function powerMetrics(p: PowerSamples): Metric[] {
  const w = (xs: number[]) => xs.map((x) => x / 1000);
  const out: Metric[] = [];
  if (p.aneMw.length) out.push(metric("ane_w", "W", w(p.aneMw)));
  if (p.gpuMw.length) out.push(metric("gpu_w", "W", w(p.gpuMw)));
  if (p.cpuMw.length) out.push(metric("cpu_w", "W", w(p.cpuMw)));
  if (p.combinedMw.length) out.push(metric("combined_w", "W", w(p.combinedMw)));
  return out;
}

export const power: Scenario = {
  name: "power",
  question: "How much power do the ANE and the GPU draw while decoding, and how many joules per token?",
  async run(ctx, p) {
    const reason = powerUnavailableReason();
    if (reason) return nothingRan("power sampling", reason);
    const ms = Math.max(3000, p.parallelSeconds * 1000);
    const idle = await samplePower(INTERVAL_MS, () => new Promise((r) => setTimeout(r, ms)));
    const floor: Run = {
      id: "idle",
      backend: "host",
      model: { name: "none", source: "idle" },
      config: { seconds: ms / 1000 },
      metrics: powerMetrics(idle.power),
      notes: ["the floor: nothing decoding"],
    };
    const decoding = await eachSide(ctx, "power", async (side, opened) => {
      const prompt = promptFor(side, p.promptTokens);
      await decodeFor(opened.model, prompt, 1000); // warm-up
      const { power: pw, result: tokS } = await samplePower(INTERVAL_MS, () =>
        decodeFor(opened.model, prompt, ms),
      );
      const metrics = powerMetrics(pw);
      metrics.push(metric("decode_tok_s", "tok/s", [tokS]));
      const combined = metrics.find((m) => m.name === "combined_w");
      if (combined) metrics.push(metric("joules_per_token", "J/token", [combined.summary.median / tokS]));
      return { config: { seconds: ms / 1000, intervalMs: INTERVAL_MS }, metrics };
    });
    return { ...decoding, runs: [floor, ...decoding.runs] };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const rows: Row[] = [];
    for (const r of runs) {
      for (const name of ["ane_w", "gpu_w", "cpu_w"]) {
        const m = r.metrics.find((x) => x.name === name);
        if (m) rows.push({ run: r.id, rail: name.replace("_w", "").toUpperCase(), median: m.summary.median });
      }
    }
    return [barChart("watts", "Power while decoding (median W per rail)", rows, "W", { color: "rail" })];
  },
};
