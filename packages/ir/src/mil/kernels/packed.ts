/**
 * Compressed constant weights kept compressed: LUT indices (1–8 bits, re-packed to nibbles for
 * 1–4 bits and to bytes for 6 and 8) with their palettes, or int8/uint8 blocks with their scales,
 * stored in a SIMD heap and decoded by the kernels of packed-kernels.ts where they are used.
 * A weight costs its stored bytes (plus ~1% of palettes or scales) instead of 4 bytes a value.
 */
import { SUB_BYTE_BITS } from "../format/dtypes.js";
import { unpackSubByte } from "../format/elements.js";
import type { MilDType } from "../program.js";
import { DESC, DESC_BYTES, formatName, lutTabStride, type PackedFormat } from "./packed-kernels.js";
import { allocAnyHeap, allocWeightF32, KERNEL_INDEX, type WasmHeap } from "./simd.js";

/** Reads payload bytes [byteOffset, byteOffset + into.length) of a stored value into `into`. */
export type ByteSource = (into: Uint8Array, byteOffset: number) => void;

/** Values by row: what gather needs of a large constant table. */
export interface RowReader {
  /** Writes the fp32 values of rows [first, first + count) (row = index along dim 0) to into[at…]. */
  readRows(first: number, count: number, into: Float32Array, at?: number): void;
}

/** Decoded rows per `_mm` block: about this many bytes. */
const BLOCK_BYTES = 64 << 10;
/** Source bytes read at a time while packing (bounds the transient memory of loading). */
const CHUNK_BYTES = 16 << 20;

export interface LutSource {
  readonly rows: number;
  /** Values per row (a multiple of 16). */
  readonly cols: number;
  /** Index dtype: uint1 … uint8. */
  readonly indexDType: MilDType;
  /** Packed index bytes as stored (LSB first). */
  readonly indices: ByteSource;
  /** Palettes, one per group of rows (rows / groups each), 2^bits fp32 values each, already rounded. */
  readonly lut: Float32Array;
  readonly groups: number;
}

export interface Int8Source {
  readonly rows: number;
  readonly cols: number;
  readonly signed: boolean;
  /** One byte per value. */
  readonly data: ByteSource;
  /** Scales [rowBlocks, blocks] as fp32 values; blocks split each row into equal runs (multiples of 16). */
  readonly scale: Float32Array;
  readonly rowBlocks: number;
  readonly blocks: number;
  /** Offsets like scale (subtracted before scaling), when present. */
  readonly offset?: Float64Array;
  /** Round each value to fp16 (the output dtype is fp16), flushing subnormals or not. */
  readonly round: "none" | "f16" | "f16-flush";
}

/** Index layout and palette lookup the kernels use for `bits`-bit indices over `lut`. */
function lutFormat(bits: number, lut: Float32Array): PackedFormat & { kind: "lut" } {
  const bytes = new Uint8Array(lut.buffer, lut.byteOffset, lut.byteLength);
  let lowBytesZero = true;
  for (let i = 0; i < bytes.length && lowBytesZero; i += 4) lowBytesZero = bytes[i] === 0;
  const planes = lowBytesZero ? 3 : 4;
  if (bits <= 4) return { kind: "lut", layout: "nibble", entries: 16, planes };
  if (bits <= 6) return { kind: "lut", layout: "byte", entries: 64, planes };
  return { kind: "lut", layout: "byte", entries: 256, planes: 4 };
}

const align64 = (n: number) => Math.ceil(n / 64) * 64;

/**
 * `count` packed `bits`-bit indices (LSB first) into the kernels' layout: bytes for 6 bits,
 * nibbles (two a byte, low first) for 1–3 bits. The common widths have their own loops.
 */
function repack(dtype: MilDType, bits: number, raw: Uint8Array, dst: Uint8Array, count: number): void {
  if (bits === 6) {
    for (let i = 0, j = 0; j < count; i += 3, j += 4) {
      const b0 = raw[i];
      const b1 = raw[i + 1];
      const b2 = raw[i + 2];
      dst[j] = b0 & 63;
      dst[j + 1] = (b0 >> 6) | ((b1 & 15) << 2);
      dst[j + 2] = (b1 >> 4) | ((b2 & 3) << 4);
      dst[j + 3] = b2 >> 2;
    }
  } else if (bits === 2) {
    for (let i = 0, j = 0; j < count / 2; i++, j += 2) {
      const b = raw[i];
      dst[j] = (b & 3) | (((b >> 2) & 3) << 4);
      dst[j + 1] = ((b >> 4) & 3) | ((b >> 6) << 4);
    }
  } else {
    const v = unpackSubByte(dtype, raw, count);
    for (let i = 0; i < count / 2; i++) dst[i] = v[2 * i] | (v[2 * i + 1] << 4);
  }
}

/** A weight matrix [rows, cols] (row = output channel) in its compressed form, in a SIMD heap. */
export class PackedWeight implements RowReader {
  private denseValues: Float32Array | undefined;
  private readonly mv: number;
  private readonly dec: number;
  private readonly mm: number;

  private constructor(
    readonly heap: WasmHeap,
    /** Descriptor offset (the block's start). */
    private readonly desc: number,
    readonly format: PackedFormat,
    readonly rows: number,
    readonly cols: number,
  ) {
    const name = formatName(format);
    this.mv = KERNEL_INDEX.get(`${name}_mv`) as number;
    this.dec = KERNEL_INDEX.get(`${name}_dec`) as number;
    this.mm = KERNEL_INDEX.get(`${name}_mm`) as number;
    heap.releaseWith(this, desc);
  }

  /** Whether a [rows, cols] weight can be packed: SIMD chunks of 16 values, enough work. */
  static fits(rows: number, cols: number): boolean {
    return cols % 16 === 0 && rows >= 4 && rows * cols >= 4096;
  }

  /** Packs a LUT weight; undefined when no heap has room (the caller expands it instead). */
  static lut(s: LutSource): PackedWeight | undefined {
    const bits = SUB_BYTE_BITS[s.indexDType] ?? (s.indexDType === "uint8" ? 8 : undefined);
    if (bits === undefined) return undefined;
    const fmt = lutFormat(bits, s.lut);
    const { rows, cols } = s;
    const rowBytes = fmt.layout === "nibble" ? cols / 2 : cols;
    const stride = lutTabStride(fmt);
    const tabAt = DESC_BYTES;
    const srcAt = tabAt + align64(s.groups * stride);
    const total = srcAt + rows * rowBytes;
    const where = allocAnyHeap(total);
    if (!where) return undefined;
    const { heap, off } = where;
    const w = new PackedWeight(heap, off, fmt, rows, cols);
    // palettes: byte planes for swizzle lookups, or plain fp32 entries (7/8-bit indices)
    const entries = 2 ** bits;
    const tab = heap.bytesAt(off + tabAt, s.groups * stride);
    tab.fill(0);
    const lutBytes = new Uint8Array(s.lut.buffer, s.lut.byteOffset, s.lut.byteLength);
    for (let g = 0; g < s.groups; g++) {
      for (let e = 0; e < entries; e++) {
        const v = (g * entries + e) * 4;
        if (stride === 1024) tab.set(lutBytes.subarray(v, v + 4), g * stride + e * 4);
        else
          for (let p = 0; p < 4; p++) tab[g * stride + (e >> 4) * 64 + p * 16 + (e & 15)] = lutBytes[v + p];
      }
    }
    // indices, a slice of rows at a time
    const srcBytesPerRow = (cols * bits) / 8;
    const step = Math.max(1, Math.floor(CHUNK_BYTES / srcBytesPerRow));
    for (let r = 0; r < rows; r += step) {
      const n = Math.min(step, rows - r);
      const dst = heap.bytesAt(off + srcAt + r * rowBytes, n * rowBytes);
      if (bits === 4 || bits === 8) {
        s.indices(dst, r * srcBytesPerRow); // stored layout = kernel layout
        continue;
      }
      const raw = new Uint8Array(n * srcBytesPerRow);
      s.indices(raw, r * srcBytesPerRow);
      repack(s.indexDType, bits, raw, dst, n * cols);
    }
    w.writeDesc({
      src: off + srcAt,
      tab: off + tabAt,
      off: 0,
      rowBytes,
      groupRows: rows / s.groups,
      tabStride: stride,
      blocks: 1,
      block: cols,
    });
    return w;
  }

  /** Packs an int8 / uint8 blockwise weight; undefined when no heap has room. */
  static int8(s: Int8Source): PackedWeight | undefined {
    const { rows, cols } = s;
    const fmt: PackedFormat = {
      kind: "int8",
      signed: s.signed,
      offset: s.offset !== undefined,
      round: s.round,
    };
    const nScales = s.rowBlocks * s.blocks;
    const scaleAt = DESC_BYTES;
    const offAt = scaleAt + align64(nScales * 4);
    const srcAt = offAt + (s.offset ? align64(nScales * 8) : 0);
    const total = srcAt + rows * cols;
    const where = allocAnyHeap(total);
    if (!where) return undefined;
    const { heap, off } = where;
    const w = new PackedWeight(heap, off, fmt, rows, cols);
    heap.view(off + scaleAt, nScales).set(s.scale);
    if (s.offset) new Float64Array(heap.memory.buffer, off + offAt, nScales).set(s.offset);
    const step = Math.max(1, Math.floor(CHUNK_BYTES / cols));
    for (let r = 0; r < rows; r += step) {
      const n = Math.min(step, rows - r);
      s.data(heap.bytesAt(off + srcAt + r * cols, n * cols), r * cols);
    }
    w.writeDesc({
      src: off + srcAt,
      tab: off + scaleAt,
      off: s.offset ? off + offAt : 0,
      rowBytes: cols,
      groupRows: rows / s.rowBlocks,
      tabStride: s.blocks * 4,
      blocks: s.blocks,
      block: cols / s.blocks,
    });
    return w;
  }

  private writeDesc(fields: Partial<Record<keyof typeof DESC, number>>): void {
    const v = new Int32Array(this.heap.memory.buffer, this.desc, DESC_BYTES / 4);
    v.fill(0);
    const all = { ...fields, K: this.cols, blockRows: this.blockRows };
    for (const [k, value] of Object.entries(all)) v[DESC[k as keyof typeof DESC] / 4] = value;
  }

  /** Rows `_mm` decodes at a time (a multiple of 4). */
  private get blockRows(): number {
    return Math.max(4, Math.floor(BLOCK_BYTES / (this.cols * 4)) & ~3);
  }

  readRows(first: number, count: number, into: Float32Array, at = 0): void {
    const K = this.cols;
    const per = Math.max(1, Math.floor((1 << 20) / (K * 4)));
    for (let r = first; r < first + count; r += per) {
      const n = Math.min(per, first + count - r);
      const s = this.heap.rowScratchFor(0, n * K * 4);
      if (s === undefined) throw new RangeError("out of SIMD heap memory while decoding weight rows");
      this.heap.fns[this.dec](this.desc, 0, 0, 1, 0, s, r, r + n);
      into.set(this.heap.view(s, n * K), at + (r - first) * K);
    }
  }

  /**
   * out[m·N + n] = Σ_k x[m·K + k] · w[n][k] for n in [0, n4) (n4 a multiple of 4), with the bits
   * of the dense kernel on the expanded weight. false when the heap has no room for the
   * inputs and outputs (the caller falls back to the expanded weight).
   */
  product(x: Float32Array, out: Float32Array, M: number, N: number, n4: number): boolean {
    const h = this.heap;
    const K = this.cols;
    const xOff = h.xScratch.ensure(h, M * K * 4);
    const oOff = h.outScratch.ensure(h, M * N * 4);
    if (xOff === undefined || oOff === undefined) return false;
    const scratch: number[] = [];
    if (M > 1) {
      for (let t = 0; t < h.threads; t++) {
        const s = h.rowScratchFor(t, this.blockRows * K * 4);
        if (s === undefined) return false;
        scratch.push(s);
      }
    }
    h.view(xOff, M * K).set(x.subarray(0, M * K));
    const fn = M === 1 ? this.mv : this.mm;
    h.rows(fn, n4, n4 * K, (t) => [this.desc, xOff, oOff, M, N * 4, M === 1 ? 0 : scratch[t]]);
    const o = h.view(oOff, M * N);
    if (n4 === N) out.set(o);
    else for (let r = 0; r < M; r++) out.set(o.subarray(r * N, r * N + n4), r * N);
    return true;
  }

  /** All values, decoded once and kept (for ops that have no packed kernel). */
  dense(): Float32Array {
    if (!this.denseValues) {
      const d = allocWeightF32(this.rows * this.cols);
      this.readRows(0, this.rows, d);
      this.denseValues = d;
    }
    return this.denseValues;
  }
}
