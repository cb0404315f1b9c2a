/**
 * Pipeline split: which contiguous layers each rank holds. Rank 0 also holds the embedding, the final
 * norm and the head (it owns the tokens and sampling), so it takes fewer layers. Layers are never cut
 * (a MoE layer keeps all its experts), and the bytes each rank holds follow its share of memory.
 */

import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { Dtype } from "../native.js";
import { isQuantizable, paramSpecs } from "../qwen35/params.js";
import type { LayerRange } from "../qwen35/weights.js";

export type { LayerRange };

export interface WeightBytes {
  /** Embedding, final norm and head (the head counts once when tied). */
  readonly globals: number;
  /** Per layer. */
  readonly layers: readonly number[];
}

const DTYPE_BYTES: Partial<Record<Dtype, number>> = { float32: 4, bfloat16: 2, float16: 2 };

/** Bytes each layer (and the globals) will hold once loaded in `dtype` (and quantized to `bits`). */
export function weightBytes(
  cfg: Qwen35Config,
  o: { dtype: Dtype; tied: boolean; bits?: number; groupSize?: number },
): WeightBytes {
  const floatBytes = DTYPE_BYTES[o.dtype] ?? 4;
  const layers = new Array<number>(cfg.numHiddenLayers).fill(0);
  let globals = 0;
  for (const spec of paramSpecs(cfg, o.tied)) {
    const n = spec.shape.reduce((a, b) => a * b, 1);
    const inDim = spec.shape[spec.shape.length - 1];
    const group = o.groupSize ?? 64;
    const bits =
      o.bits && isQuantizable(spec.kind) && inDim % group === 0 ? (spec.bits ?? o.bits) : undefined;
    // quantized: packed weights plus one scale and one bias per group
    const bytes = bits
      ? (n * bits) / 8 + ((2 * n) / group) * floatBytes
      : n * (spec.float32 ? 4 : floatBytes);
    if (spec.layer < 0) globals += bytes;
    else layers[spec.layer] += bytes;
  }
  return { globals, layers };
}

/**
 * Splits the layers into `shares.length` contiguous ranges so that rank r holds about shares[r] /
 * Σ shares of all bytes (rank 0's globals included); every rank gets at least one layer.
 */
export function planSplit(bytes: WeightBytes, shares: readonly number[]): LayerRange[] {
  const L = bytes.layers.length;
  const N = shares.length;
  if (N < 1 || shares.some((s) => !(s > 0))) {
    throw new InvalidArgumentError(
      `pipeline split: shares must be positive numbers, got [${shares.join(", ")}]`,
    );
  }
  if (L < N) {
    throw new InvalidArgumentError(
      `pipeline split: ${N} ranks need at least ${N} layers; the model has ${L}`,
    );
  }
  const total = bytes.globals + bytes.layers.reduce((a, b) => a + b, 0);
  const sumShares = shares.reduce((a, b) => a + b, 0);
  // cum[k]: bytes of the globals and layers [0, k)
  const cum = [bytes.globals];
  for (const b of bytes.layers) cum.push(cum[cum.length - 1] + b);
  const ranges: LayerRange[] = [];
  let start = 0;
  let share = 0;
  for (let r = 0; r < N - 1; r++) {
    share += shares[r];
    const target = (total * share) / sumShares;
    // leave at least one layer for each rank after this one
    let best = start + 1;
    for (let k = start + 1; k <= L - (N - 1 - r); k++) {
      if (Math.abs(cum[k] - target) < Math.abs(cum[best] - target)) best = k;
    }
    ranges.push({ start, end: best });
    start = best;
  }
  ranges.push({ start, end: L });
  return ranges;
}

/** Explicit layer counts per rank (e.g. `--pipeline-split 6,9,9`) as ranges; they must add up to the model's layers. */
export function splitFromCounts(counts: readonly number[], layers: number): LayerRange[] {
  if (counts.some((c) => !Number.isInteger(c) || c < 1)) {
    throw new InvalidArgumentError(
      `pipeline split: layer counts must be positive integers, got [${counts.join(", ")}]`,
    );
  }
  const sum = counts.reduce((a, b) => a + b, 0);
  if (sum !== layers) {
    throw new InvalidArgumentError(
      `pipeline split: the counts [${counts.join(", ")}] add up to ${sum} layers, but the model has ${layers}`,
    );
  }
  let start = 0;
  return counts.map((c) => {
    const r = { start, end: start + c };
    start += c;
    return r;
  });
}
