/**
 * Runtime values of the MIL layer and conversions between the stored form of constants
 * (`MilData`, per MIL dtype) and the compute form that op evaluation works on.
 *
 * Compute form (`RtTensor.data`), chosen so that every op has one kernel per kind of number:
 *   float dtypes (fp16, fp32, bf16, fp64) -> Float32Array  (fp16 values are exact in fp32)
 *   integer dtypes (int4..int64, uint1..uint32) -> Int32Array
 *   bool -> Uint8Array (0/1) · string -> string[]
 */
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  InvalidArgumentError,
} from "@anemll-qwen35/core";
import type { PackedWeight, RowReader } from "./kernels/packed.js";
import { allocWeightF32, simdHeap } from "./kernels/simd.js";
import type { ConstValue, MilData, MilDType, TensorType } from "./program.js";
import { tensorType } from "./program.js";

export type RtData = Float32Array | Int32Array | Uint8Array | string[];

/** A runtime tensor: a static type and its values in compute form. Treated as immutable. */
export interface RtTensor {
  readonly type: TensorType;
  readonly data: RtData;
  /**
   * Large constants only: the values by row (index along dim 0), read without decoding the
   * rest — a table read from its file, or a packed weight. `data` then decodes everything once.
   */
  readonly rows?: RowReader;
  /** A weight kept compressed in a SIMD heap; matrix products use it through gemmNT. */
  readonly packed?: PackedWeight;
}

export const FLOAT_DTYPES: readonly MilDType[] = ["fp16", "fp32", "bf16", "fp64"];
export const INT_DTYPES: readonly MilDType[] = [
  "int4",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint1",
  "uint2",
  "uint3",
  "uint4",
  "uint6",
  "uint8",
  "uint16",
  "uint32",
];

export function isFloatDType(d: MilDType): boolean {
  return d === "fp16" || d === "fp32" || d === "bf16" || d === "fp64";
}

export function isIntDType(d: MilDType): boolean {
  return INT_DTYPES.includes(d);
}

export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/**
 * Allocates compute-form storage for `type`: zeroed, unless `zero` is false (the caller writes
 * every element). While a run holds the buffer pool, a free buffer of that size is reused.
 */
export function allocRt(type: TensorType, zero = true): RtData {
  const n = numelOf(type.shape);
  if (type.dtype === "string") return new Array<string>(n).fill("");
  const kind = isFloatDType(type.dtype) ? 0 : type.dtype === "bool" ? 1 : 2;
  if (activePool) return activePool.take(kind, n, zero);
  return kind === 0 ? new Float32Array(n) : kind === 1 ? new Uint8Array(n) : new Int32Array(n);
}

/** A Float32Array of n zeros (n values when `zero` is false), from the pool while a run holds it. */
export function allocF32(n: number, zero = true): Float32Array {
  return activePool ? (activePool.take(0, n, zero) as Float32Array) : new Float32Array(n);
}

/** Gives an op's scratch array from allocF32 back to the pool (nothing may read it afterwards). */
export function freeF32(a: Float32Array): void {
  activePool?.release(a);
}

type PooledArray = Float32Array | Int32Array | Uint8Array;

/** Float buffers at least this long are made in the SIMD heap, where SIMD elementwise kernels run. */
const HEAP_POOL_MIN_ELEMENTS = 1024;

/**
 * Op result buffers recycled by the interpreter. A fresh typed array of a few MB costs page
 * faults and garbage collection on every op (the decode of a 0.8B chain makes ~150 of them a
 * token); the interpreter hands a buffer back after the last op that reads it, and the next
 * allocation of that kind and size takes it (what a run writes to a state is copied out).
 * Pooled arrays are known by identity, so an op's result must be a new array or one of its
 * inputs' arrays itself, never a subarray view of one.
 */
export class BufferPool {
  private readonly free = new Map<number, PooledArray[]>();
  /** Arrays this pool made that it may still reuse. */
  private readonly mine = new WeakSet<PooledArray>();
  private readonly isFree = new WeakSet<PooledArray>();
  private freeBytes = 0;

  constructor(
    /** Bytes of free buffers kept at most (more are left to the garbage collector). */
    readonly maxFreeBytes: number,
  ) {}

  take(kind: 0 | 1 | 2, n: number, zero: boolean): PooledArray {
    const list = this.free.get(n * 3 + kind);
    const reused = list?.pop();
    if (reused) {
      this.isFree.delete(reused);
      this.freeBytes -= reused.byteLength;
      if (zero) reused.fill(0);
      return reused;
    }
    const a =
      kind === 0
        ? ((n >= HEAP_POOL_MIN_ELEMENTS ? simdHeap()?.f32(n) : undefined) ?? new Float32Array(n))
        : kind === 1
          ? new Uint8Array(n)
          : new Int32Array(n);
    this.mine.add(a);
    return a;
  }

  /** Whether `data` is an array this pool made. */
  owns(data: RtData): boolean {
    return !Array.isArray(data) && this.mine.has(data);
  }

  /** Returns a pool-made array for reuse (anything else is ignored). */
  release(a: RtData): void {
    if (Array.isArray(a) || !this.mine.has(a) || this.isFree.has(a)) return;
    if (this.freeBytes + a.byteLength > this.maxFreeBytes) return;
    const kind = a instanceof Float32Array ? 0 : a instanceof Uint8Array ? 1 : 2;
    const key = a.length * 3 + kind;
    let list = this.free.get(key);
    if (!list) {
      list = [];
      this.free.set(key, list);
    }
    list.push(a);
    this.isFree.add(a);
    this.freeBytes += a.byteLength;
  }
}

let activePool: BufferPool | undefined;

/** Makes `pool` the one allocRt takes from (undefined: none); returns the previous one. */
export function usePool(pool: BufferPool | undefined): BufferPool | undefined {
  const prev = activePool;
  activePool = pool;
  return prev;
}

export function rt(type: TensorType, data: RtData): RtTensor {
  return { type, data };
}

/** A zero-filled runtime tensor of `type`. */
export function zerosRt(type: TensorType): RtTensor {
  return { type, data: allocRt(type) };
}

let F16_TO_F32: Float32Array | undefined;
/** fp16 bit pattern -> fp32 value table (256 KiB, built on first use). */
export function f16Table(): Float32Array {
  if (!F16_TO_F32) {
    F16_TO_F32 = new Float32Array(65536);
    for (let i = 0; i < 65536; i++) F16_TO_F32[i] = f16BitsToF32(i);
  }
  return F16_TO_F32;
}

/** Converts stored constant data to compute form. fp32 / int32 / bool data are used as is (no copy). */
export function milDataToRt(type: TensorType, data: MilData): RtData {
  const n = numelOf(type.shape);
  if (data.length !== n) {
    throw new InvalidArgumentError(`${typeStr(type)} needs ${n} values, got ${data.length}`);
  }
  switch (type.dtype) {
    case "fp32":
      return data instanceof Float32Array ? data : Float32Array.from(data as ArrayLike<number>);
    case "fp16": {
      // large fp16 constants are weights: decode them straight into the SIMD heap
      const src = data as Uint16Array;
      const t = f16Table();
      const out = allocWeightF32(n);
      for (let i = 0; i < n; i++) out[i] = t[src[i]];
      return out;
    }
    case "bf16": {
      const src = data as Uint16Array;
      const out = allocWeightF32(n);
      const u = new Uint32Array(out.buffer, out.byteOffset, n);
      for (let i = 0; i < n; i++) u[i] = src[i] << 16;
      return out;
    }
    case "fp64":
      return Float32Array.from(data as Float64Array);
    case "int32":
      return data instanceof Int32Array ? data : Int32Array.from(data as ArrayLike<number>);
    case "int64": {
      const src = data as BigInt64Array;
      const out = new Int32Array(n);
      for (let i = 0; i < n; i++) {
        const v = Number(src[i]);
        if (v > 2147483647 || v < -2147483648) {
          throw new InvalidArgumentError(
            `int64 value ${src[i]} does not fit the interpreter's int32 compute type`,
          );
        }
        out[i] = v;
      }
      return out;
    }
    case "bool":
      return data instanceof Uint8Array ? data : Uint8Array.from(data as ArrayLike<number>);
    case "string":
      return data as string[];
    default:
      return Int32Array.from(data as ArrayLike<number>);
  }
}

/** Materialises a constant (inline data, or a blob through its loader) in compute form. */
export function constToRt(cv: ConstValue): RtTensor {
  return { type: cv.type, data: milDataToRt(cv.type, constData(cv)) };
}

/** Float tables read by row from their file rather than loaded whole: at least this many values. */
export const LAZY_TABLE_MIN_ELEMENTS = 1 << 16;

/**
 * Like constToRt, but a large float constant stored in a weight file stays there: `rows` reads
 * the rows asked for (an embedding lookup reads one row per token), `data` loads it all once.
 */
export function lazyConstToRt(cv: ConstValue): RtTensor {
  const { type } = cv;
  const readBytes = "blob" in cv ? cv.readBytes : undefined;
  const size = type.dtype === "fp32" ? 4 : type.dtype === "fp16" || type.dtype === "bf16" ? 2 : 0;
  const n = numelOf(type.shape);
  if (!readBytes || size === 0 || type.shape.length < 2 || n < LAZY_TABLE_MIN_ELEMENTS) return constToRt(cv);
  const cols = n / type.shape[0];
  let data: RtData | undefined;
  const rows: RowReader = {
    readRows(first, count, into, at = 0) {
      const bytes = new Uint8Array(count * cols * size);
      readBytes(bytes, first * cols * size);
      const m = count * cols;
      if (size === 4) into.set(new Float32Array(bytes.buffer), at);
      else if (type.dtype === "fp16") {
        const t = f16Table();
        const src = new Uint16Array(bytes.buffer);
        for (let i = 0; i < m; i++) into[at + i] = t[src[i]];
      } else {
        const src = new Uint16Array(bytes.buffer);
        const u = new Uint32Array(into.buffer, into.byteOffset + at * 4, m);
        for (let i = 0; i < m; i++) u[i] = src[i] << 16;
      }
    },
  };
  return {
    type,
    rows,
    get data() {
      data ??= milDataToRt(type, constData(cv));
      return data;
    },
  };
}

/** The stored data of a constant; loads blobs through `load`. */
export function constData(cv: ConstValue): MilData {
  if ("data" in cv) return cv.data;
  if (cv.load) return cv.load();
  throw new InvalidArgumentError(
    `constant ${typeStr(cv.type)} lives in ${cv.blob.fileName}@${cv.blob.offset} and has no loader ` +
      "(programs built with a BlobSink can be run once written and read back)",
  );
}

const INT_RANGES: Partial<Record<MilDType, [number, number]>> = {
  int4: [-8, 7],
  int8: [-128, 127],
  int16: [-32768, 32767],
  int32: [-2147483648, 2147483647],
  uint1: [0, 1],
  uint2: [0, 3],
  uint3: [0, 7],
  uint4: [0, 15],
  uint6: [0, 63],
  uint8: [0, 255],
  uint16: [0, 65535],
  uint32: [0, 4294967295],
  bool: [0, 1],
};

/**
 * Converts plain values to stored `MilData` for `dtype`: numbers/booleans/typed arrays are
 * converted (fp16/bf16 rounded to nearest even); a Uint16Array for fp16/bf16 is taken as bit patterns.
 */
export function toMilData(
  dtype: MilDType,
  values: ArrayLike<number> | ArrayLike<boolean> | readonly string[] | MilData,
): MilData {
  const n = values.length;
  const get = (i: number): number => {
    const v = (values as ArrayLike<number | boolean | bigint>)[i];
    return typeof v === "boolean" ? (v ? 1 : 0) : Number(v);
  };
  const checkInts = (out: { [i: number]: number }, lo: number, hi: number): void => {
    for (let i = 0; i < n; i++) {
      const v = get(i);
      if (!Number.isInteger(v) || v < lo || v > hi) {
        throw new InvalidArgumentError(
          `value ${v} at index ${i} is not a valid ${dtype} (integers ${lo}..${hi})`,
        );
      }
      out[i] = v;
    }
  };
  switch (dtype) {
    case "string": {
      const out: string[] = [];
      for (let i = 0; i < n; i++) out.push(String((values as ArrayLike<unknown>)[i]));
      return out;
    }
    case "fp32":
      if (values instanceof Float32Array) return values;
      return Float32Array.from({ length: n }, (_, i) => get(i));
    case "fp64":
      return Float64Array.from({ length: n }, (_, i) => get(i));
    case "fp16":
    case "bf16": {
      if (values instanceof Uint16Array) return values;
      const out = new Uint16Array(n);
      const conv = dtype === "fp16" ? f32ToF16Bits : f32ToBf16Bits;
      for (let i = 0; i < n; i++) out[i] = conv(get(i));
      return out;
    }
    case "int64": {
      if (values instanceof BigInt64Array) return values;
      const out = new BigInt64Array(n);
      for (let i = 0; i < n; i++) {
        const v = get(i);
        if (!Number.isInteger(v))
          throw new InvalidArgumentError(`value ${v} at index ${i} is not a valid int64`);
        out[i] = BigInt(v);
      }
      return out;
    }
    default: {
      const [lo, hi] = INT_RANGES[dtype] ?? [0, 0];
      // data already in its storage class is range-checked and kept, as fp32/fp16 data are
      // (LUT indices and int8 weights run to hundreds of millions of elements)
      const int8 = dtype === "int8" || dtype === "int4";
      if ((values instanceof Uint8Array && !int8 && hi <= 255) || (values instanceof Int8Array && int8)) {
        let min = 0;
        let max = 0;
        for (let i = 0; i < n; i++) {
          const v = values[i];
          if (v < min) min = v;
          if (v > max) max = v;
        }
        if (min < lo || max > hi) {
          const i = values.findIndex((v) => v < lo || v > hi);
          throw new InvalidArgumentError(
            `value ${values[i]} at index ${i} is not a valid ${dtype} (integers ${lo}..${hi})`,
          );
        }
        return values;
      }
      let out: Int32Array | Int16Array | Int8Array | Uint8Array | Uint16Array | Uint32Array;
      if (dtype === "int32") out = new Int32Array(n);
      else if (dtype === "int16") out = new Int16Array(n);
      else if (int8) out = new Int8Array(n);
      else if (dtype === "uint16") out = new Uint16Array(n);
      else if (dtype === "uint32") out = new Uint32Array(n);
      else out = new Uint8Array(n);
      checkInts(out, lo, hi);
      return out;
    }
  }
}

/** fp32 value of a stored element (for printing and small reads). */
export function milDataValue(dtype: MilDType, data: MilData, i: number): number | string | boolean {
  if (dtype === "string") return (data as string[])[i];
  if (dtype === "fp16") return f16BitsToF32((data as Uint16Array)[i]);
  if (dtype === "bf16") return bf16BitsToF32((data as Uint16Array)[i]);
  if (dtype === "bool") return (data as Uint8Array)[i] !== 0;
  const v = (data as ArrayLike<number | bigint>)[i];
  return typeof v === "bigint" ? Number(v) : v;
}

/** Converts a compute-form tensor back to stored `MilData` of its dtype. */
export function rtToMilData(t: RtTensor): MilData {
  const { dtype } = t.type;
  if (dtype === "string") return t.data as string[];
  if (dtype === "fp32") return t.data as Float32Array;
  if (dtype === "int32") return t.data as Int32Array;
  if (dtype === "bool") return t.data as Uint8Array;
  return toMilData(dtype, t.data as ArrayLike<number>);
}

/** A scalar or 1-D literal constant (used for default inputs and builder literals). */
export function literal(
  dtype: MilDType,
  values: number | boolean | string | readonly (number | boolean)[],
): ConstValue {
  if (typeof values === "string") return { type: tensorType("string", []), data: [values] };
  const arr = Array.isArray(values) ? values : [values];
  const shape = Array.isArray(values) ? [arr.length] : [];
  return { type: tensorType(dtype, shape), data: toMilData(dtype, arr as ArrayLike<number>) };
}

function typeStr(t: TensorType): string {
  return `tensor<${t.dtype}, [${t.shape.join(", ")}]>`;
}
