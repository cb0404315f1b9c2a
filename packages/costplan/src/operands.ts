/**
 * What each input of an op is, for counting bytes: a weight (at its stored, compressed size), an
 * activation, a tensor read from a state, an index/shape operand, or a compile-time attribute
 * (axes, perm, epsilon) that costs nothing at run time. Types come from the op registry through
 * `resolveFunction`; nothing here re-derives a type.
 */

import { numel } from "@anemll-qwen35/core";
import {
  type ConstValue,
  getOpDef,
  type InputInfo,
  type MilDType,
  milDTypeBits,
  type ResolvedOperation,
  type TensorType,
} from "@anemll-qwen35/ir/mil";

/** Bytes of a tensor at its declared dtype (sub-byte dtypes packed, as in weight.bin). */
export function tensorBytes(t: TensorType): number {
  return Math.ceil((numel(t.shape) * milDTypeBits(t.dtype)) / 8);
}

export function isFloat(d: MilDType): boolean {
  return d === "fp16" || d === "fp32" || d === "bf16" || d === "fp64";
}

/** How a constant is stored. */
export interface WeightInfo {
  /** Bytes in weight.bin (or inline): LUT indices at their bit width + the LUTs, int8 data + scales … */
  readonly storedBytes: number;
  /** Bytes of the dense tensor the constant expands to. */
  readonly denseBytes: number;
  /** "fp16", "LUT4 (768 LUTs)", "int8 blockwise (block 1×32)" … */
  readonly encoding: string;
  /** The stored pieces (key: file@offset, or a name for inline data), for de-duplication. */
  readonly blobs: readonly { readonly key: string; readonly bytes: number }[];
}

/** What the walk knows about a named value of a function. */
export interface VarInfo {
  readonly type: TensorType | undefined;
  /** Produced by const / constexpr_* (load time). */
  readonly weight?: WeightInfo;
  /** Read from a state (read_state, or a view / slice of such a read). */
  readonly fromState?: boolean;
  /** The state input it was read from. */
  readonly state?: string;
  /** A slice_update applied in place to a state read: only this many bytes change. */
  readonly inPlaceBytes?: number;
}

export type OperandRole = "weight" | "activation" | "state" | "index" | "attribute" | "state-handle";

export interface Operand {
  readonly param: string;
  readonly role: OperandRole;
  readonly type: TensorType | undefined;
  /** Bytes at the stored size (weights) or the declared dtype (everything else). */
  readonly bytes: number;
  readonly varName?: string;
  readonly weight?: WeightInfo;
  readonly inPlaceBytes?: number;
  /** For a tensor read from a state: the state input's name. */
  readonly state?: string;
}

/** Inputs that address data (indices, slice bounds, target shapes) rather than being data. */
const INDEX_PARAMS: Readonly<Record<string, readonly string[]>> = {
  gather: ["indices"],
  gather_along_axis: ["indices"],
  slice_by_index: ["begin", "end"],
  slice_update: ["begin", "end"],
  reshape: ["shape"],
  tile: ["reps"],
  fill: ["shape"],
};

export function isIndexParam(opType: string, param: string): boolean {
  return INDEX_PARAMS[opType]?.includes(param) ?? false;
}

function blobKey(cv: ConstValue, fallback: string): string {
  return "blob" in cv ? `${cv.blob.fileName}@${cv.blob.offset}` : fallback;
}

/** Weight info of a `const` op's value. */
export function constWeight(cv: ConstValue, name: string): WeightInfo {
  const bytes = tensorBytes(cv.type);
  return {
    storedBytes: bytes,
    denseBytes: bytes,
    encoding: cv.type.dtype,
    blobs: [{ key: blobKey(cv, name), bytes }],
  };
}

/** Weight info of a constexpr_* op's output: the sum of what its inputs store. */
export function constexprWeight(r: ResolvedOperation, env: ReadonlyMap<string, VarInfo>): WeightInfo {
  let stored = 0;
  const blobs: { key: string; bytes: number }[] = [];
  const parts: Record<string, TensorType> = {};
  for (const [param, infos] of Object.entries(r.args.inputs)) {
    infos.forEach((info, i) => {
      if (info.type.kind !== "tensor") return;
      if (info.type.shape.length === 0 && !isFloat(info.type.dtype)) return; // vector_axis: an attribute
      parts[param] = info.type;
      const src = info.varName ? env.get(info.varName)?.weight : undefined;
      if (src) {
        stored += src.storedBytes;
        blobs.push(...src.blobs);
        return;
      }
      const cv = info.constValue?.();
      const bytes = tensorBytes(info.type);
      stored += bytes;
      const key = cv ? blobKey(cv, `${r.op.name}.${param}[${i}]`) : `${r.op.name}.${param}[${i}]`;
      blobs.push({ key, bytes });
    });
  }
  const out = r.outputs[0];
  return {
    storedBytes: stored,
    denseBytes: tensorBytes(out),
    encoding: encodingOf(r.op.type, parts, out),
    blobs,
  };
}

function encodingOf(opType: string, parts: Record<string, TensorType>, out: TensorType): string {
  if (opType === "constexpr_lut_to_dense" && parts.indices && parts.lut) {
    const bits = milDTypeBits(parts.indices.dtype);
    const luts = numel(parts.lut.shape.slice(0, -2));
    return `LUT${bits} ${parts.lut.dtype} (${luts} LUT${luts === 1 ? "" : "s"})`;
  }
  if (opType === "constexpr_blockwise_shift_scale" && parts.data && parts.scale) {
    const block = parts.data.shape.map((d, i) => d / parts.scale.shape[i]).join("×");
    return `${parts.data.dtype} blockwise (block ${block}, ${parts.scale.dtype} scales${parts.offset ? " + offsets" : ""})`;
  }
  return `${opType} → ${out.dtype}`;
}

/** Classifies every bound input of a resolved op. */
export function operandsOf(r: ResolvedOperation, env: ReadonlyMap<string, VarInfo>): Operand[] {
  const def = r.def;
  const out: Operand[] = [];
  for (const [param, infos] of Object.entries(r.args.inputs)) {
    const pdef = def.params.find((p) => p.name === param);
    for (const info of infos)
      out.push(classify(r.op.type, r.op.name, param, pdef?.const === true, info, env));
  }
  return out;
}

function classify(
  opType: string,
  opName: string,
  param: string,
  constParam: boolean,
  info: InputInfo,
  env: ReadonlyMap<string, VarInfo>,
): Operand {
  if (info.type.kind === "state")
    return { param, role: "state-handle", type: undefined, bytes: 0, varName: info.varName };
  const type = info.type;
  const v = info.varName ? env.get(info.varName) : undefined;
  const base = { param, type, varName: info.varName };
  if (isIndexParam(opType, param)) {
    return info.isConst
      ? { ...base, role: "attribute", bytes: 0 }
      : { ...base, role: "index", bytes: tensorBytes(type) };
  }
  if (info.isConst) {
    // int/bool/string constants and scalar const-only parameters (axes, perm, epsilon) are attributes
    if (!isFloat(type.dtype) || (constParam && type.shape.length === 0))
      return { ...base, role: "attribute", bytes: 0 };
    const w = v?.weight ?? inlineWeight(info, `${opName}.${param}`);
    return { ...base, role: "weight", bytes: w.storedBytes, weight: w };
  }
  if (v?.fromState)
    return { ...base, role: "state", bytes: tensorBytes(type), inPlaceBytes: v.inPlaceBytes, state: v.state };
  return { ...base, role: "activation", bytes: tensorBytes(type) };
}

function inlineWeight(info: InputInfo, name: string): WeightInfo {
  const cv = info.constValue?.();
  if (info.type.kind !== "tensor") throw new Error("unreachable: state operand classified as weight");
  const bytes = tensorBytes(info.type);
  return {
    storedBytes: bytes,
    denseBytes: bytes,
    encoding: info.type.dtype,
    blobs: [{ key: cv ? blobKey(cv, name) : name, bytes }],
  };
}

/** Registry view ops (reshape, squeeze, expand_dims, identity, read_state) move no data. */
export function isViewOp(opType: string): boolean {
  return getOpDef(opType)?.view === true;
}
