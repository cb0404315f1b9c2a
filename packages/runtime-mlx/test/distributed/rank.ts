/**
 * One rank of the distributed tests and benchmarks, started through launchRing (MLX_RANK and
 * MLX_HOSTFILE set) with a job as JSON in argv[2]. Rank 0 loads each model split across the ranks;
 * the other ranks serve their layers until rank 0 disposes the model.
 *
 * - "scenario": rank 0 runs the parity scenario on each model and writes what it saw to `out`;
 * - "decode": rank 0 decodes greedily, printing "STEP <n>" after each step, until the model fails
 *   (printing "FAILED <json>" with the error and what later calls throw) or `steps` are done.
 */
import { writeFileSync } from "node:fs";
import { launchedRank, loadMlxModel, mx, runMlxWorker } from "../../src/index.js";
import { type RankModel, runScenario, type ScenarioResult } from "./scenario.js";

export type RankJob =
  | { mode: "scenario"; out: string; models: RankModel[]; prompt: number[]; stepTimeoutMs?: number }
  | { mode: "decode"; model: RankModel; steps: number; stepTimeoutMs: number };

const job = JSON.parse(process.argv[2]) as RankJob;
mx.setDefaultDevice("cpu");
const rank0 = launchedRank() === 0;
const distributed = (m: RankModel, stepTimeoutMs = 60_000) => ({
  timeoutMs: 30_000,
  stepTimeoutMs,
  loadTimeoutMs: 120_000,
  split: m.split,
});
const options = (m: RankModel, stepTimeoutMs?: number) => ({
  dtype: "float32" as const,
  prefillChunk: m.prefillChunk,
  distributed: distributed(m, stepTimeoutMs),
});

const logitsOf = (o: unknown) => (o as { logits: Float32Array }).logits;

const argmax = (a: Float32Array): number => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

if (job.mode === "scenario") {
  const results: Record<string, ScenarioResult & { layers: { start: number; end: number }[] }> = {};
  try {
    for (const m of job.models) {
      const path = m.rankPaths?.[launchedRank() ?? 0] ?? m.path;
      if (rank0) {
        const model = await loadMlxModel(path, options(m, job.stepTimeoutMs));
        results[m.name] = {
          ...(await runScenario(model, job.prompt)),
          layers: [...(model.ranks?.layers ?? [])],
        };
        await model.dispose();
      } else {
        await runMlxWorker(path, options(m, job.stepTimeoutMs));
      }
    }
  } catch (error) {
    const e = error as { code?: string; message: string };
    console.log(`FAILED ${JSON.stringify({ code: e.code, message: e.message })}`);
    process.exit(1);
  }
  if (rank0) writeFileSync(job.out, JSON.stringify(results));
} else if (rank0) {
  const model = await loadMlxModel(job.model.path, options(job.model, job.stepTimeoutMs));
  let logits = logitsOf(await model.prefill([1, 2, 3]));
  let failedAt = 0;
  try {
    for (let i = 0; i < job.steps; i++) {
      logits = logitsOf(await model.decode(argmax(logits)));
      console.log(`STEP ${i}`);
    }
  } catch (error) {
    failedAt = performance.now();
    const e = error as { name: string; code?: string; message: string };
    let later: { code?: string; message: string } | undefined;
    try {
      await model.decode(0);
    } catch (again) {
      later = { code: (again as { code?: string }).code, message: (again as Error).message };
    }
    const unavailable = model.unavailable?.code;
    const disposeStarted = performance.now();
    await model.dispose();
    console.log(
      `FAILED ${JSON.stringify({ name: e.name, code: e.code, message: e.message, later, unavailable, disposeMs: performance.now() - disposeStarted })}`,
    );
  }
  if (!failedAt) await model.dispose();
} else {
  await runMlxWorker(job.model.path, options(job.model, job.stepTimeoutMs));
}
