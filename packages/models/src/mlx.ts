/**
 * Checkpoints on MLX. runtime-mlx is an optional peer dependency (its native addon needs an
 * installed MLX): it is imported only when a model asks for it, and its absence is said plainly.
 */

import { ModelLoadError } from "./errors.js";
import type { LoadModelOptions, OpenedRuntime } from "./load.js";

export async function loadMlx(ref: string, dir: string, o: LoadModelOptions): Promise<OpenedRuntime> {
  let mlx: typeof import("@anemll-qwen35/runtime-mlx");
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
  const model = await mlx.loadMlxModel(dir, {
    contextLength: o.contextLength,
    dtype: o.dtype,
    bits: o.bits,
    kvCache: o.preallocateKv ? { preallocate: true } : undefined,
    onProgress: (p) => o.onProgress?.({ stage: "weights", done: p.done, total: p.total }),
    signal: o.signal,
  });
  const q = model.quantization ? `, ${model.quantization.bits}-bit` : "";
  return { model, detail: `mlx (${model.dtype}${q})`, eosTokenIds: model.config.eosTokenIds };
}
