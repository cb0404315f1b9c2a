/**
 * MlModel (program.ts) <-> Core ML `Model` message, in the shape coremltools' MILProtoExporter
 * emits (shared/reference/coreml-format.md §2.3):
 *
 *   Model{specificationVersion, description (generated), mlProgram: Program{version,
 *     functions{name: Function{inputs, opset, block_specializations{opset: Block{outputs, operations}}}}}}
 *
 * Operations carry a `name` attribute (string scalar); `const` ops carry `val`. Inline constants
 * become immediates (field chosen per dtype exactly as coremltools does) or, when a BlobSink is
 * given and the value qualifies, weight-file blobs referenced by metadata offset. No docStrings,
 * no Function/Block attributes.
 */
import { InvalidArgumentError, numel } from "@anemll-qwen35/core";
import type {
  Binding,
  BlobRef,
  BlobSink,
  Block,
  ConstValue,
  MilData,
  MilDType,
  MilFunction,
  MlModel,
  NamedValueType,
  Operation,
  Program,
  TensorType,
  ValueType,
} from "../program.js";
import { describeModel, metadataFromProto } from "./description.js";
import { isSubByte, MIL_DATA_TYPE, milDTypeFromCode } from "./dtypes.js";
import { byteSizeOf, checkConstData, elementsFromBytes, elementsToBytes } from "./elements.js";
import { MilFormatError } from "./errors.js";
import type {
  ArgumentProto,
  BindingProto,
  BlockProto,
  FunctionProto,
  ModelProto,
  NamedValueTypeProto,
  OperationProto,
  ProgramProto,
  TensorTypeProto,
  TensorValueProto,
  ValueProto,
  ValueTypeProto,
} from "./proto.js";

/** A constant whose data lives in a weight file. */
export type BlobConstValue = Extract<ConstValue, { blob: BlobRef }>;

const BLOB_DTYPES_ALWAYS: ReadonlySet<MilDType> = new Set(["fp16", "fp32", "uint8", "int8", "bf16"]);
const BLOB_DTYPES_FROM_SPEC9: ReadonlySet<MilDType> = new Set(["int16", "uint16", "int32", "uint32"]);

/**
 * Whether an inline constant goes to the weight file, as coremltools decides (`should_use_weight_file`):
 * at least 10 elements of fp16/fp32/uint8/int8 (+ int16/uint16/int32/uint32 from spec 9); sub-byte
 * types always. (bf16, which coremltools does not serialise, is treated like fp16.)
 */
export function shouldUseBlob(type: TensorType, specificationVersion: number): boolean {
  if (isSubByte(type.dtype)) return true;
  if (numel(type.shape) < 10) return false;
  return (
    BLOB_DTYPES_ALWAYS.has(type.dtype) ||
    (specificationVersion >= 9 && BLOB_DTYPES_FROM_SPEC9.has(type.dtype))
  );
}

export interface ToProtoOptions {
  /** Specification version (decides which dtypes may go to the weight file). Default 9. */
  specificationVersion?: number;
  /** Receives inline constants that qualify for the weight file; without it they stay immediate. */
  blobs?: BlobSink;
  /** Maps an existing blob-backed constant to the ref to write (default: its own ref). */
  placeBlob?: (value: BlobConstValue, where: string) => BlobRef;
}

// ---------------------------------------------------------------------------------------------
// Program -> proto

function tensorTypeProto(t: TensorType): TensorTypeProto {
  const out: TensorTypeProto = { dataType: MIL_DATA_TYPE[t.dtype] };
  if (t.shape.length > 0) {
    out.rank = t.shape.length;
    out.dimensions = t.shape.map((size) => ({ constant: { size } }));
  }
  return out;
}

export function valueTypeToProto(t: ValueType): ValueTypeProto {
  if (t.kind === "state") return { stateType: { wrappedType: { tensorType: tensorTypeProto(t.wrapped) } } };
  return { tensorType: tensorTypeProto(t) };
}

function namedValueTypeProto(n: NamedValueType): NamedValueTypeProto {
  return { name: n.name, type: valueTypeToProto(n.type) };
}

/** A rank-0 string immediate (the `name` attribute of every op). */
export function stringScalarValue(s: string): ValueProto {
  return {
    type: { tensorType: { dataType: MIL_DATA_TYPE.string } },
    immediateValue: { tensor: { strings: { values: [s] } } },
  };
}

function checkInts(where: string, dtype: MilDType, data: ArrayLike<number>, lo: number, hi: number): void {
  for (let i = 0; i < data.length; i++) {
    if (data[i] < lo || data[i] > hi)
      throw new InvalidArgumentError(`${where}: ${dtype} element ${i} is ${data[i]}`);
  }
}

/** The TensorValue of an immediate, in the field coremltools uses for the dtype (§2.3 table). */
export function tensorValueToProto(type: TensorType, data: MilData, where: string): TensorValueProto {
  checkConstData(type, data, where);
  switch (type.dtype) {
    case "fp32":
      return { floats: { values: Array.from(data as Float32Array) } };
    case "fp64":
      return { doubles: { values: Array.from(data as Float64Array) } };
    case "int32":
    case "int16":
    case "uint16":
      return { ints: { values: Array.from(data as Int32Array | Int16Array | Uint16Array) } };
    case "int64":
      return { longInts: { values: Array.from(data as BigInt64Array, (v) => v.toString()) } };
    case "bool":
      checkInts(where, "bool", data as Uint8Array, 0, 1);
      return { bools: { values: Array.from(data as Uint8Array, (v) => v !== 0) } };
    case "string":
      return { strings: { values: [...(data as string[])] } };
    default:
      // fp16, bf16, int8, uint8, uint32 and the sub-byte types: raw little-endian bytes, sub-byte packed.
      return { bytes: { values: elementsToBytes(type.dtype, data).slice() } };
  }
}

function valueToProto(
  value: ConstValue,
  where: string,
  allowBlob: boolean,
  options: ToProtoOptions,
): ValueProto {
  const type = { tensorType: tensorTypeProto(value.type) };
  if ("blob" in value) {
    const ref = options.placeBlob ? options.placeBlob(value, where) : value.blob;
    return { type, blobFileValue: { fileName: ref.fileName, offset: ref.offset } };
  }
  const spec = options.specificationVersion ?? 9;
  if (allowBlob && options.blobs && shouldUseBlob(value.type, spec)) {
    checkConstData(value.type, value.data, where);
    const ref = options.blobs.write(value.type, value.data);
    return { type, blobFileValue: { fileName: ref.fileName, offset: ref.offset } };
  }
  return { type, immediateValue: { tensor: tensorValueToProto(value.type, value.data, where) } };
}

function bindingToProto(
  b: Binding,
  where: string,
  allowBlob: boolean,
  options: ToProtoOptions,
): BindingProto {
  if (b.kind === "var") return { name: b.name };
  return { value: valueToProto(b.value, where, allowBlob, options) };
}

function operationToProto(op: Operation, where: string, options: ToProtoOptions): OperationProto {
  const here = `${where} / op ${op.name || "(unnamed)"} (${op.type})`;
  // coremltools' loader accepts inline blob values only on const/constexpr ops.
  const constLike = op.type === "const" || op.type.startsWith("constexpr_");
  const out: OperationProto = { type: op.type };
  const inputs: Record<string, ArgumentProto> = {};
  for (const [param, bindings] of Object.entries(op.inputs)) {
    if (bindings.length === 0) throw new InvalidArgumentError(`${here}: input ${param} has no bindings`);
    inputs[param] = {
      arguments: bindings.map((b) => bindingToProto(b, `${here} / input ${param}`, constLike, options)),
    };
  }
  if (op.type === "const" && Object.keys(inputs).length > 0) {
    throw new InvalidArgumentError(`${here}: const ops take no inputs`);
  }
  if (Object.keys(inputs).length > 0) out.inputs = inputs;
  if (op.outputs.length > 0) out.outputs = op.outputs.map(namedValueTypeProto);
  const attributes: Record<string, ValueProto> = {};
  if (op.name) attributes.name = stringScalarValue(op.name);
  if (op.type === "const") {
    if (!op.value) throw new InvalidArgumentError(`${here}: const op without a value`);
    attributes.val = valueToProto(op.value, `${here} / val`, true, options);
  } else if (op.value) {
    throw new InvalidArgumentError(`${here}: only const ops carry a value`);
  }
  if (Object.keys(attributes).length > 0) out.attributes = attributes;
  return out;
}

function blockToProto(block: Block, where: string, options: ToProtoOptions): BlockProto {
  const out: BlockProto = {};
  if (block.inputs.length > 0) out.inputs = block.inputs.map(namedValueTypeProto);
  if (block.outputs.length > 0) out.outputs = [...block.outputs];
  if (block.operations.length > 0)
    out.operations = block.operations.map((op) => operationToProto(op, where, options));
  return out;
}

function functionToProto(name: string, fn: MilFunction, options: ToProtoOptions): FunctionProto {
  const out: FunctionProto = {};
  if (fn.inputs.length > 0) out.inputs = fn.inputs.map(namedValueTypeProto);
  out.opset = fn.opset;
  out.block_specializations = { [fn.opset]: blockToProto(fn.block, `function ${name}`, options) };
  return out;
}

/** Serialises a program (inline constants go to `options.blobs` when they qualify). */
export function programToProto(program: Program, options: ToProtoOptions = {}): ProgramProto {
  const functions: Record<string, FunctionProto> = {};
  for (const [name, fn] of Object.entries(program.functions))
    functions[name] = functionToProto(name, fn, options);
  return { version: program.version, functions };
}

/** Serialises a model: the program plus its generated ModelDescription. */
export function modelToProto(
  model: MlModel,
  options: Omit<ToProtoOptions, "specificationVersion"> = {},
): ModelProto {
  const description = describeModel(model);
  const mlProgram = programToProto(model.program, {
    ...options,
    specificationVersion: model.specificationVersion,
  });
  return { specificationVersion: model.specificationVersion, description, mlProgram };
}

// ---------------------------------------------------------------------------------------------
// proto -> Program

/** How a blob constant read from a package reaches its payload. */
export interface BlobAccess {
  /** The whole value. */
  readonly load: () => MilData;
  /** Payload bytes [byteOffset, byteOffset + into.length) into `into`. */
  readonly readBytes: (into: Uint8Array, byteOffset: number) => void;
}

export interface FromProtoOptions {
  /** Makes the loader for a blob-backed constant (the package reader reads weight.bin lazily). */
  blobLoader?: (ref: BlobRef, type: TensorType, where: string) => BlobAccess | undefined;
}

function num(v: string | number | undefined, where: string, field: string): number {
  const n = Number(v ?? 0);
  if (!Number.isSafeInteger(n) || n < 0) throw new MilFormatError(where, `${field} ${v} is not a valid size`);
  return n;
}

function tensorTypeFromProto(t: TensorTypeProto, where: string): TensorType {
  const dtype = milDTypeFromCode(t.dataType ?? 0);
  if (!dtype) throw new MilFormatError(where, `unsupported tensor dataType ${t.dataType ?? 0}`);
  if (t.attributes && Object.keys(t.attributes).length > 0) {
    throw new MilFormatError(where, "tensor type attributes are not supported");
  }
  const dims = t.dimensions ?? [];
  const rank = num(t.rank, where, "rank");
  if (rank !== dims.length)
    throw new MilFormatError(where, `tensor rank ${rank} but ${dims.length} dimensions`);
  const shape = dims.map((d, i) => {
    if (!d.constant)
      throw new MilFormatError(where, `dimension ${i} is not a constant (flexible shapes are not supported)`);
    return num(d.constant.size, where, `dimension ${i}`);
  });
  return { kind: "tensor", dtype, shape };
}

export function valueTypeFromProto(t: ValueTypeProto | undefined, where: string): ValueType {
  if (t?.tensorType) return tensorTypeFromProto(t.tensorType, where);
  if (t?.stateType) {
    const w = t.stateType.wrappedType;
    if (!w?.tensorType) throw new MilFormatError(where, "state type must wrap a tensor type");
    return { kind: "state", wrapped: tensorTypeFromProto(w.tensorType, where) };
  }
  const kind = t ? (Object.keys(t)[0] ?? "empty") : "missing";
  throw new MilFormatError(where, `value type ${kind} is not supported (tensor and state types only)`);
}

function tensorTypeOfValue(v: ValueProto, where: string): TensorType {
  const t = valueTypeFromProto(v.type, where);
  if (t.kind !== "tensor") throw new MilFormatError(where, "a constant must have a tensor type");
  return t;
}

function expectCount(where: string, type: TensorType, got: number): void {
  const n = numel(type.shape);
  if (got !== n) {
    throw new MilFormatError(
      where,
      `tensor<${type.dtype}, [${type.shape.join(", ")}]> needs ${n} elements, the value holds ${got}`,
    );
  }
}

/** The elements of an immediate TensorValue, from the field coremltools uses for the dtype. */
export function tensorValueFromProto(
  type: TensorType,
  t: TensorValueProto | undefined,
  where: string,
): MilData {
  const want = immediateField(type.dtype);
  const present = t ? Object.keys(t).filter((k) => (t as Record<string, unknown>)[k] !== undefined) : [];
  if (present.length !== 1 || present[0] !== want) {
    throw new MilFormatError(
      where,
      `${type.dtype} immediate must use TensorValue.${want}, found ${present.length ? present.join(", ") : "nothing"}`,
    );
  }
  const n = numel(type.shape);
  switch (type.dtype) {
    case "fp32": {
      const v = t!.floats?.values ?? [];
      expectCount(where, type, v.length);
      return Float32Array.from(v);
    }
    case "fp64": {
      const v = t!.doubles?.values ?? [];
      expectCount(where, type, v.length);
      return Float64Array.from(v);
    }
    case "int32":
    case "int16":
    case "uint16": {
      const v = t!.ints?.values ?? [];
      expectCount(where, type, v.length);
      if (type.dtype === "int32") return Int32Array.from(v);
      const [lo, hi] = type.dtype === "int16" ? [-32768, 32767] : [0, 65535];
      v.forEach((x, i) => {
        if (x < lo || x > hi) throw new MilFormatError(where, `${type.dtype} element ${i} is ${x}`);
      });
      return type.dtype === "int16" ? Int16Array.from(v) : Uint16Array.from(v);
    }
    case "int64": {
      const v = t!.longInts?.values ?? [];
      expectCount(where, type, v.length);
      return BigInt64Array.from(v, (x) => BigInt(x));
    }
    case "bool": {
      const v = t!.bools?.values ?? [];
      expectCount(where, type, v.length);
      return Uint8Array.from(v, (x) => (x ? 1 : 0));
    }
    case "string": {
      const v = t!.strings?.values ?? [];
      expectCount(where, type, v.length);
      return [...v];
    }
    default: {
      const bytes = t!.bytes?.values ?? new Uint8Array(0);
      const need = byteSizeOf(type.dtype, n);
      if (bytes.length !== need) {
        throw new MilFormatError(
          where,
          `${n} ${type.dtype} elements need ${need} bytes, the value holds ${bytes.length}`,
        );
      }
      return elementsFromBytes(type.dtype, bytes, n);
    }
  }
}

/** Name of the TensorValue field that holds immediates of `dtype`. */
export function immediateField(dtype: MilDType): keyof TensorValueProto {
  switch (dtype) {
    case "fp32":
      return "floats";
    case "fp64":
      return "doubles";
    case "int32":
    case "int16":
    case "uint16":
      return "ints";
    case "int64":
      return "longInts";
    case "bool":
      return "bools";
    case "string":
      return "strings";
    default:
      return "bytes";
  }
}

function constValueFromProto(v: ValueProto, where: string, options: FromProtoOptions): ConstValue {
  if (v.docString) throw new MilFormatError(where, "values with a docString are not supported");
  const type = tensorTypeOfValue(v, where);
  if (v.blobFileValue) {
    const blob: BlobRef = {
      fileName: v.blobFileValue.fileName ?? "",
      offset: num(v.blobFileValue.offset, where, "blob offset"),
    };
    const access = options.blobLoader?.(blob, type, where);
    return access ? { type, blob, load: access.load, readBytes: access.readBytes } : { type, blob };
  }
  const imm = v.immediateValue;
  if (!imm?.tensor) {
    const kind = imm ? (Object.keys(imm)[0] ?? "empty") : "missing";
    throw new MilFormatError(where, `immediate value ${kind} is not supported (tensor values only)`);
  }
  return { type, data: tensorValueFromProto(type, imm.tensor, where) };
}

function namedValueTypeFromProto(n: NamedValueTypeProto, where: string): NamedValueType {
  if (!n.name) throw new MilFormatError(where, "a named value has no name");
  return { name: n.name, type: valueTypeFromProto(n.type, `${where} / ${n.name}`) };
}

function stringScalarFromProto(v: ValueProto, where: string): string {
  const type = tensorTypeOfValue(v, where);
  if (type.dtype !== "string" || type.shape.length !== 0)
    throw new MilFormatError(where, "must be a string scalar");
  return (tensorValueFromProto(type, v.immediateValue?.tensor, where) as string[])[0];
}

function operationFromProto(
  p: OperationProto,
  index: number,
  where: string,
  options: FromProtoOptions,
): Operation {
  const type = p.type ?? "";
  if (!type) throw new MilFormatError(`${where} / op #${index}`, "operation without a type");
  const attrs = p.attributes ?? {};
  const name = attrs.name
    ? stringScalarFromProto(attrs.name, `${where} / op #${index} (${type}) / name`)
    : "";
  const here = `${where} / op ${name || `#${index}`} (${type})`;
  if (p.blocks && p.blocks.length > 0)
    throw new MilFormatError(here, "nested blocks (control flow) are not supported");
  for (const key of Object.keys(attrs)) {
    if (key === "name" || (key === "val" && type === "const")) continue;
    throw new MilFormatError(
      here,
      `attribute ${key} is not supported (only name, and val on const; iOS16-style constexpr attributes are not modelled)`,
    );
  }
  const inputs: Record<string, Binding[]> = {};
  for (const [param, arg] of Object.entries(p.inputs ?? {})) {
    const bindings = (arg.arguments ?? []).map((b, i): Binding => {
      if (b.name !== undefined && b.name !== "") return { kind: "var", name: b.name };
      if (b.value)
        return { kind: "value", value: constValueFromProto(b.value, `${here} / input ${param}`, options) };
      throw new MilFormatError(`${here} / input ${param}`, `binding ${i} has neither a name nor a value`);
    });
    inputs[param] = bindings;
  }
  const outputs = (p.outputs ?? []).map((o) => namedValueTypeFromProto(o, `${here} / output`));
  if (type === "const") {
    if (!attrs.val) throw new MilFormatError(here, "const op without a val attribute");
    return { type, name, inputs, outputs, value: constValueFromProto(attrs.val, `${here} / val`, options) };
  }
  return { type, name, inputs, outputs };
}

function blockFromProto(p: BlockProto, where: string, options: FromProtoOptions): Block {
  if (p.attributes && Object.keys(p.attributes).length > 0)
    throw new MilFormatError(where, "block attributes are not supported");
  return {
    inputs: (p.inputs ?? []).map((n) => namedValueTypeFromProto(n, `${where} / block input`)),
    outputs: [...(p.outputs ?? [])],
    operations: (p.operations ?? []).map((op, i) => operationFromProto(op, i, where, options)),
  };
}

function functionFromProto(name: string, p: FunctionProto, options: FromProtoOptions): MilFunction {
  const where = `function ${name}`;
  if (p.attributes && Object.keys(p.attributes).length > 0)
    throw new MilFormatError(where, "function attributes are not supported");
  const opset = p.opset ?? "";
  const specs = p.block_specializations ?? {};
  const keys = Object.keys(specs);
  if (!opset || !specs[opset]) {
    throw new MilFormatError(
      where,
      `opset ${opset || "(unset)"} is not a key of block_specializations [${keys.join(", ")}]`,
    );
  }
  if (keys.length !== 1) {
    throw new MilFormatError(where, `several block specializations [${keys.join(", ")}] are not supported`);
  }
  return {
    inputs: (p.inputs ?? []).map((n) => namedValueTypeFromProto(n, `${where} / input`)),
    opset,
    block: blockFromProto(specs[opset], where, options),
  };
}

/** Parses an ML Program message. Blob constants keep their ref; `options.blobLoader` adds `load()`. */
export function programFromProto(p: ProgramProto, options: FromProtoOptions = {}): Program {
  const functions: Record<string, MilFunction> = {};
  for (const [name, fn] of Object.entries(p.functions ?? {}))
    functions[name] = functionFromProto(name, fn, options);
  if (Object.keys(functions).length === 0)
    throw new MilFormatError("program", "the program has no functions");
  return { version: num(p.version, "program", "version"), functions };
}

/**
 * Parses a Model message holding an ML Program (the description is not checked here; the package
 * reader does that). Throws MilFormatError when `mlProgram` is unset.
 */
export function modelFromProto(m: ModelProto, options: FromProtoOptions = {}): MlModel {
  if (!m.mlProgram) throw new MilFormatError("Model", "not an ML Program (the mlProgram field is unset)");
  const program = programFromProto(m.mlProgram, options);
  const metadata = metadataFromProto(m.description?.metadata);
  const defaultName = m.description?.defaultFunctionName;
  return {
    specificationVersion: m.specificationVersion ?? 0,
    program,
    ...(defaultName ? { defaultFunctionName: defaultName } : {}),
    ...(metadata ? { metadata } : {}),
  };
}
