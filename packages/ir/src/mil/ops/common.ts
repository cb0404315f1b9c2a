/** Small helpers shared by the op definition files. */
import type { ConstValue, MilDType, TensorType } from "../program.js";
import { milDTypeBits, tensorType } from "../program.js";
import { normAxis, shapeStr } from "../shape.js";
import { literal, numelOf, toMilData } from "../values.js";
import type { OpArgs } from "./opdef.js";

/** Type-domain lists as coremltools spells them for iOS18. */
export const FP: readonly MilDType[] = ["fp16", "fp32"];
export const FP_I32: readonly MilDType[] = ["fp16", "fp32", "int32"];
export const FP_I32_BOOL: readonly MilDType[] = ["fp16", "fp32", "int32", "bool"];
/** iOS17 tensor-transformation domain. */
export const ANY17: readonly MilDType[] = [
  "fp16",
  "fp32",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "bool",
];
export const IDX17: readonly MilDType[] = ["int8", "int16", "int32"];
export const GATHER_T: readonly MilDType[] = ["fp16", "fp32", "int32", "int16", "uint16", "int8", "uint8"];
export const GATHER_I: readonly MilDType[] = ["int32", "int16", "uint16", "int8", "uint8"];
export const I32: readonly MilDType[] = ["int32"];
export const BOOL: readonly MilDType[] = ["bool"];
export const STR: readonly MilDType[] = ["string"];

export const tt = tensorType;

/** Literal constants for default inputs. */
export const lit = {
  i32: (v: number): ConstValue => literal("int32", v),
  i32s: (v: readonly number[]): ConstValue => literal("int32", v),
  bool: (v: boolean): ConstValue => literal("bool", v),
  str: (v: string): ConstValue => literal("string", v),
  fp: (dtype: MilDType, v: number): ConstValue => literal(dtype, v),
  zeros: (dtype: MilDType, shape: readonly number[]): ConstValue => {
    return {
      type: tensorType(dtype, shape),
      data: toMilData(dtype, new Array<number>(numelOf(shape)).fill(0)),
    };
  },
};

export function bytesOf(t: TensorType): number {
  return Math.ceil((numelOf(t.shape) * milDTypeBits(t.dtype)) / 8);
}

/** Reads and normalises an axis parameter. */
export function axisArg(a: OpArgs, p: string, rank: number): number {
  const raw = a.int(p);
  const ax = normAxis(raw, rank);
  if (ax === undefined) a.fail(p, `${raw} is out of range for rank ${rank}`);
  return ax;
}

/** Reads and normalises a list of distinct axes. */
export function axesArg(a: OpArgs, p: string, rank: number): number[] {
  const raw = a.ints(p);
  const out: number[] = [];
  for (const r of raw) {
    const ax = normAxis(r, rank);
    if (ax === undefined) a.fail(p, `${r} is out of range for rank ${rank} (axes [${raw.join(", ")}])`);
    if (out.includes(ax)) a.fail(p, `repeats axis ${r} (axes [${raw.join(", ")}])`);
    out.push(ax);
  }
  return out;
}

export function expectRank(a: OpArgs, p: string, t: TensorType, lo: number, hi = lo): void {
  const r = t.shape.length;
  if (r < lo || r > hi) {
    const want =
      lo === hi ? `rank ${lo}` : hi === Number.POSITIVE_INFINITY ? `rank >= ${lo}` : `rank ${lo}..${hi}`;
    a.fail(p, `must have ${want}, got ${shapeStr(t.shape)}`);
  }
}
