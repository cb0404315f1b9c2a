/**
 * The parent's side of the parallel scenario: start a worker child process per model, wait until
 * it is warm, and let several decode at the same moment.
 */
import { type ChildProcess, fork } from "node:child_process";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { BenchWorkerError } from "./errors.js";
import type { FromWorker, ToWorker, WorkerJob } from "./worker-protocol.js";

/** The worker's file and the node flags it needs (TypeScript sources run through tsx). */
function workerEntry(): { file: URL; execArgv: string[] } {
  const here = import.meta.url;
  if (/\.ts$/.test(new URL(here).pathname)) {
    // running from src/ (tests, tsx): the child needs tsx and the workspace "source" condition
    return {
      file: new URL("./worker.ts", here),
      execArgv: [
        "--conditions",
        "source",
        "--import",
        pathToFileURL(createRequire(here).resolve("tsx")).href,
      ],
    };
  }
  return { file: new URL("./worker.js", here), execArgv: [] };
}

export interface WorkerDone {
  readonly stepMs: number[];
  readonly wallMs: number;
  readonly resets: number;
}

export class BenchWorker {
  readonly label: string;
  readonly loadMs: number;
  readonly backend: string;
  private readonly child: ChildProcess;
  private stderr: string;

  private constructor(
    label: string,
    child: ChildProcess,
    ready: { loadMs: number; backend: string },
    stderr: string,
  ) {
    this.label = label;
    this.child = child;
    this.loadMs = ready.loadMs;
    this.backend = ready.backend;
    this.stderr = stderr;
    child.stderr?.on("data", (d) => {
      this.stderr = (this.stderr + d).slice(-4000);
    });
  }

  static start(job: WorkerJob, timeoutMs = 30 * 60_000): Promise<BenchWorker> {
    const { file, execArgv } = workerEntry();
    const child = fork(file, [JSON.stringify(job)], { execArgv, stdio: ["ignore", "ignore", "pipe", "ipc"] });
    let stderr = "";
    child.stderr?.on("data", (d) => {
      stderr = (stderr + d).slice(-4000);
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill();
        reject(new BenchWorkerError(job.label, `not ready after ${timeoutMs / 1000} s`));
      }, timeoutMs);
      const onExit = (code: number | null) => {
        clearTimeout(timer);
        reject(new BenchWorkerError(job.label, `exited with code ${code} before it was ready\n${stderr}`));
      };
      child.once("exit", onExit);
      child.once("message", (m: FromWorker) => {
        clearTimeout(timer);
        child.off("exit", onExit);
        if (m.type === "ready") resolve(new BenchWorker(job.label, child, m, stderr));
        else {
          child.kill();
          reject(
            new BenchWorkerError(job.label, m.type === "error" ? m.message : `unexpected message ${m.type}`),
          );
        }
      });
    });
  }

  /** Decodes for `durationMs`; resolves with every step's ms. */
  run(durationMs: number): Promise<WorkerDone> {
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null) =>
        reject(new BenchWorkerError(this.label, `exited with code ${code} while decoding\n${this.stderr}`));
      this.child.once("exit", onExit);
      this.child.once("message", (m: FromWorker) => {
        this.child.off("exit", onExit);
        if (m.type === "done") resolve(m);
        else
          reject(
            new BenchWorkerError(this.label, m.type === "error" ? m.message : `unexpected message ${m.type}`),
          );
      });
      this.child.send({ type: "go", durationMs } satisfies ToWorker);
    });
  }

  /** Asks the child to exit (and kills it if it has not after a second). */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.child.kill();
        resolve();
      }, 1000);
      this.child.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
      if (this.child.connected) this.child.send({ type: "exit" } satisfies ToWorker);
      else this.child.kill();
    });
  }
}
