/**
 * One rank of the pipeline parity test (started by distributed.test.ts through launchRing, with
 * MLX_RANK / MLX_HOSTFILE set): rank 0 loads each model split across the ranks, runs the scenario and
 * writes what it saw to the file in argv[2]; the other ranks serve their layers until rank 0 is done
 * with each model.
 */
import { writeFileSync } from "node:fs";
import { launchedRank, loadMlxModel, mx, runMlxWorker } from "../../src/index.js";
import { runScenario, type ScenarioResult } from "./scenario.js";

interface Job {
  out: string;
  models: { name: string; path: string; prefillChunk: number }[];
  prompt: number[];
}

const job = JSON.parse(process.argv[2]) as Job;
mx.setDefaultDevice("cpu");
const distributed = { timeoutMs: 30_000, stepTimeoutMs: 30_000, loadTimeoutMs: 60_000 };
const results: Record<string, ScenarioResult & { layers: { start: number; end: number }[] }> = {};
for (const m of job.models) {
  const opts = { dtype: "float32" as const, prefillChunk: m.prefillChunk, distributed };
  if (launchedRank() === 0) {
    const model = await loadMlxModel(m.path, opts);
    const r = await runScenario(model, job.prompt);
    results[m.name] = { ...r, layers: [...(model.ranks?.layers ?? [])] };
    await model.dispose();
  } else {
    await runMlxWorker(m.path, opts);
  }
}
if (launchedRank() === 0) writeFileSync(job.out, JSON.stringify(results));
