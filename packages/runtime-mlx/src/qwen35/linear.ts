/**
 * Projections: a dense weight [out, in] (y = x Wᵀ) or an affine-quantized one (packed uint32 weights +
 * per-group scales and biases along the input axis, mlx.nn.QuantizedLinear's layout). Expert banks add
 * a leading expert axis; only the experts a token selected are computed. On CPU streams these run
 * runtime-mlx's own kernels (native/cpu_kernels.cc), elsewhere MLX's matmul / quantized_matmul /
 * gather_qmm.
 */
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";

export interface DenseWeight {
  readonly kind: "dense";
  /** [out, in] (experts: [E, out, in]). */
  readonly weight: MxArray;
}

export interface QuantizedWeight {
  readonly kind: "quantized";
  /** uint32 [out, in * bits / 32] (experts: [E, ...]). */
  readonly weight: MxArray;
  /** [out, in / groupSize] */
  readonly scales: MxArray;
  readonly biases: MxArray;
  readonly bits: number;
  readonly groupSize: number;
}

export type Weight = DenseWeight | QuantizedWeight;

/** Input features of a weight (its logical last axis). */
export function inFeatures(w: Weight): number {
  const last = w.weight.shape[w.weight.ndim - 1];
  return w.kind === "dense" ? last : (last * 32) / w.bits;
}

/** Output features (the axis before the last). */
export const outFeatures = (w: Weight): number => w.weight.shape[w.weight.ndim - 2];

/** Every array a weight holds. */
export function weightArrays(w: Weight): MxArray[] {
  return w.kind === "dense" ? [w.weight] : [w.weight, w.scales, w.biases];
}

export const dense = (weight: MxArray): DenseWeight => ({ kind: "dense", weight });

/** y = x Wᵀ for x [..., in] → [..., out]. */
export function linear(w: Weight, x: MxArray): MxArray {
  if (w.kind === "dense") return mx.linear(x, w.weight);
  return mx.quantizedLinear(x, w.weight, w.scales, w.biases, w);
}

/**
 * Expert projections: row p of the result is x[p / rowsPerX] times expert indices[p]'s weight
 * ([E, out, in] bank): x [X, in], indices [P] uint32 → [P, out].
 */
export function gatherLinear(w: Weight, x: MxArray, indices: MxArray, rowsPerX: number): MxArray {
  return mx.gatherLinear(x, w.weight, indices, {
    rowsPerX,
    quantized: w.kind === "quantized" ? w : undefined,
  });
}

/** Rows `ids` of an embedding table [V, D] (quantized rows are dequantized, as QuantizedEmbedding). */
export function embed(table: Weight, ids: MxArray): MxArray {
  if (table.kind === "dense") return mx.take(table.weight, ids, 0);
  return mx.dequantize(
    mx.take(table.weight, ids, 0),
    mx.take(table.scales, ids, 0),
    mx.take(table.biases, ids, 0),
    {
      bits: table.bits,
      groupSize: table.groupSize,
    },
  );
}

/**
 * Several projections of the same input computed as one (their weights concatenated along the output
 * axis at load), then split: e.g. q|k|v, or GDN's qkv|z|b|a. Parts that cannot be concatenated
 * (different quantization) stay separate.
 */
export interface FusedLinear {
  /** One weight per group of consecutive parts that share a layout. */
  readonly groups: readonly { readonly weight: Weight; readonly sizes: readonly number[] }[];
}

/** The outputs of each part, in order. */
export function fusedLinear(f: FusedLinear, x: MxArray): MxArray[] {
  const out: MxArray[] = [];
  for (const { weight, sizes } of f.groups) {
    const y = linear(weight, x);
    if (sizes.length === 1) {
      out.push(y);
      continue;
    }
    out.push(...mx.split(y, cuts(sizes), -1));
  }
  return out;
}

/** Split points between consecutive segments of the given sizes. */
function cuts(sizes: readonly number[]): number[] {
  const out: number[] = [];
  let at = 0;
  for (let i = 0; i < sizes.length - 1; i++) {
    at += sizes[i];
    out.push(at);
  }
  return out;
}

/** Expert variant of FusedLinear (gate|up of each expert, concatenated along axis 1). */
export function fusedGatherLinear(f: FusedLinear, x: MxArray, indices: MxArray, rowsPerX: number): MxArray[] {
  const out: MxArray[] = [];
  for (const { weight, sizes } of f.groups) {
    const y = gatherLinear(weight, x, indices, rowsPerX);
    out.push(...(sizes.length === 1 ? [y] : mx.split(y, cuts(sizes), -1)));
  }
  return out;
}

export function fusedArrays(f: FusedLinear): MxArray[] {
  return f.groups.flatMap((g) => weightArrays(g.weight));
}
