/**
 * Checkpoints on MLX. runtime-mlx is an optional peer dependency (its native addon needs an
 * installed MLX): it is imported only when a model asks for it, and its absence is said plainly.
 */

import { resolveModelRef } from "@anemll-qwen35/ir/checkpoint";
import { chooseBackend, modelKind } from "./backend.js";
import { ModelLoadError } from "./errors.js";
import type { LoadModelOptions, OpenedRuntime } from "./load-options.js";

type RuntimeMlx = typeof import("@anemll-qwen35/runtime-mlx");
type WorkerStats = import("@anemll-qwen35/runtime-mlx").WorkerStats;

export async function runtimeMlx(ref: string): Promise<RuntimeMlx> {
  let mlx: RuntimeMlx;
  try {
    mlx = await import("@anemll-qwen35/runtime-mlx");
  } catch (err) {
    throw new ModelLoadError(
      ref,
      `the mlx backend needs @anemll-qwen35/runtime-mlx (npm install @anemll-qwen35/runtime-mlx): ${(err as Error).message}`,
      { cause: err },
    );
  }
  const available = mlx.mlxAvailable();
  if (!available.available) {
    throw new ModelLoadError(
      ref,
      `the mlx backend is unavailable here: ${available.reason ?? "the MLX addon did not load"}`,
    );
  }
  return mlx;
}

/** The runtime-mlx options a LoadModelOptions means. */
function mlxOptions(o: LoadModelOptions) {
  return {
    contextLength: o.contextLength,
    dtype: o.dtype,
    bits: o.bits,
    kvCache: o.preallocateKv ? { preallocate: true } : undefined,
    mtp: o.mtp,
    distributed: o.distributed,
    onProgress: (p: { done: number; total: number }) =>
      o.onProgress?.({ stage: "weights", done: p.done, total: p.total }),
    signal: o.signal,
  };
}

export async function loadMlx(ref: string, dir: string, o: LoadModelOptions): Promise<OpenedRuntime> {
  const mlx = await runtimeMlx(ref);
  const model = await mlx.loadMlxModel(dir, mlxOptions(o));
  const q = model.quantization ? `, ${model.quantization.bits}-bit` : "";
  const ranks = model.ranks
    ? `, ${model.ranks.size} ranks: layers ${model.ranks.layers.map((l) => `${l.start}-${l.end - 1}`).join(" | ")}`
    : "";
  return { model, detail: `mlx (${model.dtype}${q}${ranks})`, eosTokenIds: model.config.eosTokenIds };
}

/**
 * A rank after the first of a model split across ranks (see LoadModelOptions.distributed): loads
 * this rank's layers of `ref` and runs them for rank 0 until it disposes the model. Give it the same
 * `ref` and options as rank 0's loadModel. Rejects when a peer is lost.
 */
export async function runModelRank(
  ref: string,
  options: LoadModelOptions & {
    onReady?: (info: { rank: number; layers: { start: number; end: number } }) => void;
  },
): Promise<WorkerStats> {
  let dir: string;
  try {
    dir = await resolveModelRef(ref, { onProgress: options.onProgress, signal: options.signal });
  } catch (err) {
    throw new ModelLoadError(ref, (err as Error).message, { cause: err });
  }
  chooseBackend(modelKind(dir, ref), options.backend === "auto" ? "mlx" : (options.backend ?? "mlx"), ref);
  const mlx = await runtimeMlx(ref);
  return mlx.runMlxWorker(dir, {
    ...mlxOptions(options),
    distributed: options.distributed ?? {},
    onReady: options.onReady,
  });
}
