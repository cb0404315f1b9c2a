/**
 * Golden outputs written by tools/oracle (fixtures/<name>/golden.safetensors + golden.json): what
 * Hugging Face transformers (fp32, eager) produced for a prompt, used by the parity tests and by
 * the CLI's `verify`.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type Tensor, toFloat32 } from "@anemll-qwen35/core";
import { SafetensorsFile } from "./safetensors.js";

export interface Golden {
  readonly promptIds: number[];
  /** N+1 greedy ids: [0] = argmax(promptLogits[T-1]), [i+1] = argmax(decodeLogits[i]). */
  readonly generatedIds: number[];
  /** [T][V] logits of every prompt position. */
  readonly promptLogits: Float32Array[];
  /** [N][V]: decode step i fed generatedIds[i] at position T+i. */
  readonly decodeLogits: Float32Array[];
  /** [L+1][T][D]: [0] embedding output, [i] after layer i-1 (i < L), [L] after the final norm. */
  readonly hiddenStates: Float32Array[][];
}

export const GOLDEN_FILE = "golden.safetensors";

export function hasGolden(dir: string): boolean {
  return existsSync(join(dir, GOLDEN_FILE));
}

function rows(t: Tensor): Float32Array[] {
  const v = toFloat32(t.dtype, t.data);
  const n = t.shape[0];
  const w = v.length / n;
  return Array.from({ length: n }, (_, i) => v.subarray(i * w, (i + 1) * w));
}

export async function loadGolden(dir: string): Promise<Golden> {
  await using f = await SafetensorsFile.open(join(dir, GOLDEN_FILE));
  const hs = await f.read("hidden_states");
  const [layers, tokens, width] = hs.shape;
  const hv = toFloat32(hs.dtype, hs.data);
  const ids = async (name: string) => Array.from((await f.read(name)).data as BigInt64Array, Number);
  return {
    promptIds: await ids("prompt_ids"),
    generatedIds: await ids("generated_ids"),
    promptLogits: rows(await f.read("prompt_logits")),
    decodeLogits: rows(await f.read("decode_logits")),
    hiddenStates: Array.from({ length: layers }, (_, l) =>
      Array.from({ length: tokens }, (_, t) =>
        hv.subarray((l * tokens + t) * width, (l * tokens + t + 1) * width),
      ),
    ),
  };
}

/** Index of the largest value (first on ties). */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}
