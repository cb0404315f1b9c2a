/**
 * A child process of the parallel scenario: loads one model, warms it up, then decodes greedily
 * for as long as the parent says, timing every step (see worker-protocol.ts).
 */
import type { StepModel } from "@anemll-qwen35/generate";
import { openAne, openMlx } from "./backends.js";
import { greedy } from "./steps.js";
import type { FromWorker, ToWorker, WorkerJob } from "./worker-protocol.js";

function send(m: FromWorker): void {
  process.send?.(m);
}

async function decodeFor(model: StepModel, job: WorkerJob, durationMs: number) {
  const stepMs: number[] = [];
  let resets = 0;
  const start = performance.now();
  await model.reset();
  let next = greedy(await model.prefill(job.prompt.slice()));
  // at least one step, however short the window
  while (stepMs.length === 0 || performance.now() - start < durationMs) {
    if (model.position >= model.contextLength - 1) {
      // the context is full: start the same prompt again (not counted as a decode step)
      await model.reset();
      next = greedy(await model.prefill(job.prompt.slice()));
      resets++;
      continue;
    }
    const t = performance.now();
    const out = await model.decode(next);
    stepMs.push(performance.now() - t);
    next = greedy(out);
  }
  return { stepMs, wallMs: performance.now() - start, resets };
}

async function main(): Promise<void> {
  const job = JSON.parse(process.argv[2] ?? "{}") as WorkerJob;
  const opened =
    job.kind === "ane" ? await openAne(job.dir, { backend: job.ane }) : await openMlx(job.dir, job.mlx ?? {});
  const model = opened.model;
  // warm-up: first prompt and two steps (LUT expansion, JIT, caches)
  let next = greedy(await model.prefill(job.prompt.slice()));
  for (let i = 0; i < 2; i++) next = greedy(await model.decode(next));
  send({ type: "ready", loadMs: opened.loadMs, backend: opened.backend });
  process.on("message", (m: ToWorker) => {
    if (m.type === "exit") {
      void Promise.resolve(model.dispose()).finally(() => process.exit(0));
      return;
    }
    decodeFor(model, job, m.durationMs).then(
      (r) => send({ type: "done", ...r }),
      (e) => send({ type: "error", message: e instanceof Error ? e.message : String(e) }),
    );
  });
  process.on("disconnect", () => process.exit(0));
}

main().catch((e) => {
  send({ type: "error", message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 50);
});
