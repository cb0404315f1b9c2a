/**
 * `@anemll-qwen35/ir/mil`: Core ML ML Programs — the program model, the op set (one definition per
 * op), the builder, the type checker, the reference interpreter, and `.mlpackage` read/write.
 */
export * from "./builder.js";
export * from "./check.js";
export * from "./errors.js";
export * from "./format/index.js";
export * from "./fp16.js";
export * from "./interpreter.js";
export { type GemmOptions, gemmNT } from "./kernels/gemm.js";
/** The WebAssembly encoder the kernels are written with (also used by the converter's k-means). */
export * as wasmAsm from "./kernels/wasm-asm.js";
export * from "./ops/index.js";
export * from "./printer.js";
export * from "./program.js";
export { constInputInfo, type ResolvedOp, resolveOp } from "./resolve.js";
export {
  allocRt,
  constData,
  constToRt,
  isFloatDType,
  isIntDType,
  literal,
  milDataToRt,
  milDataValue,
  type RtData,
  type RtTensor,
  rtToMilData,
  toMilData,
  zerosRt,
} from "./values.js";
export * from "./var.js";
