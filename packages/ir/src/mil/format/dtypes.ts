/**
 * The three numberings of element types in a Core ML package: MIL.proto `DataType`, the weight
 * file's `BlobDataType` (a different numbering) and the model-description `ArrayDataType`.
 * Source: shared/reference/coreml-format.md §2.2, §2.3, §3.1 (pitfall: fp16 is 10 in MIL.proto, 1 in blobs).
 */
import type { MilDType } from "../program.js";

/** MIL.proto `DataType` codes. */
export const MIL_DATA_TYPE: Readonly<Record<MilDType, number>> = {
  bool: 1,
  string: 2,
  fp16: 10,
  fp32: 11,
  fp64: 12,
  bf16: 13,
  int8: 21,
  int16: 22,
  int32: 23,
  int64: 24,
  int4: 25,
  uint8: 31,
  uint16: 32,
  uint32: 33,
  uint4: 35,
  uint2: 36,
  uint1: 37,
  uint6: 38,
  uint3: 39,
};

const MIL_DTYPE_BY_CODE = new Map<number, MilDType>(
  Object.entries(MIL_DATA_TYPE).map(([k, v]) => [v, k as MilDType]),
);

/** MilDType for a MIL.proto DataType code, or undefined for codes we do not model (fp8, uint64). */
export function milDTypeFromCode(code: number): MilDType | undefined {
  return MIL_DTYPE_BY_CODE.get(code);
}

/** Weight-file `BlobDataType` codes (blob_metadata.mil_dtype). Types absent here cannot be stored in blobs. */
export const BLOB_DATA_TYPE: Readonly<Partial<Record<MilDType, number>>> = {
  fp16: 1,
  fp32: 2,
  uint8: 3,
  int8: 4,
  bf16: 5,
  int16: 6,
  uint16: 7,
  int4: 8,
  uint1: 9,
  uint2: 10,
  uint4: 11,
  uint3: 12,
  uint6: 13,
  int32: 14,
  uint32: 15,
};

const BLOB_DTYPE_BY_CODE = new Map<number, MilDType>(
  Object.entries(BLOB_DATA_TYPE).map(([k, v]) => [v as number, k as MilDType]),
);

/** Name for a blob dtype code (fp8 codes 16/17 are known to the format but not modelled here). */
export function blobDTypeFromCode(code: number): MilDType | undefined {
  return BLOB_DTYPE_BY_CODE.get(code);
}

export function isBlobDType(dtype: MilDType): boolean {
  return BLOB_DATA_TYPE[dtype] !== undefined;
}

/** Sub-byte types, packed LSB-first (int4 as two's complement). */
export const SUB_BYTE_BITS: Readonly<Partial<Record<MilDType, number>>> = {
  int4: 4,
  uint1: 1,
  uint2: 2,
  uint3: 3,
  uint4: 4,
  uint6: 6,
};

export function isSubByte(dtype: MilDType): boolean {
  return SUB_BYTE_BITS[dtype] !== undefined;
}

/** Model-description `ArrayFeatureType.ArrayDataType` codes. */
export const ARRAY_DATA_TYPE = {
  FLOAT32: 65568,
  DOUBLE: 65600,
  INT32: 131104,
  INT8: 131080,
  FLOAT16: 65552,
} as const;

/**
 * The model input/output dtypes an ML Program may declare (coremltools `cast_to_framework_io_dtype`):
 * fp32 and int32 always, fp16 from spec 7. (int8 from spec 10 is not offered: this project targets spec 9.)
 */
export function ioArrayDataType(dtype: MilDType, specificationVersion: number): number | undefined {
  if (dtype === "fp32") return ARRAY_DATA_TYPE.FLOAT32;
  if (dtype === "int32") return ARRAY_DATA_TYPE.INT32;
  if (dtype === "fp16" && specificationVersion >= 7) return ARRAY_DATA_TYPE.FLOAT16;
  return undefined;
}

export function arrayDataTypeName(code: number): string {
  for (const [name, value] of Object.entries(ARRAY_DATA_TYPE)) if (value === code) return name;
  return `ArrayDataType(${code})`;
}
