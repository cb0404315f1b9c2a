/**
 * The in-memory model of a Core ML ML Program (MIL). This is the one shape that the builder
 * produces, the .mlpackage writer serialises, the reader returns, the interpreter runs and the
 * cost model walks. Field meanings follow MIL.proto (see shared/reference/coreml-format.md §2.3).
 */

/** MIL element types, spelled as in MIL text (`tensor<fp16, [1, 4]>`). */
export type MilDType =
  | "fp16"
  | "fp32"
  | "fp64"
  | "bf16"
  | "int4"
  | "int8"
  | "int16"
  | "int32"
  | "int64"
  | "uint1"
  | "uint2"
  | "uint3"
  | "uint4"
  | "uint6"
  | "uint8"
  | "uint16"
  | "uint32"
  | "bool"
  | "string";

/** A tensor type with a static shape; rank 0 (`shape: []`) is a scalar. */
export interface TensorType {
  readonly kind: "tensor";
  readonly dtype: MilDType;
  readonly shape: readonly number[];
}

/** A Core ML state (iOS18): a mutable tensor owned by an MLState, read and written in-graph. */
export interface StateType {
  readonly kind: "state";
  readonly wrapped: TensorType;
}

export type ValueType = TensorType | StateType;

/**
 * Element storage for constant values, one array element per tensor element:
 * fp32 Float32Array · fp64 Float64Array · fp16/bf16 Uint16Array (bit patterns) ·
 * int32 Int32Array · int16 Int16Array · uint16 Uint16Array · uint32 Uint32Array · int8/int4 Int8Array ·
 * uint8/uint1..uint6/bool Uint8Array (unpacked, one value per byte) · int64 BigInt64Array · string string[].
 */
export type MilData =
  | Float32Array
  | Float64Array
  | Uint16Array
  | Int32Array
  | Int16Array
  | Uint32Array
  | Int8Array
  | Uint8Array
  | BigInt64Array
  | string[];

/** Where a constant lives inside a weight file (`BlobFileValue`). */
export interface BlobRef {
  /** As stored in the proto, e.g. "@model_path/weights/weight.bin". */
  readonly fileName: string;
  /** Byte offset of the blob's 64-byte metadata record (not of the payload). */
  readonly offset: number;
}

/**
 * A constant value: either in memory, or a reference into a weight file. Values read from a
 * package carry `blob` plus a `load` that reads (and bounds-checks) the payload on demand, and
 * `readBytes`, which reads a slice of the payload's bytes (sub-byte types packed) into `into`.
 */
export type ConstValue =
  | { readonly type: TensorType; readonly data: MilData }
  | {
      readonly type: TensorType;
      readonly blob: BlobRef;
      readonly load?: () => MilData;
      readonly readBytes?: (into: Uint8Array, byteOffset: number) => void;
    };

/** An input binding: a named value visible in scope, or an inline constant. */
export type Binding =
  | { readonly kind: "var"; readonly name: string }
  | { readonly kind: "value"; readonly value: ConstValue };

export interface NamedValueType {
  readonly name: string;
  readonly type: ValueType;
}

export interface Operation {
  /** Op type, e.g. "linear", "const", "constexpr_lut_to_dense". */
  readonly type: string;
  /** The op's `name` attribute. */
  readonly name: string;
  /** Parameter name -> bindings (several only for variadic parameters such as `concat.values`). */
  readonly inputs: Readonly<Record<string, readonly Binding[]>>;
  readonly outputs: readonly NamedValueType[];
  /** For `const` ops: the `val` attribute. */
  readonly value?: ConstValue;
}

export interface Block {
  readonly inputs: readonly NamedValueType[];
  readonly outputs: readonly string[];
  readonly operations: readonly Operation[];
}

export interface MilFunction {
  readonly inputs: readonly NamedValueType[];
  /** e.g. "CoreML8" (spec 9, iOS 18 / macOS 15). */
  readonly opset: string;
  readonly block: Block;
}

export interface Program {
  readonly version: number;
  /** Function name -> function; single-function programs use "main". */
  readonly functions: Readonly<Record<string, MilFunction>>;
}

/** Free-form model metadata (Model.description.metadata). */
export interface ModelMetadata {
  shortDescription?: string;
  versionString?: string;
  author?: string;
  license?: string;
  userDefined?: Record<string, string>;
}

/** What a .mlpackage holds: a program plus the model-level fields around it. */
export interface MlModel {
  /** 9 = iOS 18 / macOS 15. */
  readonly specificationVersion: number;
  readonly program: Program;
  /** For multifunction programs (spec >= 9); single-function programs use "main". */
  readonly defaultFunctionName?: string;
  readonly metadata?: ModelMetadata;
}

/** Receives large constants as they are built so that they can be streamed to a weight file. */
export interface BlobSink {
  write(type: TensorType, data: MilData): BlobRef;
}

export const DEFAULT_OPSET = "CoreML8";
export const DEFAULT_SPEC_VERSION = 9;

export function tensorType(dtype: MilDType, shape: readonly number[]): TensorType {
  return { kind: "tensor", dtype, shape: [...shape] };
}

export function stateType(wrapped: TensorType): StateType {
  return { kind: "state", wrapped };
}

export function typeToString(t: ValueType): string {
  if (t.kind === "state") return `state<${typeToString(t.wrapped)}>`;
  return `tensor<${t.dtype}, [${t.shape.join(", ")}]>`;
}

export function sameType(a: ValueType, b: ValueType): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === "state" && b.kind === "state") return sameType(a.wrapped, b.wrapped);
  const ta = a as TensorType;
  const tb = b as TensorType;
  return (
    ta.dtype === tb.dtype &&
    ta.shape.length === tb.shape.length &&
    ta.shape.every((d, i) => d === tb.shape[i])
  );
}

/** Number of bits per element of a MIL dtype (strings: 0). */
export function milDTypeBits(dtype: MilDType): number {
  switch (dtype) {
    case "uint1":
    case "bool":
      return dtype === "bool" ? 8 : 1;
    case "uint2":
      return 2;
    case "uint3":
      return 3;
    case "uint4":
    case "int4":
      return 4;
    case "uint6":
      return 6;
    case "int8":
    case "uint8":
      return 8;
    case "fp16":
    case "bf16":
    case "int16":
    case "uint16":
      return 16;
    case "fp32":
    case "int32":
    case "uint32":
      return 32;
    case "fp64":
    case "int64":
      return 64;
    case "string":
      return 0;
  }
}
