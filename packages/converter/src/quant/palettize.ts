/**
 * LUT palettization: k-means over weight values, one lookup table per group of output channels
 * (per_grouped_channel, group 8 by default, as ANEMLL does with coremltools' OpPalettizerConfig) or
 * one for the whole tensor. The result feeds iOS18 `constexpr_lut_to_dense`: `indices` with the
 * weight's shape and a `lut` of shape [groups, 1, …, 2^bits, 1].
 *
 * The clustering (kmeans.ts) works on each group's histogram of distinct values: exact 1-D
 * k-means by dynamic programming for LUT2/LUT4, Lloyd's iterations from two starts otherwise.
 * Deterministic (no randomness; the same bytes whatever the number of workers). Stored bf16/fp16
 * values are taken as they are; fp32 values that are exactly bf16 or fp16 take the same fast path.
 * Large tensors are split by group over a persistent worker pool (kmeans-pool.ts).
 */
import { f16BitsToF32, f32ToF16Bits, InvalidArgumentError } from "@anemll-qwen35/core";
import { type KmeansTask, type KmeansValues, kmeansGroups } from "./kmeans.js";
import { type KmeansPool, sharedKmeansPool } from "./kmeans-pool.js";

export type LutBits = 2 | 4 | 6 | 8;

/** Weight values: fp32, or stored 16-bit patterns (a bf16/f16 tensor's data). */
export type PalettizeInput = Float32Array | { readonly dtype: "bf16" | "f16"; readonly data: Uint16Array };

export interface PalettizeOptions {
  bits: LutBits;
  /** Output channels sharing one LUT; 0 or undefined with `perTensor` = one LUT for the tensor. */
  groupSize?: number;
  perTensor?: boolean;
  /** 1 = main thread only; otherwise large tensors go to `pool`. */
  workers?: number;
  /** Worker pool for large tensors (default: a process-wide pool, one worker per core). */
  pool?: KmeansPool;
  /** Max Lloyd iterations per start (default 300; most groups converge far sooner). */
  maxIterations?: number;
  signal?: AbortSignal;
}

export interface Palettized {
  readonly bits: LutBits;
  /** Weight shape, e.g. [Dout, Din] or [Dout, Din, 1, 1]. */
  readonly shape: readonly number[];
  /** One index per weight element, row-major (unpacked; the blob writer packs them). */
  readonly indices: Uint8Array;
  /** fp16 bit patterns, [groups × 2^bits]. */
  readonly lut: Uint16Array;
  readonly groups: number;
  /** LUT tensor shape for constexpr_lut_to_dense: [groups, 1, …, 2^bits, 1]. */
  readonly lutShape: readonly number[];
  /** Per group: squared error, squared norm, largest absolute error (see reconstructionErrorOf). */
  readonly groupErrors: Float64Array;
}

export interface ReconstructionError {
  /** Mean squared error. */
  readonly mse: number;
  /** ‖W − Ŵ‖ / ‖W‖. */
  readonly relative: number;
  readonly maxAbs: number;
}

/** Below this many elements a tensor is clustered on the calling thread. */
const PARALLEL_THRESHOLD = 1 << 18;

/** The input as the kernel takes it: 16-bit patterns when the values allow, else fp32. */
function kmeansValues(input: PalettizeInput): KmeansValues {
  if (!(input instanceof Float32Array)) {
    return { format: input.dtype === "bf16" ? "bf16" : "fp16", bits: input.data };
  }
  const u32 = new Uint32Array(input.buffer, input.byteOffset, input.length);
  let bf16 = true;
  for (let i = 0; i < u32.length && bf16; i++) bf16 = (u32[i] & 0xffff) === 0;
  if (bf16) return { format: "bf16", bits: Uint16Array.from(u32, (b) => b >>> 16) };
  const h = new Uint16Array(input.length);
  for (let i = 0; i < input.length; i++) {
    h[i] = f32ToF16Bits(input[i]);
    if (!Object.is(f16BitsToF32(h[i]), input[i])) return { format: "fp32", values: input };
  }
  return { format: "fp16", bits: h };
}

/** The same values on shared memory, for the pool. */
function shared(v: KmeansValues): KmeansValues {
  if (v.format === "fp32") {
    const values = new Float32Array(new SharedArrayBuffer(v.values.byteLength));
    values.set(v.values);
    return { format: "fp32", values };
  }
  const bits = new Uint16Array(new SharedArrayBuffer(v.bits.byteLength));
  bits.set(v.bits);
  return { format: v.format, bits };
}

/**
 * Palettizes a weight whose first dimension is the output channel. Grouping runs along the
 * output channels: a group is `groupSize` consecutive rows.
 */
export async function palettize(
  weight: PalettizeInput,
  shape: readonly number[],
  options: PalettizeOptions,
): Promise<Palettized> {
  const { bits } = options;
  if (![2, 4, 6, 8].includes(bits))
    throw new InvalidArgumentError(`LUT bits must be 2, 4, 6 or 8, got ${bits}`);
  const n = weight instanceof Float32Array ? weight.length : weight.data.length;
  const dout = shape[0];
  const perRow = n / dout;
  if (!Number.isInteger(perRow) || shape.reduce((a, b) => a * b, 1) !== n) {
    throw new InvalidArgumentError(`weight of ${n} values does not match shape [${shape.join(", ")}]`);
  }
  const groupSize = options.perTensor ? dout : (options.groupSize ?? 8);
  if (groupSize <= 0 || dout % groupSize !== 0) {
    throw new InvalidArgumentError(`group size ${groupSize} must divide the ${dout} output channels`);
  }
  options.signal?.throwIfAborted();
  const k = 2 ** bits;
  const groups = dout / groupSize;
  const values = kmeansValues(weight);
  const parallel = options.workers !== 1 && n >= PARALLEL_THRESHOLD && groups > 1;
  const alloc = (bytes: number) => (parallel ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes));
  const task: KmeansTask = {
    values: parallel ? shared(values) : values,
    groupLen: groupSize * perRow,
    first: 0,
    end: groups,
    k,
    maxIterations: options.maxIterations ?? 300,
    indices: new Uint8Array(alloc(n)),
    lut: new Uint16Array(alloc(groups * k * 2)),
    stats: new Float64Array(alloc(groups * 3 * 8)),
  };
  try {
    if (parallel) await (options.pool ?? sharedKmeansPool()).run(task, options.signal);
    else kmeansGroups(task);
  } catch (e) {
    if (options.signal?.aborted) throw e;
    throw new InvalidArgumentError((e as Error).message, { cause: e });
  }
  const lutShape = [groups, ...shape.slice(1).map(() => 1), k, 1];
  return {
    bits,
    shape: [...shape],
    indices: task.indices,
    lut: task.lut,
    groups,
    lutShape,
    groupErrors: task.stats,
  };
}

/** Reconstruction error of a palettized weight from its per-group statistics (group order, so deterministic). */
export function reconstructionErrorOf(p: Pick<Palettized, "groupErrors" | "indices">): ReconstructionError {
  let se = 0;
  let norm = 0;
  let maxAbs = 0;
  const s = p.groupErrors;
  for (let g = 0; g < s.length; g += 3) {
    se += s[g];
    norm += s[g + 1];
    if (s[g + 2] > maxAbs) maxAbs = s[g + 2];
  }
  return { mse: se / p.indices.length, relative: Math.sqrt(se / (norm || 1)), maxAbs };
}

/** Expands a palettized weight back to fp32 values (what constexpr_lut_to_dense produces). */
export function depalettize(p: Palettized): Float32Array {
  const n = p.indices.length;
  const k = 2 ** p.bits;
  const groupLen = n / p.groups;
  const out = new Float32Array(n);
  const table = new Float32Array(p.lut.length);
  for (let i = 0; i < table.length; i++) table[i] = f16BitsToF32(p.lut[i]);
  for (let i = 0; i < n; i++) out[i] = table[Math.floor(i / groupLen) * k + p.indices[i]];
  return out;
}

export function reconstructionError(original: Float32Array, approx: Float32Array): ReconstructionError {
  let se = 0;
  let norm = 0;
  let maxAbs = 0;
  for (let i = 0; i < original.length; i++) {
    const d = original[i] - approx[i];
    se += d * d;
    norm += original[i] * original[i];
    const a = Math.abs(d);
    if (a > maxAbs) maxAbs = a;
  }
  return { mse: se / original.length, relative: Math.sqrt(se / (norm || 1)), maxAbs };
}

/** fp16 rounding of a whole array, for comparing LUT error against plain fp16 storage. */
export function roundArrayToF16(values: Float32Array): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f16BitsToF32(f32ToF16Bits(values[i]));
  return out;
}
