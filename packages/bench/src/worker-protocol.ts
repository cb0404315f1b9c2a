/**
 * The parallel scenario's parent ↔ child protocol (Node IPC messages). Each model runs in its own
 * child process, so the native MLX addon and the interpreter really run at the same time.
 *
 *   parent → child: argv[2] = WorkerJob (JSON)
 *   child  → parent: { type: "ready", loadMs }               model loaded and warmed up
 *   parent → child: { type: "go", durationMs }                decode for that long
 *   child  → parent: { type: "done", stepMs, wallMs, resets } every step's ms and the wall time
 *   parent → child: { type: "exit" }
 *   child  → parent: { type: "error", message }               anything failed
 */
import type { AneBackendChoice } from "./backends.js";

export interface WorkerJob {
  readonly label: string;
  readonly kind: "ane" | "mlx";
  /** ANE: the chain folder; MLX: the checkpoint folder. */
  readonly dir: string;
  readonly ane?: AneBackendChoice;
  readonly mlx?: { bits?: 4 | 8; dtype?: "float32" | "bfloat16"; contextLength?: number };
  readonly prompt: readonly number[];
}

export type ToWorker = { type: "go"; durationMs: number } | { type: "exit" };

export type FromWorker =
  | { type: "ready"; loadMs: number; backend: string }
  | { type: "done"; stepMs: number[]; wallMs: number; resets: number }
  | { type: "error"; message: string };
