/**
 * @anemll-qwen35/core: the dependency-free base of the anemll-qwen35 packages — the error types
 * every package throws, dtypes with exact fp16/bf16 conversions, and a small dense Tensor.
 */

// Errors: every error a user can cause is an AnemllError with a stable `code`
export { AnemllError, InvalidArgumentError } from "./errors.js";

// Tensors: dtype, shape and typed storage, dense and row-major
export {
  castTensor,
  numel,
  sameShape,
  shapeToString,
  type Tensor,
  tensor,
  tensorToFloat32,
} from "./tensor.js";

// Dtypes and their typed storage (f16 and bf16 held as raw 16-bit patterns)
export {
  BYTES_PER_ELEMENT,
  type DType,
  firstNonFinite,
  fromFloat32,
  type Storage,
  type StorageOf,
  storageBytes,
  storageFromBytes,
  toFloat32,
} from "./dtype.js";

// Scalar conversions: IEEE-754 round-to-nearest-even, with subnormals, infinities and NaN
export { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, roundToF16 } from "./dtype.js";
