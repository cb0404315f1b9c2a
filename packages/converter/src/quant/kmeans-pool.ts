/**
 * A persistent pool of k-means workers (kmeans-worker.ts): started once, fed group ranges of
 * tensor after tensor through shared memory, so a conversion starts its threads once rather than
 * per tensor. Tasks are split into a few ranges per worker (groups differ in cost) and results
 * land at fixed positions, so the output never depends on scheduling or on the pool's size.
 *
 * The worker is a real entry file: dist/kmeans-worker.js when running the built package,
 * src/kmeans-worker.ts (through tsx's loader) when running from source.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { KmeansTask } from "./kmeans.js";
import type { WorkerReply, WorkerRequest } from "./kmeans-worker.js";

/** Ranges per worker and task: enough to even out uneven groups, few enough to keep messages cheap. */
const RANGES_PER_WORKER = 4;

/**
 * The parent's node options, less those a worker refuses or must not repeat: the inline script of
 * `node -e`/`-p` and its `--input-type`.
 */
export function workerExecArgv(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i];
    if (["-e", "--eval", "-p", "--print", "--input-type"].includes(a)) i++;
    else if (!/^--(eval|print|input-type)=/.test(a)) out.push(a);
  }
  return out;
}

function workerEntry(): { url: URL; execArgv: string[] } {
  const fromSource = import.meta.url.endsWith(".ts");
  const url = new URL(fromSource ? "./kmeans-worker.ts" : "./kmeans-worker.js", import.meta.url);
  const execArgv = workerExecArgv(process.execArgv);
  if (!fromSource) return { url, execArgv };
  // From source (vitest, tsx): workers do not inherit a TypeScript loader on Node 20, so the
  // worker registers tsx (a devDependency) before its entry loads.
  const api = import.meta.resolve("tsx/esm/api");
  const register = `import { register } from ${JSON.stringify(api)}; register();`;
  return { url, execArgv: [...execArgv, "--import", `data:text/javascript,${encodeURIComponent(register)}`] };
}

interface Job {
  readonly task: KmeansTask;
  readonly done: (error?: Error) => void;
  readonly owner: Run;
  worker?: PoolWorker;
}

interface Run {
  cancelled: boolean;
}

interface PoolWorker {
  readonly thread: Worker;
  job?: Job;
}

export class KmeansPool implements AsyncDisposable {
  readonly size: number;
  private readonly workers: PoolWorker[] = [];
  private readonly queue: Job[] = [];
  private nextId = 0;
  private closed = false;

  constructor(size: number = availableParallelism()) {
    if (!Number.isInteger(size) || size < 1)
      throw new InvalidArgumentError(`k-means pool size must be a positive integer, got ${size}`);
    this.size = size;
  }

  /**
   * Runs `task` (whose arrays live on SharedArrayBuffers) split over the workers; resolves when
   * every group is done. Aborting rejects at once and stops the workers busy with it.
   */
  async run(task: KmeansTask, signal?: AbortSignal): Promise<void> {
    if (this.closed) throw new InvalidArgumentError("the k-means pool is closed");
    signal?.throwIfAborted();
    const groups = task.end - task.first;
    if (groups <= 0) return;
    const step = Math.max(1, Math.ceil(groups / (this.size * RANGES_PER_WORKER)));
    const run: Run = { cancelled: false };
    const jobs: Promise<void>[] = [];
    for (let first = task.first; first < task.end; first += step) {
      const part = { ...task, first, end: Math.min(task.end, first + step) };
      jobs.push(
        new Promise<void>((ok, fail) => {
          this.queue.push({ task: part, owner: run, done: (e) => (e ? fail(e) : ok()) });
        }),
      );
    }
    this.pump();
    const all = Promise.all(jobs);
    if (!signal) {
      await all;
      return;
    }
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, fail) => {
      onAbort = () => {
        this.cancel(run);
        fail(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      await Promise.race([all, aborted]);
    } finally {
      signal.removeEventListener("abort", onAbort as () => void);
    }
  }

  /** Stops every worker (pending tasks fail). */
  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.done(new InvalidArgumentError("the k-means pool was closed"));
    await Promise.all(this.workers.splice(0).map((w) => this.stop(w)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private pump(): void {
    while (this.queue.length > 0) {
      let w = this.workers.find((x) => !x.job);
      if (!w && this.workers.length < this.size) w = this.spawn();
      if (!w) return;
      const job = this.queue.shift() as Job;
      if (job.owner.cancelled) continue;
      w.job = job;
      job.worker = w;
      w.thread.ref();
      w.thread.postMessage({ id: this.nextId++, task: job.task } satisfies WorkerRequest);
    }
  }

  private spawn(): PoolWorker {
    const { url, execArgv } = workerEntry();
    const thread = new Worker(url, { execArgv });
    const w: PoolWorker = { thread };
    thread.unref();
    thread.on("message", (reply: WorkerReply) => {
      const job = w.job;
      w.job = undefined;
      thread.unref();
      job?.done(reply.error === undefined ? undefined : new InvalidArgumentError(reply.error));
      this.pump();
    });
    const fail = (err: Error) => {
      this.workers.splice(this.workers.indexOf(w), 1);
      w.job?.done(err);
      w.job = undefined;
      this.pump();
    };
    thread.on("error", fail);
    thread.on("exit", (code) => {
      if (this.workers.includes(w)) fail(new Error(`k-means worker exited with code ${code}`));
    });
    this.workers.push(w);
    return w;
  }

  /** Drops a run's queued ranges and stops the workers computing its others. */
  private cancel(run: Run): void {
    run.cancelled = true;
    for (const w of [...this.workers]) {
      if (w.job?.owner === run) {
        this.workers.splice(this.workers.indexOf(w), 1);
        w.job = undefined;
        void this.stop(w);
      }
    }
    this.pump();
  }

  private async stop(w: PoolWorker): Promise<void> {
    w.thread.removeAllListeners("exit");
    await w.thread.terminate();
  }
}

let shared: KmeansPool | undefined;

/** A process-wide pool (availableParallelism() workers, started on first use; idle workers never keep the process alive). */
export function sharedKmeansPool(): KmeansPool {
  shared ??= new KmeansPool();
  return shared;
}
