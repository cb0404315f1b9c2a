/**
 * One rank of the distributed tests and benchmarks, started through launchRing (MLX_RANK and
 * MLX_HOSTFILE set) with a job as JSON in argv[2]. Rank 0 loads each model split across the ranks;
 * the other ranks serve their layers until rank 0 disposes the model.
 *
 * - "scenario": rank 0 runs the parity scenario on each model and writes what it saw to `out`;
 * - "decode": rank 0 decodes greedily, printing "STEP <n>" after each step, until the model fails
 *   (printing "FAILED <json>" with the error and what later calls throw) or `steps` are done;
 * - "join": every rank joins the group, gathers every rank's number and prints "JOINED <json>" (with
 *   the connections it refused) or "FAILED <json>";
 * - "wait": every rank takes the launch's secret, prints "READY <pid>" and waits forever (with
 *   `ignoreTerm`, deaf to SIGTERM): it ends only when its launcher is gone.
 */
import { writeFileSync } from "node:fs";
import {
  attachToLauncher,
  joinGroup,
  launchedRank,
  loadMlxModel,
  mx,
  runMlxWorker,
} from "../../src/index.js";
import { argmax, logitsOf, type RankModel, runScenario, type ScenarioResult } from "./scenario.js";

export type RankJob =
  | { mode: "scenario"; out: string; models: RankModel[]; prompt: number[]; stepTimeoutMs?: number }
  | { mode: "decode"; model: RankModel; steps: number; stepTimeoutMs?: number }
  | {
      mode: "bench";
      model: RankModel;
      prompt: number[];
      decodeTokens: number;
      pings: number;
      stepTimeoutMs?: number;
    }
  | { mode: "idle"; model: RankModel; idleMs: number; stepTimeoutMs?: number }
  | { mode: "join"; timeoutMs: number }
  | { mode: "wait"; ignoreTerm?: boolean };

/** What each rank of a "bench" job prints as "STATS <json>" at the end. */
export interface RankStats {
  rank: number;
  layers: { start: number; end: number };
  /** MLX's active memory once loaded (about the weights), and its peak over the run. */
  loadedBytes: number;
  peakBytes: number;
  /** The process's peak resident set. */
  maxRssBytes: number;
  /** Rank 0 only. */
  loadMs?: number;
  prefillMs?: number;
  decodeStepMs?: number[];
  pingMs?: number[];
}

const job = JSON.parse(process.argv[2]) as RankJob;
mx.setDefaultDevice("cpu");
const rank0 = (launchedRank() ?? 0) === 0;
const distributed = (m: RankModel, stepTimeoutMs = 60_000) => ({
  timeoutMs: 90_000,
  stepTimeoutMs,
  loadTimeoutMs: 120_000,
  split: m.split,
});
// started alone (no MLX_RANK): one plain process, the baseline
const options = (m: RankModel, stepTimeoutMs?: number) => ({
  dtype: "float32" as const,
  prefillChunk: m.prefillChunk,
  distributed: launchedRank() === undefined ? undefined : distributed(m, stepTimeoutMs),
});

if (job.mode === "join") {
  try {
    const g = await joinGroup({ timeoutMs: job.timeoutMs });
    // the ring carries data: every rank's number, gathered by every rank
    const all = g.allGather(mx.array(Int32Array.of(g.rank), [1]));
    await g.wait([all], { timeoutMs: job.timeoutMs, what: "gathering the ranks" });
    console.log(
      `JOINED ${JSON.stringify({ gathered: [...(all.toTypedArray() as Int32Array)], refused: g.refused })}`,
    );
  } catch (error) {
    const e = error as { code?: string; message: string };
    console.log(`FAILED ${JSON.stringify({ code: e.code, message: e.message })}`);
    process.exit(1);
  }
} else if (job.mode === "wait") {
  if (job.ignoreTerm) process.on("SIGTERM", () => {});
  await attachToLauncher();
  console.log(`READY ${process.pid}`);
  setInterval(() => {}, 2 ** 30);
} else if (job.mode === "scenario") {
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
} else if (job.mode === "idle") {
  // rank 0 loads, then sends nothing for idleMs; the others print the CPU time they used meanwhile
  if (rank0) {
    const model = await loadMlxModel(job.model.path, options(job.model, job.stepTimeoutMs));
    await new Promise((r) => setTimeout(r, job.idleMs));
    await model.dispose();
  } else {
    let ready: NodeJS.CpuUsage | undefined;
    await runMlxWorker(job.model.path, {
      ...options(job.model, job.stepTimeoutMs),
      onReady: () => {
        ready = process.cpuUsage();
      },
    });
    const used = process.cpuUsage(ready);
    console.log(`IDLE ${JSON.stringify({ cpuMs: (used.user + used.system) / 1000 })}`);
  }
} else if (job.mode === "bench") {
  const stats = rank0 ? await benchRank0(job) : await benchWorker(job);
  console.log(`STATS ${JSON.stringify(stats)}`);
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

type BenchJob = Extract<RankJob, { mode: "bench" }>;

/** Rank 0 of a benchmark (or the one process, when started alone): load, warm up, time, ping. */
async function benchRank0(job: BenchJob): Promise<RankStats> {
  const started = performance.now();
  const model = await loadMlxModel(job.model.path, options(job.model, job.stepTimeoutMs));
  const loadMs = performance.now() - started;
  const loadedBytes = mx.getActiveMemory();
  let tok = argmax(logitsOf(await model.prefill(job.prompt.slice(0, 8))));
  for (let i = 0; i < 2; i++) tok = argmax(logitsOf(await model.decode(tok)));
  model.reset();
  mx.resetPeakMemory();
  let t = performance.now();
  tok = argmax(logitsOf(await model.prefill(job.prompt)));
  const prefillMs = performance.now() - t;
  const decodeStepMs: number[] = [];
  for (let i = 0; i < job.decodeTokens; i++) {
    t = performance.now();
    tok = argmax(logitsOf(await model.decode(tok)));
    decodeStepMs.push(performance.now() - t);
  }
  const pingMs: number[] = [];
  if (model.ranks) for (let i = 0; i < job.pings; i++) pingMs.push(await model.pingRanks());
  const layers = model.ranks?.layers[0] ?? { start: 0, end: model.config.numHiddenLayers };
  const peakBytes = mx.getPeakMemory();
  await model.dispose();
  return {
    rank: 0,
    layers,
    loadedBytes,
    peakBytes,
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
    loadMs,
    prefillMs,
    decodeStepMs,
    pingMs,
  };
}

async function benchWorker(job: BenchJob): Promise<RankStats> {
  let loadedBytes = 0;
  const stats = await runMlxWorker(job.model.path, {
    ...options(job.model, job.stepTimeoutMs),
    onReady: () => {
      loadedBytes = mx.getActiveMemory();
      mx.resetPeakMemory();
    },
  });
  return {
    rank: stats.rank,
    layers: stats.layers,
    loadedBytes,
    peakBytes: stats.peakBytes,
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}
