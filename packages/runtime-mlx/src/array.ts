/** Creating MxArrays from JS data, and reading them back. */
import { type Dtype, type MxArray, type MxTypedArray, native } from "./native.js";
import { tidy, track } from "./tidy.js";

/** MLX dtype names, or the short names the ir package uses (f32, bf16, i32, ...). */
export type DtypeLike =
  | Dtype
  | "f32"
  | "f16"
  | "bf16"
  | "i8"
  | "u8"
  | "i16"
  | "u16"
  | "i32"
  | "u32"
  | "i64"
  | "u64";

const SHORT: Record<string, Dtype> = {
  f32: "float32",
  f16: "float16",
  bf16: "bfloat16",
  i8: "int8",
  u8: "uint8",
  i16: "int16",
  u16: "uint16",
  i32: "int32",
  u32: "uint32",
  i64: "int64",
  u64: "uint64",
};

export function toDtype(d: DtypeLike): Dtype {
  return SHORT[d] ?? (d as Dtype);
}

export type NestedNumbers = number | boolean | NestedNumbers[];
export type ArrayData = MxTypedArray | Float64Array | Uint8ClampedArray | NestedNumbers;

/** The dtype whose bytes a typed array holds as-is (Uint16Array may also carry fp16/bf16 bits). */
function naturalDtype(data: ArrayBufferView): Dtype | undefined {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return "uint8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return "uint16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  return undefined;
}

function inferShape(data: NestedNumbers): number[] {
  const shape: number[] = [];
  let level: NestedNumbers = data;
  while (Array.isArray(level)) {
    shape.push(level.length);
    if (level.length === 0) break;
    level = level[0];
  }
  return shape;
}

function flattenNested(data: NestedNumbers, shape: number[], depth: number, out: number[]): void {
  if (depth === shape.length) {
    if (Array.isArray(data)) throw new TypeError("array: ragged nested data (deeper than its first element)");
    out.push(typeof data === "boolean" ? Number(data) : data);
    return;
  }
  if (!Array.isArray(data) || data.length !== shape[depth]) {
    throw new TypeError(`array: ragged nested data (expected ${shape[depth]} elements at depth ${depth})`);
  }
  for (const item of data) flattenNested(item, shape, depth + 1, out);
}

function hasBoolean(data: NestedNumbers): boolean {
  let level: NestedNumbers = data;
  while (Array.isArray(level) && level.length > 0) level = level[0];
  return typeof level === "boolean";
}

/** A typed array holding `values` for dtype `d` (floats go through Float32Array, then astype). */
function typedFor(d: Dtype, values: number[]): { data: ArrayBufferView; dtype: Dtype } {
  switch (d) {
    case "int8":
      return { data: Int8Array.from(values), dtype: d };
    case "uint8":
      return { data: Uint8Array.from(values), dtype: d };
    case "bool":
      return { data: Uint8Array.from(values, (v) => (v ? 1 : 0)), dtype: d };
    case "int16":
      return { data: Int16Array.from(values), dtype: d };
    case "uint16":
      return { data: Uint16Array.from(values), dtype: d };
    case "int32":
      return { data: Int32Array.from(values), dtype: d };
    case "uint32":
      return { data: Uint32Array.from(values), dtype: d };
    case "int64":
      return { data: BigInt64Array.from(values, (v) => BigInt(Math.trunc(v))), dtype: d };
    case "uint64":
      return { data: BigUint64Array.from(values, (v) => BigInt(Math.trunc(v))), dtype: d };
    default:
      return { data: Float32Array.from(values), dtype: "float32" };
  }
}

function fromView(view: ArrayBufferView, shape: number[], stored: Dtype, target: Dtype): MxArray {
  if (stored === target) return track(native().fromBuffer(view, shape, stored));
  return tidy(() => track(native().astype(track(native().fromBuffer(view, shape, stored)), target)));
}

/**
 * An MxArray from JS data.
 * - typed arrays keep their dtype unless `dtype` is given (then MLX converts); a Uint16Array with
 *   dtype float16/bfloat16 is taken as raw bit patterns; Float64Array becomes float32;
 * - numbers, booleans and nested arrays default to float32 (bool when they hold booleans);
 * - `shape` defaults to the typed array's length or the nesting of the data.
 */
export function array(data: ArrayData, shape?: number[] | null, dtype?: DtypeLike): MxArray {
  const want = dtype === undefined ? undefined : toDtype(dtype);
  if (ArrayBuffer.isView(data)) {
    if (data instanceof DataView) throw new TypeError("array: pass a typed array, not a DataView");
    const dims = shape ?? [data.length];
    if (data instanceof Float64Array)
      return fromView(Float32Array.from(data), dims, "float32", want ?? "float32");
    const stored = naturalDtype(data)!;
    if (data instanceof Uint16Array && (want === "float16" || want === "bfloat16")) {
      return fromView(data, dims, want, want);
    }
    return fromView(data, dims, stored, want ?? stored);
  }
  const dims = shape ?? inferShape(data);
  const values: number[] = [];
  flattenNested(data, inferShape(data), 0, values);
  const target = want ?? (hasBoolean(data) ? "bool" : "float32");
  const { data: view, dtype: stored } = typedFor(target, values);
  return fromView(view, dims, stored, target);
}

export function full(shape: number[], value: number, dtype: DtypeLike = "float32"): MxArray {
  return track(native().full(shape, value, toDtype(dtype)));
}

export function zeros(shape: number[], dtype: DtypeLike = "float32"): MxArray {
  return full(shape, 0, dtype);
}

export function ones(shape: number[], dtype: DtypeLike = "float32"): MxArray {
  return full(shape, 1, dtype);
}

/** [start, stop) with `step`; `arange(n)` is [0, n). */
export function arange(start: number, stop?: number, step = 1, dtype: DtypeLike = "float32"): MxArray {
  const [lo, hi] = stop === undefined ? [0, start] : [start, stop];
  return track(native().arange(lo, hi, step, toDtype(dtype)));
}

/** The array's values as float32 (fp16/bf16/int arrays are converted by MLX first). */
export function toFloat32Array(a: MxArray): Float32Array {
  if (a.dtype === "float32") return a.toTypedArray() as Float32Array;
  const converted = native().astype(a, "float32");
  try {
    return converted.toTypedArray() as Float32Array;
  } finally {
    converted.dispose();
  }
}
