/**
 * The Core ML protobuf messages (coreml.proto + mil.proto), compiled by protobufjs reflection from
 * the JSON descriptor `coreml.gen.json` (regenerate with `pnpm --filter @anemll-qwen35/ir gen:proto`).
 * The descriptor is bundled into dist/, so nothing is looked up on disk at run time.
 *
 * Messages travel as plain objects with Apple's field names (keepCase). 64-bit integers decode
 * as decimal strings (exact) and encode from numbers or strings.
 */
import protobuf from "protobufjs";
import descriptor from "./coreml.gen.json" with { type: "json" };
import { MilFormatError } from "./errors.js";

const root = protobuf.Root.fromJSON(descriptor as protobuf.INamespace);
const ModelMessage = root.lookupType("CoreML.Specification.Model");

/** The protobufjs reflection root (for tests and tools that need other message types). */
export const coremlProtoRoot: protobuf.Root = root;

/** int64/uint64 fields: decoded as decimal strings; numbers or strings accepted when encoding. */
export type Int64 = string | number;

export interface ModelProto {
  specificationVersion?: number;
  description?: ModelDescriptionProto;
  isUpdatable?: boolean;
  mlProgram?: ProgramProto;
}

export interface ModelDescriptionProto {
  functions?: FunctionDescriptionProto[];
  defaultFunctionName?: string;
  metadata?: MetadataProto;
  input?: FeatureDescriptionProto[];
  output?: FeatureDescriptionProto[];
  state?: FeatureDescriptionProto[];
  predictedFeatureName?: string;
  predictedProbabilitiesName?: string;
  trainingInput?: FeatureDescriptionProto[];
}

export interface FunctionDescriptionProto {
  name?: string;
  input?: FeatureDescriptionProto[];
  output?: FeatureDescriptionProto[];
  state?: FeatureDescriptionProto[];
  predictedFeatureName?: string;
  predictedProbabilitiesName?: string;
}

export interface MetadataProto {
  shortDescription?: string;
  versionString?: string;
  author?: string;
  license?: string;
  userDefined?: Record<string, string>;
}

export interface FeatureDescriptionProto {
  name?: string;
  shortDescription?: string;
  type?: FeatureTypeProto;
}

export interface SizeRangeProto {
  lowerBound?: Int64;
  upperBound?: Int64;
}

export interface ArrayFeatureTypeProto {
  shape?: Int64[];
  dataType?: number;
  enumeratedShapes?: { shapes?: { shape?: Int64[] }[] };
  shapeRange?: { sizeRanges?: SizeRangeProto[] };
  intDefaultValue?: number;
  floatDefaultValue?: number;
  doubleDefaultValue?: number;
}

export interface FeatureTypeProto {
  int64Type?: Record<string, never>;
  doubleType?: Record<string, never>;
  stringType?: Record<string, never>;
  imageType?: { width?: Int64; height?: Int64; colorSpace?: number };
  multiArrayType?: ArrayFeatureTypeProto;
  dictionaryType?: { int64KeyType?: Record<string, never>; stringKeyType?: Record<string, never> };
  sequenceType?: {
    int64Type?: Record<string, never>;
    stringType?: Record<string, never>;
    sizeRange?: SizeRangeProto;
  };
  stateType?: { arrayType?: ArrayFeatureTypeProto };
  isOptional?: boolean;
}

export interface ProgramProto {
  version?: Int64;
  functions?: Record<string, FunctionProto>;
  docString?: string;
  attributes?: Record<string, ValueProto>;
}

export interface FunctionProto {
  inputs?: NamedValueTypeProto[];
  opset?: string;
  block_specializations?: Record<string, BlockProto>;
  attributes?: Record<string, ValueProto>;
}

export interface BlockProto {
  inputs?: NamedValueTypeProto[];
  outputs?: string[];
  operations?: OperationProto[];
  attributes?: Record<string, ValueProto>;
}

export interface BindingProto {
  name?: string;
  value?: ValueProto;
}

export interface ArgumentProto {
  arguments?: BindingProto[];
}

export interface OperationProto {
  type?: string;
  inputs?: Record<string, ArgumentProto>;
  outputs?: NamedValueTypeProto[];
  blocks?: BlockProto[];
  attributes?: Record<string, ValueProto>;
}

export interface NamedValueTypeProto {
  name?: string;
  type?: ValueTypeProto;
}

export interface DimensionProto {
  constant?: { size?: Int64 };
  unknown?: { variadic?: boolean };
}

export interface TensorTypeProto {
  dataType?: number;
  rank?: Int64;
  dimensions?: DimensionProto[];
  attributes?: Record<string, ValueProto>;
}

export interface ValueTypeProto {
  tensorType?: TensorTypeProto;
  listType?: { type?: ValueTypeProto; length?: DimensionProto };
  tupleType?: { types?: ValueTypeProto[] };
  dictionaryType?: { keyType?: ValueTypeProto; valueType?: ValueTypeProto };
  stateType?: { wrappedType?: ValueTypeProto };
}

export interface TensorValueProto {
  floats?: { values?: number[] };
  ints?: { values?: number[] };
  bools?: { values?: boolean[] };
  strings?: { values?: string[] };
  longInts?: { values?: Int64[] };
  doubles?: { values?: number[] };
  /** One bytes field holding all elements (not a repeated field). */
  bytes?: { values?: Uint8Array };
}

export interface ValueProto {
  docString?: string;
  type?: ValueTypeProto;
  immediateValue?: {
    tensor?: TensorValueProto;
    tuple?: { values?: ValueProto[] };
    list?: { values?: ValueProto[] };
    dictionary?: { values?: { key?: ValueProto; value?: ValueProto }[] };
  };
  blobFileValue?: { fileName?: string; offset?: Int64 };
}

/** Serialises a Model message. */
export function encodeModelProto(model: ModelProto): Uint8Array {
  let message: protobuf.Message;
  try {
    message = ModelMessage.fromObject(model as Record<string, unknown>);
  } catch (cause) {
    throw new MilFormatError("Model", `cannot encode: ${(cause as Error).message}`, { cause });
  }
  return ModelMessage.encode(message).finish();
}

/** Parses a serialised Model message (`model.mlmodel`). */
export function decodeModelProto(bytes: Uint8Array): ModelProto {
  let message: protobuf.Message;
  try {
    message = ModelMessage.decode(bytes);
  } catch (cause) {
    throw new MilFormatError("Model", `not a Core ML Model protobuf: ${(cause as Error).message}`, { cause });
  }
  return ModelMessage.toObject(message, { longs: String, enums: Number, defaults: false }) as ModelProto;
}
