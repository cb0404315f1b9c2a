/**
 * The encoder: rows of a stored checkpoint tensor → the data of one weight constant, as its
 * planned encoding says — plain (the graph dtype), a k-means LUT (palettize.ts) or linear int8
 * (int8.ts) — with its reconstruction error. Rows are taken in chunks of whole LUT groups, as
 * stored (bf16/fp16 patterns) or converted to fp32, so a vocabulary-sized table never exists in
 * fp32 at once, except for a per-tensor LUT, whose k-means needs every value.
 */
import { createHash } from "node:crypto";
import { crc32 } from "node:zlib";
import { bf16BitsToF32, f16BitsToF32, fromFloat32, type Tensor, toFloat32 } from "@anemll-qwen35/core";
import { dequantizeInt8, quantizeInt8 } from "./int8.js";
import type { KmeansPool } from "./kmeans-pool.js";
import { palettize, type ReconstructionError, reconstructionErrorOf } from "./palettize.js";
import type { PlannedTensor, TensorEncoding } from "./plan.js";

/** One weight encoded for the graph: the constant data of its op, its shape and its error. */
export type EncodedWeight = {
  readonly shape: readonly number[];
  /** e.g. "fp16", "lut4,g8", "lut6,per-tensor", "int8,b128". */
  readonly encoding: string;
  /** Bits per weight element (index bits for LUTs, 8 for int8, 16/32 when plain). */
  readonly bits: number;
  readonly error: ReconstructionError;
} & (
  | {
      readonly kind: "lut";
      readonly indices: Uint8Array;
      /** fp16 bit patterns. */
      readonly lut: Uint16Array;
      readonly lutShape: readonly number[];
    }
  | {
      readonly kind: "int8";
      readonly data: Int8Array;
      /** fp16 bit patterns. */
      readonly scale: Uint16Array;
      readonly scaleShape: readonly number[];
    }
  | { readonly kind: "plain"; readonly data: Uint16Array | Float32Array }
);

/** Rows [start, end) of a stored matrix (first dimension: output channel) as a weight of shape [end − start, ...tail]. */
export interface RowRange {
  readonly start: number;
  readonly end: number;
  readonly tail: readonly number[];
}

export interface EncodeOptions {
  /** The graph dtype: what a plain weight is stored as. */
  readonly dtype: "fp16" | "fp32";
  /** 1 = k-means on the main thread only (default: the pool's workers). */
  readonly workers?: number;
  /** Worker pool for k-means (default: palettize's process-wide pool). */
  readonly pool?: KmeansPool;
  /** Rows are converted to fp32 about this many values at a time (default 16 Mi). */
  readonly chunkElements?: number;
  readonly signal?: AbortSignal;
}

/** Rows are converted to fp32 about this many values at a time, by default. */
const CHUNK_ELEMENTS = 1 << 24;

/** The values of rows [start, end) of a 2-D stored tensor as fp32 (exact for bf16/fp16). */
export function rowsFloat32(t: Tensor, start: number, end: number): Float32Array {
  const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return toFloat32(t.dtype, t.data.subarray(start * cols, end * cols) as Tensor["data"]);
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** Rows of a stored tensor as the encoders take them: 16-bit patterns as stored, or fp32 values. */
type StoredRows = Float32Array | { readonly dtype: "bf16" | "f16"; readonly data: Uint16Array };

const asFloat32 = (rows: StoredRows) =>
  rows instanceof Float32Array ? rows : toFloat32(rows.dtype, rows.data);

type LutEncoding = Extract<TensorEncoding, { kind: "lut" }>;
type Int8Encoding = Extract<TensorEncoding, { kind: "int8" }>;

/** Output rows of a range, and values per row. */
const extent = (r: RowRange) => ({ rows: r.end - r.start, cols: r.tail.reduce((a, b) => a * b, 1) });

/** Rows r of t in chunks of about chunkElements values, `align` rows at a time: as stored (bf16/fp16) or as fp32. */
async function forEachChunk(
  t: Tensor,
  r: RowRange,
  o: EncodeOptions,
  align: number,
  each: (first: number, count: number, values: StoredRows) => Promise<void> | void,
): Promise<void> {
  const { rows, cols } = extent(r);
  const stored16 = t.dtype === "bf16" || t.dtype === "f16";
  const budget = o.chunkElements ?? CHUNK_ELEMENTS;
  const step = Math.max(align, Math.floor(budget / cols / align) * align);
  for (let i = 0; i < rows; i += step) {
    o.signal?.throwIfAborted();
    const count = Math.min(step, rows - i);
    const a = (r.start + i) * cols;
    const values: StoredRows = stored16
      ? { dtype: t.dtype as "bf16" | "f16", data: (t.data as Uint16Array).subarray(a, a + count * cols) }
      : rowsFloat32(t, r.start + i, r.start + i + count);
    await each(i, count, values);
  }
}

/** Encodes rows `r` of `t` as `tensor`'s plan says (no graph op yet). */
export async function encodeWeight(
  t: Tensor,
  r: RowRange,
  tensor: PlannedTensor,
  o: EncodeOptions,
): Promise<EncodedWeight> {
  const e = tensor.encoding;
  if (e.kind === "lut") return encodeLut(t, r, e, o);
  if (e.kind === "int8") return encodeInt8(t, r, e, o);
  return encodePlain(t, r, o);
}

/** k-means LUT, group by group (palettize.ts). */
async function encodeLut(t: Tensor, r: RowRange, e: LutEncoding, o: EncodeOptions): Promise<EncodedWeight> {
  const { rows, cols } = extent(r);
  // a group must divide the output channels: tiny projections (Hv rows) get gcd(rows, group)
  const groupSize = e.perTensor ? rows : gcd(rows, e.groupSize);
  const k = 2 ** e.bits;
  const groups = rows / groupSize;
  const indices = new Uint8Array(rows * cols);
  const lut = new Uint16Array(groups * k);
  const groupErrors = new Float64Array(groups * 3);
  let lutShape: readonly number[] = [];
  await forEachChunk(t, r, o, groupSize, async (first, count, values) => {
    const p = await palettize(values, [count, ...r.tail], {
      bits: e.bits,
      groupSize,
      workers: o.workers,
      pool: o.pool,
      signal: o.signal,
    });
    indices.set(p.indices, first * cols);
    lut.set(p.lut, (first / groupSize) * k);
    groupErrors.set(p.groupErrors, (first / groupSize) * 3);
    lutShape = [groups, ...p.lutShape.slice(1)];
  });
  return {
    kind: "lut",
    shape: [rows, ...r.tail],
    indices,
    lut,
    lutShape,
    bits: e.bits,
    encoding: e.perTensor ? `lut${e.bits},per-tensor` : `lut${e.bits},g${groupSize}`,
    error: reconstructionErrorOf({ groupErrors, indices }),
  };
}

/** Linear int8, one fp16 scale per output channel and block (int8.ts). */
async function encodeInt8(t: Tensor, r: RowRange, e: Int8Encoding, o: EncodeOptions): Promise<EncodedWeight> {
  const { rows, cols } = extent(r);
  const err = new ErrorSum();
  const blockSize = e.blockSize ?? r.tail[0];
  const blocks = r.tail[0] / blockSize;
  const data = new Int8Array(rows * cols);
  const scale = new Uint16Array(rows * blocks);
  await forEachChunk(t, r, o, 1, (first, count, stored) => {
    const values = asFloat32(stored);
    const qi = quantizeInt8(values, [count, ...r.tail], blockSize);
    data.set(qi.data, first * cols);
    scale.set(qi.scale, first * blocks);
    err.add(values, dequantizeInt8(qi));
  });
  return {
    kind: "int8",
    shape: [rows, ...r.tail],
    data,
    scale,
    scaleShape: [rows, blocks, ...r.tail.slice(1)],
    bits: 8,
    encoding: `int8,b${blockSize}`,
    error: err.result(rows * cols),
  };
}

/** Plain, in the graph dtype: bf16 → fp16 through a table, fp32 rounded to fp16 in bulk. */
async function encodePlain(t: Tensor, r: RowRange, o: EncodeOptions): Promise<EncodedWeight> {
  const { rows, cols } = extent(r);
  const err = new ErrorSum();
  const fp16 = o.dtype === "fp16";
  const out = fp16 ? new Uint16Array(rows * cols) : new Float32Array(rows * cols);
  await forEachChunk(t, r, o, 1, (first, _count, stored) => {
    if (out instanceof Float32Array) {
      out.set(asFloat32(stored), first * cols);
    } else if (stored instanceof Float32Array) {
      const bits = fromFloat32("f16", stored); // bulk, integer-only conversions
      out.set(bits, first * cols);
      err.add(stored, toFloat32("f16", bits));
    } else if (stored.dtype === "f16") {
      out.set(stored.data, first * cols);
    } else {
      bf16ToF16(stored.data, out.subarray(first * cols), err);
    }
  });
  return {
    kind: "plain",
    shape: [rows, ...r.tail],
    data: out,
    bits: fp16 ? 16 : 32,
    encoding: o.dtype,
    error: err.result(rows * cols),
  };
}

/**
 * What a k-means result depends on, for reusing it after an interruption: the weight's name, the
 * tensor's stored rows (by checksum), the encoding and the graph dtype.
 */
export function encodedWeightKey(
  t: Tensor,
  r: RowRange,
  tensor: PlannedTensor,
  name: string,
  dtype: "fp16" | "fp32",
): string {
  const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
  const d = t.data as Exclude<Tensor["data"], BigInt64Array>;
  const rows = d.subarray(r.start * cols, r.end * cols);
  const stored = crc32(new Uint8Array(rows.buffer, rows.byteOffset, rows.byteLength));
  const { start, end, tail } = r;
  const groupSize = tensor.encoding.kind === "lut" ? tensor.encoding.groupSize : 0;
  return createHash("sha256")
    .update(
      JSON.stringify({
        name,
        dtype: t.dtype,
        shape: t.shape,
        start,
        end,
        tail,
        q: tensor.quant,
        groupSize,
        graph: dtype,
        stored,
      }),
    )
    .digest("hex");
}

/** Running reconstruction error over chunks. */
class ErrorSum {
  private se = 0;
  private norm = 0;
  private maxAbs = 0;

  add(original: Float32Array, approx: Float32Array): void {
    for (let i = 0; i < original.length; i++) this.addRepeated(original[i], approx[i], 1);
  }

  /** `count` elements of value `original` stored as `approx`. */
  addRepeated(original: number, approx: number, count: number): void {
    const d = original - approx;
    this.se += count * d * d;
    this.norm += count * original * original;
    if (Math.abs(d) > this.maxAbs) this.maxAbs = Math.abs(d);
  }

  result(n: number): ReconstructionError {
    return { mse: this.se / n, relative: Math.sqrt(this.se / (this.norm || 1)), maxAbs: this.maxAbs };
  }
}

let bf16ToF16Table: Uint16Array | undefined;

/**
 * bf16 patterns → fp16 patterns (round to nearest even, as fromFloat32 does) through a 64 Ki
 * table, with the rounding error summed over the patterns' histogram rather than per element.
 */
function bf16ToF16(src: Uint16Array, out: Uint16Array, err: ErrorSum): void {
  if (!bf16ToF16Table) {
    const f32 = new Float32Array(65536);
    const u32 = new Uint32Array(f32.buffer);
    for (let i = 0; i < 65536; i++) u32[i] = i << 16;
    bf16ToF16Table = fromFloat32("f16", f32);
  }
  const table = bf16ToF16Table;
  const count = new Uint32Array(65536);
  for (let i = 0; i < src.length; i++) {
    const b = src[i];
    out[i] = table[b];
    count[b] += 1;
  }
  for (let b = 0; b < 65536; b++) {
    if (count[b] > 0) err.addRepeated(bf16BitsToF32(b), f16BitsToF32(table[b]), count[b]);
  }
}
