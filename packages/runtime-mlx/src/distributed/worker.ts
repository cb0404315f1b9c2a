/**
 * The other ranks of a model split across machines: join the group, agree on the split, load this
 * rank's layers, and run them for rank 0 until it stops (see pipeline.ts).
 */
import { DistributedError } from "../errors.js";
import * as mx from "../mlx.js";
import { type LoadMlxModelOptions, resolveLoad, stageRequest } from "../mlx-qwen35.js";
import { openCheckpoint } from "../qwen35/checkpoint.js";
import { buildLayers, validateMlx, weightsArrays } from "../qwen35/weights.js";
import { DEFAULT_JOIN_TIMEOUT_MS, joinGroup } from "./group.js";
import { runPipelineWorker, type WorkerStats } from "./pipeline.js";
import { planStages } from "./stages.js";

export type { WorkerStats };

/**
 * Serves rank MLX_RANK (> 0) of a model that rank 0 opens with loadMlxModel(ref, { distributed }),
 * given the same `ref` and options. Resolves when rank 0 disposes the model; rejects with
 * DistributedError when a peer is lost or the ranks do not match. `onReady` runs once the layers
 * are loaded.
 */
export async function runMlxWorker(
  ref: string,
  opts: LoadMlxModelOptions & {
    onReady?: (info: { rank: number; layers: { start: number; end: number } }) => void;
  },
): Promise<WorkerStats> {
  const d = opts.distributed ?? {};
  const r = await resolveLoad(ref, opts);
  const group = await joinGroup(d);
  if (group.rank === 0) {
    throw new DistributedError(
      "E_MLX_DIST_SETUP",
      "runMlxWorker runs the ranks after the first; rank 0 loads the model with loadMlxModel(ref, { distributed })",
    );
  }
  const view = await openCheckpoint(r.dir, r.config);
  let layers: Awaited<ReturnType<typeof buildLayers>>;
  let range: { start: number; end: number };
  try {
    if (view.format === "mlx") validateMlx(r.config, view, r.dir);
    const ranges = await planStages(group, r.config, stageRequest(r, view.tied, d), {
      timeoutMs: d.timeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS,
    });
    range = ranges[group.rank];
    layers = await buildLayers(r.config, view, { dtype: r.dtype, quantize: r.quantize }, range, opts);
  } finally {
    view.dispose();
  }
  const weightsBytes = weightsArrays(layers).reduce((n, a) => n + a.nbytes, 0);
  opts.onReady?.({ rank: group.rank, layers: range });
  try {
    const stats = await runPipelineWorker(group, r.config, r.dtype, {
      layers,
      range,
      kv: { step: r.kv.step, preallocate: r.kv.preallocate ? r.contextLength : undefined },
    });
    return { ...stats, weightsBytes };
  } finally {
    mx.dispose(weightsArrays(layers));
  }
}
