/**
 * `@anemll-qwen35/ir/mil`: Core ML ML Programs — the program model, the op set (one definition per
 * op), the builder, the type checker, the reference interpreter, and `.mlpackage` read/write.
 */

// The program model: an MlModel holds a Program of functions, each a block of typed operations
export {
  type Binding,
  type Block,
  type BlobRef,
  type BlobSink,
  type ConstValue,
  DEFAULT_OPSET,
  type MilData,
  type MilDType,
  type MilFunction,
  milDTypeBits,
  type MlModel,
  type ModelMetadata,
  type NamedValueType,
  type Operation,
  type Program,
  type StateType,
  stateType,
  type TensorType,
  tensorType,
  typeToString,
  type ValueType,
} from "./program.js";

// The op set: every op defined once (signature, type inference, reference evaluation)
export {
  getOpDef,
  type InputInfo,
  MIL_OPS,
  OpArgs,
  type OpDef,
  type ParamDef,
  ParamError,
  type Precision,
} from "./ops/index.js";

// Building programs: one typed method per op, each checked as it is added
export { MilBuilder, type MilBuilderOptions, MilProgramBuilder } from "./builder.js";
export { type Arg, type ConstInit, MilVar, type OpOptions } from "./var.js";

// Checking: every op replayed through its definition, as Core ML's loader does
export { checkProgram, type ResolvedOperation, resolveFunction } from "./check.js";

// Running: the reference interpreter (fp32, or fp16 rounded and flushed as the ANE computes)
export {
  type InterpreterOptions,
  interpret,
  MilInterpreter,
  MilState,
  type NonFiniteMode,
  type NonFiniteReport,
  type OpTiming,
  type RunOptions,
  type RunProfile,
  type RunResult,
  type WeightMode,
} from "./interpreter.js";

// Printing: one op per line with its result types
export { formatOperation, printFunction, type PrintOptions, printProgram } from "./printer.js";

// .mlpackage folders and their weight files
export {
  digestMlPackage,
  MlPackageWriter,
  type MlPackageWriterOptions,
  type ReadMlPackageOptions,
  readMlPackage,
  writeMlPackage,
} from "./format/package.js";
export { BlobReader, BlobWriter, type BlobWriterOptions } from "./format/blob.js";

// Errors
export {
  MilBindingError,
  MilNonFiniteError,
  MilOutputTypeError,
  MilProgramError,
  MilRuntimeError,
  MilTypeError,
  MilUnknownOpError,
  type OpLocation,
} from "./errors.js";
export {
  type BlobErrorReason,
  BlobFormatError,
  DescriptionMismatchError,
  MilFormatError,
  MlPackageError,
  type MlPackageErrorReason,
} from "./format/errors.js";
export { IoTypeError } from "./format/description.js";

/** The WebAssembly encoder the interpreter's kernels are written with (the converter's k-means uses it too). */
export * as wasmAsm from "./kernels/wasm-asm.js";
