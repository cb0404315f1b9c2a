import { InvalidArgumentError } from "./errors.js";

/** Element types of checkpoint and runtime tensors. */
export type DType = "f32" | "f16" | "bf16" | "i8" | "u8" | "i16" | "i32" | "i64" | "bool";

/** Typed storage per dtype. f16 and bf16 are stored as raw 16-bit patterns. */
export interface StorageOf {
  f32: Float32Array;
  f16: Uint16Array;
  bf16: Uint16Array;
  i8: Int8Array;
  u8: Uint8Array;
  i16: Int16Array;
  i32: Int32Array;
  i64: BigInt64Array;
  bool: Uint8Array;
}
export type Storage = StorageOf[DType];

export const BYTES_PER_ELEMENT: Readonly<Record<DType, number>> = {
  f32: 4,
  f16: 2,
  bf16: 2,
  i8: 1,
  u8: 1,
  i16: 2,
  i32: 4,
  i64: 8,
  bool: 1,
};

/** Allocates zeroed storage for `n` elements. */
export function allocStorage<D extends DType>(dtype: D, n: number): StorageOf[D] {
  switch (dtype) {
    case "f32":
      return new Float32Array(n) as StorageOf[D];
    case "f16":
    case "bf16":
      return new Uint16Array(n) as StorageOf[D];
    case "i8":
      return new Int8Array(n) as StorageOf[D];
    case "u8":
    case "bool":
      return new Uint8Array(n) as StorageOf[D];
    case "i16":
      return new Int16Array(n) as StorageOf[D];
    case "i32":
      return new Int32Array(n) as StorageOf[D];
    case "i64":
      return new BigInt64Array(n) as StorageOf[D];
    default:
      throw new InvalidArgumentError(`unknown dtype ${String(dtype)}`);
  }
}

/**
 * Views `bytes` (little-endian, as stored on disk) as typed storage. Copies only when the
 * byte offset is not aligned for the element size.
 */
export function storageFromBytes<D extends DType>(dtype: D, bytes: Uint8Array): StorageOf[D] {
  const size = BYTES_PER_ELEMENT[dtype];
  if (bytes.byteLength % size !== 0) {
    throw new InvalidArgumentError(
      `${bytes.byteLength} bytes is not a whole number of ${dtype} elements (${size} bytes each)`,
    );
  }
  const aligned = bytes.byteOffset % size === 0 ? bytes : bytes.slice();
  const n = aligned.byteLength / size;
  const { buffer, byteOffset } = aligned;
  switch (dtype) {
    case "f32":
      return new Float32Array(buffer, byteOffset, n) as StorageOf[D];
    case "f16":
    case "bf16":
      return new Uint16Array(buffer, byteOffset, n) as StorageOf[D];
    case "i8":
      return new Int8Array(buffer, byteOffset, n) as StorageOf[D];
    case "u8":
    case "bool":
      return new Uint8Array(buffer, byteOffset, n) as StorageOf[D];
    case "i16":
      return new Int16Array(buffer, byteOffset, n) as StorageOf[D];
    case "i32":
      return new Int32Array(buffer, byteOffset, n) as StorageOf[D];
    case "i64":
      return new BigInt64Array(buffer, byteOffset, n) as StorageOf[D];
    default:
      throw new InvalidArgumentError(`unknown dtype ${String(dtype)}`);
  }
}

/** The bytes of a storage array (a view, no copy). */
export function storageBytes(storage: Storage): Uint8Array {
  return new Uint8Array(storage.buffer, storage.byteOffset, storage.byteLength);
}

// ---------------------------------------------------------------------------------------------
// Scalar conversions. fp32 <-> fp16 and fp32 <-> bf16 are exact IEEE-754 conversions with
// round-to-nearest-even, subnormals, infinities and NaN.

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

export function f32Bits(x: number): number {
  f32Scratch[0] = x;
  return u32Scratch[0];
}

export function bitsToF32(bits: number): number {
  u32Scratch[0] = bits >>> 0;
  return f32Scratch[0];
}

/** fp32 value -> fp16 bit pattern, round-to-nearest-even. */
export function f32ToF16Bits(x: number): number {
  return f32BitsToF16Bits(f32Bits(x));
}

/** fp32 bit pattern -> fp16 bit pattern, round-to-nearest-even (integer ops only). */
function f32BitsToF16Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) {
    // inf or NaN; keep NaN quiet and non-zero
    return mant === 0 ? sign | 0x7c00 : sign | 0x7e00 | (mant >>> 13);
  }
  const e = exp - 127 + 15; // re-biased exponent
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    // subnormal fp16 (or underflow to zero)
    if (e < -10) return sign;
    const m = mant | 0x800000; // implicit leading one
    const shift = 14 - e; // 14..24
    const half = 1 << (shift - 1);
    let r = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    if (rem > half || (rem === half && (r & 1) === 1)) r += 1;
    return sign | r; // r may carry into the smallest normal, which is the correct encoding
  }
  let r = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1) === 1)) r += 1; // may carry to inf: correct
  return sign | r;
}

/** fp16 bit pattern -> fp32 value (exact). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** fp32 value -> bf16 bit pattern, round-to-nearest-even; NaN stays NaN. */
export function f32ToBf16Bits(x: number): number {
  const bits = f32Bits(x);
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return ((bits >>> 16) | 0x40) & 0xffff;
  const lsb = (bits >>> 16) & 1;
  return ((bits + 0x7fff + lsb) >>> 16) & 0xffff;
}

/** bf16 bit pattern -> fp32 value (exact). */
export function bf16BitsToF32(b: number): number {
  return bitsToF32((b & 0xffff) << 16);
}

/** Rounds an fp32 value to the nearest fp16 value (as a number). */
export function roundToF16(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}

// ---------------------------------------------------------------------------------------------
// Bulk conversions.

const F16_TABLE = (() => {
  const t = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) t[i] = f16BitsToF32(i);
  return t;
})();

/** Converts any numeric storage to fp32 values. i64 must fit in a double. */
export function toFloat32(dtype: DType, src: Storage): Float32Array {
  const n = src.length;
  const out = new Float32Array(n);
  switch (dtype) {
    case "f32":
      out.set(src as Float32Array);
      return out;
    case "f16": {
      const s = src as Uint16Array;
      for (let i = 0; i < n; i++) out[i] = F16_TABLE[s[i]];
      return out;
    }
    case "bf16": {
      const s = src as Uint16Array;
      const u = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) u[i] = s[i] << 16;
      return out;
    }
    case "i64": {
      const s = src as BigInt64Array;
      for (let i = 0; i < n; i++) out[i] = Number(s[i]);
      return out;
    }
    default:
      out.set(src as Exclude<Storage, BigInt64Array>);
      return out;
  }
}

/** Converts fp32 values to `dtype` storage (rounding to nearest-even for f16/bf16, truncating ints). */
export function fromFloat32<D extends DType>(dtype: D, src: Float32Array): StorageOf[D] {
  const n = src.length;
  const out = allocStorage(dtype, n);
  switch (dtype) {
    case "f32":
      (out as Float32Array).set(src);
      break;
    case "f16": {
      const o = out as Uint16Array;
      const bits = new Uint32Array(src.buffer, src.byteOffset, n);
      for (let i = 0; i < n; i++) o[i] = f32BitsToF16Bits(bits[i]);
      break;
    }
    case "bf16": {
      const o = out as Uint16Array;
      for (let i = 0; i < n; i++) o[i] = f32ToBf16Bits(src[i]);
      break;
    }
    case "i64": {
      const o = out as BigInt64Array;
      for (let i = 0; i < n; i++) o[i] = BigInt(Math.trunc(src[i]));
      break;
    }
    case "bool": {
      const o = out as Uint8Array;
      for (let i = 0; i < n; i++) o[i] = src[i] !== 0 ? 1 : 0;
      break;
    }
    default: {
      const o = out as Exclude<Storage, BigInt64Array>;
      for (let i = 0; i < n; i++) o[i] = Math.trunc(src[i]);
    }
  }
  return out;
}

/** Index of the first NaN or ±Inf in float storage (all exponent bits set), or -1; ints: always -1. */
export function firstNonFinite(dtype: DType, src: Storage): number {
  // f32: 0x7f800000; f16: 0x7c00; bf16: 0x7f80 (the exponent field)
  const mask = dtype === "f32" ? 0x7f800000 : dtype === "f16" ? 0x7c00 : dtype === "bf16" ? 0x7f80 : 0;
  if (mask === 0) return -1;
  const bits =
    dtype === "f32" ? new Uint32Array(src.buffer, src.byteOffset, src.length) : (src as Uint16Array);
  for (let i = 0; i < bits.length; i++) if ((bits[i] & mask) === mask) return i;
  return -1;
}
