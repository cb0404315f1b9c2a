/**
 * Worker entry of the k-means pool (kmeans-pool.ts): runs one KmeansTask per message on shared
 * memory and answers with its id (and the error message when it fails).
 */
import { parentPort } from "node:worker_threads";
import { type KmeansTask, kmeansGroups } from "./kmeans.js";

export interface WorkerRequest {
  readonly id: number;
  readonly task: KmeansTask;
}

export interface WorkerReply {
  readonly id: number;
  readonly error?: string;
}

if (!parentPort) throw new Error("kmeans-worker runs as a worker thread (see kmeans-pool.ts)");
const port = parentPort;
port.on("message", ({ id, task }: WorkerRequest) => {
  try {
    kmeansGroups(task);
    port.postMessage({ id } satisfies WorkerReply);
  } catch (e) {
    port.postMessage({ id, error: (e as Error).message } satisfies WorkerReply);
  }
});
