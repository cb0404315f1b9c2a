/**
 * The ModelDescription of an ML Program, generated from the program itself (as coremltools'
 * exporter does) and, on read, checked against it — coremltools' loader does not make that check
 * (shared/reference/coreml-format.md §2.2, §4.3):
 *
 *   description.input  = the function's tensor inputs, in order          (multiArrayType)
 *   description.state  = the function's state inputs, fp16 only          (stateType.arrayType)
 *   description.output = the block's outputs, in order, with their types (multiArrayType)
 *
 * Model I/O dtypes are fp32, int32 and (spec >= 7) fp16; scalars must be given shape [1].
 * Multifunction programs describe each function in `functions[]` plus `defaultFunctionName`.
 */
import type { MilFunction, MlModel, ModelMetadata, TensorType, ValueType } from "../program.js";
import { typeToString } from "../program.js";
import { ARRAY_DATA_TYPE, arrayDataTypeName, ioArrayDataType } from "./dtypes.js";
import { DescriptionMismatchError, MilFormatError } from "./errors.js";
import type {
  ArrayFeatureTypeProto,
  FeatureDescriptionProto,
  FunctionDescriptionProto,
  MetadataProto,
  ModelDescriptionProto,
} from "./proto.js";

/** A model input, output or state whose type Core ML cannot describe. */
export class IoTypeError extends MilFormatError {
  /** The feature (input/output/state name). */
  readonly feature: string;
  constructor(fn: string, feature: string, message: string) {
    super(`function ${fn} / ${feature}`, message);
    this.feature = feature;
  }
}

/** Inputs, outputs and states of one function, as description features. */
export interface FunctionFeatures {
  input: FeatureDescriptionProto[];
  output: FeatureDescriptionProto[];
  state: FeatureDescriptionProto[];
}

function arrayType(
  fn: string,
  name: string,
  type: TensorType,
  spec: number,
  role: string,
): ArrayFeatureTypeProto {
  if (type.shape.length === 0) {
    throw new IoTypeError(
      fn,
      name,
      `model ${role} ${name} is a scalar; Core ML features need rank >= 1 (use shape [1])`,
    );
  }
  const dataType = ioArrayDataType(type.dtype, spec);
  if (dataType === undefined) {
    throw new IoTypeError(
      fn,
      name,
      `model ${role} ${name} has type ${typeToString(type)}; ML Program ${role}s must be fp32, int32` +
        `${spec >= 7 ? " or fp16" : " (fp16 from specification version 7)"}`,
    );
  }
  return { shape: [...type.shape], dataType };
}

/** The value types visible at the top level of a function: its inputs and every op output. */
export function functionValueTypes(fn: MilFunction): Map<string, ValueType> {
  const types = new Map<string, ValueType>();
  for (const input of fn.inputs) types.set(input.name, input.type);
  for (const input of fn.block.inputs) types.set(input.name, input.type);
  for (const op of fn.block.operations) for (const out of op.outputs) types.set(out.name, out.type);
  return types;
}

/** Describes one function's features (throws IoTypeError for types Core ML cannot describe). */
export function describeFunction(
  name: string,
  fn: MilFunction,
  specificationVersion: number,
): FunctionFeatures {
  const features: FunctionFeatures = { input: [], output: [], state: [] };
  for (const input of fn.inputs) {
    if (input.type.kind === "state") {
      const wrapped = input.type.wrapped;
      if (specificationVersion < 9) {
        throw new IoTypeError(
          name,
          input.name,
          `state ${input.name} needs specification version >= 9 (iOS 18)`,
        );
      }
      if (wrapped.dtype !== "fp16") {
        throw new IoTypeError(
          name,
          input.name,
          `state ${input.name} is ${typeToString(input.type)}; Core ML states must be fp16`,
        );
      }
      if (wrapped.shape.length === 0) {
        throw new IoTypeError(name, input.name, `state ${input.name} is a scalar; states need rank >= 1`);
      }
      features.state.push({
        name: input.name,
        type: { stateType: { arrayType: { shape: [...wrapped.shape], dataType: ARRAY_DATA_TYPE.FLOAT16 } } },
      });
    } else {
      features.input.push({
        name: input.name,
        type: { multiArrayType: arrayType(name, input.name, input.type, specificationVersion, "input") },
      });
    }
  }
  const types = functionValueTypes(fn);
  for (const out of fn.block.outputs) {
    const t = types.get(out);
    if (!t)
      throw new IoTypeError(name, out, `block output ${out} names no input or op output of the function`);
    if (t.kind === "state")
      throw new IoTypeError(name, out, `block output ${out} is a state; read it with read_state first`);
    features.output.push({
      name: out,
      type: { multiArrayType: arrayType(name, out, t, specificationVersion, "output") },
    });
  }
  return features;
}

/**
 * The metadata fields that are set, or undefined when none is. The program's ModelMetadata and the
 * description's MetadataProto have the same fields, so this copies either way.
 */
function setMetadata(m: ModelMetadata | MetadataProto | undefined): ModelMetadata | undefined {
  if (!m) return undefined;
  const out: ModelMetadata = {};
  if (m.shortDescription) out.shortDescription = m.shortDescription;
  if (m.versionString) out.versionString = m.versionString;
  if (m.author) out.author = m.author;
  if (m.license) out.license = m.license;
  if (m.userDefined && Object.keys(m.userDefined).length > 0) out.userDefined = { ...m.userDefined };
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The function a single-function model runs, or a multifunction model's default. */
export function defaultFunctionName(model: MlModel): string {
  const names = Object.keys(model.program.functions);
  if (names.length === 0) throw new MilFormatError("program", "the program has no functions");
  if (names.length === 1) {
    if (model.defaultFunctionName !== undefined && model.defaultFunctionName !== names[0]) {
      throw new MilFormatError(
        "program",
        `defaultFunctionName ${model.defaultFunctionName} is not the program's only function ${names[0]}`,
      );
    }
    return names[0];
  }
  const name = model.defaultFunctionName;
  if (name === undefined) {
    throw new MilFormatError(
      "program",
      `a multifunction program (${names.join(", ")}) needs a defaultFunctionName`,
    );
  }
  if (!names.includes(name)) {
    throw new MilFormatError(
      "program",
      `defaultFunctionName ${name} is not one of the functions ${names.join(", ")}`,
    );
  }
  return name;
}

/** Generates the ModelDescription for a model (single-function or multifunction). */
export function describeModel(model: MlModel): ModelDescriptionProto {
  const spec = model.specificationVersion;
  const names = Object.keys(model.program.functions);
  const defaultName = defaultFunctionName(model);
  const description: ModelDescriptionProto = {};
  if (names.length === 1) {
    const f = describeFunction(defaultName, model.program.functions[defaultName], spec);
    if (f.input.length) description.input = f.input;
    if (f.output.length) description.output = f.output;
    if (f.state.length) description.state = f.state;
  } else {
    if (spec < 9) {
      throw new MilFormatError(
        "program",
        `multifunction programs need specification version >= 9, got ${spec}`,
      );
    }
    description.functions = names.map((name) => {
      const f = describeFunction(name, model.program.functions[name], spec);
      const d: FunctionDescriptionProto = { name };
      if (f.input.length) d.input = f.input;
      if (f.output.length) d.output = f.output;
      if (f.state.length) d.state = f.state;
      return d;
    });
    description.defaultFunctionName = defaultName;
  }
  const metadata = setMetadata(model.metadata);
  if (metadata) description.metadata = metadata;
  return description;
}

/** Metadata from a description (undefined when it holds nothing). */
export const metadataFromProto = (m: MetadataProto | undefined): ModelMetadata | undefined => setMetadata(m);

type Role = "input" | "output" | "state";

function featureArray(f: FeatureDescriptionProto, role: Role): ArrayFeatureTypeProto | undefined {
  return role === "state" ? f.type?.stateType?.arrayType : f.type?.multiArrayType;
}

function shapeString(shape: readonly (string | number)[] | undefined): string {
  return `[${(shape ?? []).map(String).join(", ")}]`;
}

function checkFeatures(
  path: string,
  fn: string,
  role: Role,
  expected: FeatureDescriptionProto[],
  actual: FeatureDescriptionProto[],
): void {
  const names = (fs: FeatureDescriptionProto[]) => fs.map((f) => f.name ?? "").join(", ");
  if (expected.length !== actual.length) {
    throw new DescriptionMismatchError(
      path,
      `${role}s of ${fn}`,
      "count",
      `function ${fn}: the description lists ${actual.length} ${role}(s) [${names(actual)}], ` +
        `the program has ${expected.length} [${names(expected)}]`,
    );
  }
  expected.forEach((e, i) => {
    const a = actual[i];
    const name = e.name ?? "";
    if (a.name !== name) {
      throw new DescriptionMismatchError(
        path,
        name,
        "name",
        `function ${fn}: ${role} ${i} is named ${a.name ?? "(none)"} in the description, ${name} in the program`,
      );
    }
    const ea = featureArray(e, role)!;
    const aa = featureArray(a, role);
    if (!aa) {
      const kind = role === "state" ? "stateType.arrayType" : "multiArrayType";
      throw new DescriptionMismatchError(
        path,
        name,
        "kind",
        `function ${fn}: ${role} ${name} is not described as a ${kind}`,
      );
    }
    if ((aa.dataType ?? 0) !== ea.dataType) {
      throw new DescriptionMismatchError(
        path,
        name,
        "dtype",
        `function ${fn}: ${role} ${name} has dataType ${arrayDataTypeName(aa.dataType ?? 0)} in the description, ` +
          `${arrayDataTypeName(ea.dataType ?? 0)} in the program`,
      );
    }
    const es = (ea.shape ?? []).map(Number);
    const as = (aa.shape ?? []).map(Number);
    if (es.length !== as.length || es.some((d, k) => d !== as[k])) {
      throw new DescriptionMismatchError(
        path,
        name,
        "shape",
        `function ${fn}: ${role} ${name} has shape ${shapeString(aa.shape)} in the description, ${shapeString(ea.shape)} in the program`,
      );
    }
  });
}

/**
 * Checks a stored ModelDescription against the program: feature names, order, kinds, dtypes and
 * shapes of every input, output and state; function names and the default function.
 * Throws DescriptionMismatchError naming the feature and what disagrees.
 */
export function checkDescription(
  model: MlModel,
  actual: ModelDescriptionProto | undefined,
  path: string,
): void {
  const a = actual ?? {};
  const names = Object.keys(model.program.functions);
  const named = a.defaultFunctionName || model.defaultFunctionName;
  if (names.length > 1 && (!named || !names.includes(named))) {
    throw new DescriptionMismatchError(
      path,
      named ?? "",
      "function",
      `defaultFunctionName ${named || "(unset)"} is not one of the program's functions [${names.join(", ")}]`,
    );
  }
  const expected = describeModel(model);
  const expectedFns = expected.functions ?? [];
  const actualFns = a.functions ?? [];
  if (expectedFns.length === 0) {
    if (actualFns.length > 0) {
      throw new DescriptionMismatchError(
        path,
        actualFns.map((f) => f.name).join(", "),
        "function",
        `the description lists functions [${actualFns.map((f) => f.name).join(", ")}] for a single-function program`,
      );
    }
    const fn = defaultFunctionName(model);
    checkFeatures(path, fn, "input", expected.input ?? [], a.input ?? []);
    checkFeatures(path, fn, "output", expected.output ?? [], a.output ?? []);
    checkFeatures(path, fn, "state", expected.state ?? [], a.state ?? []);
    return;
  }
  // Function order in functions[] need not follow the program's map order: match by name.
  const en = expectedFns.map((f) => f.name ?? "");
  const an = actualFns.map((f) => f.name ?? "");
  const sameSet = en.length === an.length && en.every((n) => an.includes(n));
  if (!sameSet) {
    throw new DescriptionMismatchError(
      path,
      en.join(", "),
      "function",
      `the description lists functions [${an.join(", ")}], the program has [${en.join(", ")}]`,
    );
  }
  if ((a.defaultFunctionName ?? "") !== expected.defaultFunctionName) {
    throw new DescriptionMismatchError(
      path,
      expected.defaultFunctionName ?? "",
      "function",
      `defaultFunctionName is ${a.defaultFunctionName || "(unset)"}, the program's default is ${expected.defaultFunctionName}`,
    );
  }
  for (const e of expectedFns) {
    const fn = e.name ?? "";
    const af = actualFns.find((f) => (f.name ?? "") === fn)!;
    checkFeatures(path, fn, "input", e.input ?? [], af.input ?? []);
    checkFeatures(path, fn, "output", e.output ?? [], af.output ?? []);
    checkFeatures(path, fn, "state", e.state ?? [], af.state ?? []);
  }
}
