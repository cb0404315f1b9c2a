/**
 * Element storage for constant values (`MilData`) and its byte form: raw little-endian elements,
 * with sub-byte types packed LSB-first (shared/reference/coreml-format.md §3.3). The same bytes
 * go into weight-file payloads and into `TensorValue.bytes` immediates.
 */
import { InvalidArgumentError, numel } from "@anemll-qwen35/core";
import type { MilData, MilDType, TensorType } from "../program.js";
import { SUB_BYTE_BITS } from "./dtypes.js";

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function requireLittleEndian(): void {
  // Typed-array views are copied byte for byte; the formats are little-endian.
  if (!LITTLE_ENDIAN) throw new InvalidArgumentError("Core ML weight encoding needs a little-endian host");
}

type DataCtor =
  | Float32ArrayConstructor
  | Float64ArrayConstructor
  | Uint16ArrayConstructor
  | Int32ArrayConstructor
  | Int16ArrayConstructor
  | Uint32ArrayConstructor
  | Int8ArrayConstructor
  | Uint8ArrayConstructor
  | BigInt64ArrayConstructor;

/** The typed-array class that holds one element per value of `dtype` (strings: undefined). */
export function storageClass(dtype: MilDType): DataCtor | undefined {
  switch (dtype) {
    case "fp32":
      return Float32Array;
    case "fp64":
      return Float64Array;
    case "fp16":
    case "bf16":
    case "uint16":
      return Uint16Array;
    case "int32":
      return Int32Array;
    case "int16":
      return Int16Array;
    case "uint32":
      return Uint32Array;
    case "int8":
    case "int4":
      return Int8Array;
    case "uint8":
    case "uint1":
    case "uint2":
    case "uint3":
    case "uint4":
    case "uint6":
    case "bool":
      return Uint8Array;
    case "int64":
      return BigInt64Array;
    case "string":
      return undefined;
  }
}

/** A zero-filled storage array for `n` elements of `dtype`. */
export function allocData(dtype: MilDType, n: number): MilData {
  const C = storageClass(dtype);
  return C ? new C(n) : new Array<string>(n).fill("");
}

/** Throws unless `data` is the storage class of `type.dtype` with one element per tensor element. */
export function checkConstData(type: TensorType, data: MilData, where: string): void {
  const n = numel(type.shape);
  const C = storageClass(type.dtype);
  const ok = C ? data instanceof C : Array.isArray(data) && data.every((s) => typeof s === "string");
  if (!ok) {
    const expected = C ? C.name : "string[]";
    throw new InvalidArgumentError(
      `${where}: ${type.dtype} data must be a ${expected}, got ${describe(data)}`,
    );
  }
  if (data.length !== n) {
    throw new InvalidArgumentError(
      `${where}: tensor<${type.dtype}, [${type.shape.join(", ")}]> needs ${n} elements, got ${data.length}`,
    );
  }
}

function describe(data: unknown): string {
  if (Array.isArray(data)) return "an array";
  return (data as { constructor?: { name?: string } })?.constructor?.name ?? typeof data;
}

function valueRange(dtype: MilDType): [number, number] {
  const bits = SUB_BYTE_BITS[dtype];
  if (bits === undefined) throw new InvalidArgumentError(`${dtype} is not a sub-byte type`);
  return dtype === "int4" ? [-8, 7] : [0, (1 << bits) - 1];
}

/**
 * Packs n-bit values LSB-first: element i occupies stream bits [i·n, i·n+n), stream bit k is bit
 * k%8 of byte k/8 (coremltools SubByteTypes.cpp). Signed int4 stores its two's-complement low bits.
 */
export function packSubByte(dtype: MilDType, values: ArrayLike<number>): Uint8Array {
  const bits = SUB_BYTE_BITS[dtype]!;
  const [lo, hi] = valueRange(dtype);
  const mask = (1 << bits) - 1;
  const out = new Uint8Array(Math.ceil((values.length * bits) / 8));
  if (bits === 4 && (values instanceof Uint8Array || values instanceof Int8Array)) {
    // the common case (LUT4 indices), two elements per byte
    const n = values.length;
    let min = 0;
    let max = 0;
    let i = 0;
    for (; i + 1 < n; i += 2) {
      const a = values[i];
      const b = values[i + 1];
      if (a < min) min = a;
      if (a > max) max = a;
      if (b < min) min = b;
      if (b > max) max = b;
      out[i >>> 1] = (a & 15) | ((b & 15) << 4);
    }
    if (i < n) {
      const a = values[i];
      if (a < min) min = a;
      if (a > max) max = a;
      out[i >>> 1] = a & 15;
    }
    if (min < lo || max > hi) {
      const at = values.findIndex((v) => v < lo || v > hi);
      throw new InvalidArgumentError(`${dtype} element ${at} is ${values[at]}, outside [${lo}, ${hi}]`);
    }
    return out;
  }
  let acc = 0;
  let accBits = 0;
  let j = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!(v >= lo && v <= hi) || !Number.isInteger(v)) {
      throw new InvalidArgumentError(`${dtype} element ${i} is ${v}, outside [${lo}, ${hi}]`);
    }
    acc |= (v & mask) << accBits;
    accBits += bits;
    while (accBits >= 8) {
      out[j++] = acc & 0xff;
      acc >>>= 8;
      accBits -= 8;
    }
  }
  if (accBits > 0) out[j] = acc & 0xff;
  return out;
}

/** Inverse of packSubByte: `count` elements (int4 sign-extended into an Int8Array). */
export function unpackSubByte(dtype: MilDType, bytes: Uint8Array, count: number): Int8Array | Uint8Array {
  const bits = SUB_BYTE_BITS[dtype]!;
  if (bytes.length * 8 < count * bits) {
    throw new InvalidArgumentError(
      `${count} ${dtype} elements need ${Math.ceil((count * bits) / 8)} bytes, got ${bytes.length}`,
    );
  }
  const mask = (1 << bits) - 1;
  const out = dtype === "int4" ? new Int8Array(count) : new Uint8Array(count);
  let acc = 0;
  let accBits = 0;
  let j = 0;
  for (let i = 0; i < count; i++) {
    while (accBits < bits) {
      acc |= bytes[j++] << accBits;
      accBits += 8;
    }
    const u = acc & mask;
    acc >>>= bits;
    accBits -= bits;
    out[i] = dtype === "int4" && u >= 8 ? u - 16 : u;
  }
  return out;
}

/** Payload bytes of `ceil(n·bits/8)` for n elements; whole-byte types: n × element size. */
export function byteSizeOf(dtype: MilDType, count: number): number {
  const bits = SUB_BYTE_BITS[dtype];
  if (bits !== undefined) return Math.ceil((count * bits) / 8);
  const C = storageClass(dtype);
  if (!C) throw new InvalidArgumentError(`${dtype} has no fixed-size byte form`);
  return count * C.BYTES_PER_ELEMENT;
}

/** Unused bits in the last byte of a packed sub-byte payload (0 for whole-byte types). */
export function paddingBitsOf(dtype: MilDType, count: number): number {
  const bits = SUB_BYTE_BITS[dtype];
  return bits === undefined ? 0 : (8 - ((count * bits) % 8)) % 8;
}

/**
 * The byte form of `data`: little-endian elements, sub-byte types packed. For whole-byte types the
 * result is a view of the same memory (no copy), so large payloads can be written directly.
 */
export function elementsToBytes(dtype: MilDType, data: MilData): Uint8Array {
  requireLittleEndian();
  if (SUB_BYTE_BITS[dtype] !== undefined) return packSubByte(dtype, data as Int8Array | Uint8Array);
  if (Array.isArray(data)) throw new InvalidArgumentError(`${dtype} data has no byte form (strings)`);
  const view = data as Exclude<MilData, string[]>;
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** Storage for `count` elements of `dtype` from their byte form (copied into fresh, aligned memory). */
export function elementsFromBytes(dtype: MilDType, bytes: Uint8Array, count: number): MilData {
  requireLittleEndian();
  if (SUB_BYTE_BITS[dtype] !== undefined) return unpackSubByte(dtype, bytes, count);
  const C = storageClass(dtype);
  if (!C) throw new InvalidArgumentError(`${dtype} data has no byte form (strings)`);
  const need = count * C.BYTES_PER_ELEMENT;
  if (bytes.length !== need) {
    throw new InvalidArgumentError(`${count} ${dtype} elements need ${need} bytes, got ${bytes.length}`);
  }
  const copy = new Uint8Array(need);
  copy.set(bytes);
  return new C(copy.buffer, 0, count);
}
