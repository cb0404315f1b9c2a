import { allocStorage, type DType, fromFloat32, type StorageOf, toFloat32 } from "./dtype.js";
import { InvalidArgumentError } from "./errors.js";

/** A dense, row-major tensor. Small on purpose: shape, dtype and typed storage. */
export interface Tensor<D extends DType = DType> {
  readonly dtype: D;
  readonly shape: readonly number[];
  readonly data: StorageOf[D];
}

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function checkShape(shape: readonly number[]): void {
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new InvalidArgumentError(`invalid shape [${shape.join(", ")}]`);
  }
}

/** Creates a tensor; with no data it is zero-filled. */
export function tensor<D extends DType>(dtype: D, shape: readonly number[], data?: StorageOf[D]): Tensor<D> {
  checkShape(shape);
  const n = numel(shape);
  const storage = data ?? allocStorage(dtype, n);
  if (storage.length !== n) {
    throw new InvalidArgumentError(
      `${dtype} tensor of shape [${shape.join(", ")}] needs ${n} elements, got ${storage.length}`,
    );
  }
  return { dtype, shape: [...shape], data: storage };
}

/** The tensor's values as fp32 (a copy). */
export function tensorToFloat32(t: Tensor): Float32Array {
  return toFloat32(t.dtype, t.data);
}

/** Converts a tensor to another dtype (through fp32 for floats; exact for f16/bf16 widening). */
export function castTensor<D extends DType>(t: Tensor, dtype: D): Tensor<D> {
  if (t.dtype === dtype) return t as unknown as Tensor<D>;
  return tensor(dtype, t.shape, fromFloat32(dtype, toFloat32(t.dtype, t.data)));
}

export function shapeToString(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}
