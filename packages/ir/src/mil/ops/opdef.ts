/**
 * The shape of one MIL op definition. Every op is defined once — signature, type/shape
 * inference and reference evaluation side by side — and the builder, the type checker, the
 * interpreter and the cost model (costplan, which keeps its per-op work formulas keyed by op type
 * and reads every type from here) all use that one definition.
 *
 * Signatures follow coremltools' op definitions for opset CoreML8 (iOS18): for each op the
 * newest version at or below iOS18 (`coremltools/converters/mil/mil/ops/defs/iOS15..iOS18`).
 */

import { elementsToBytes } from "../format/elements.js";
import type { ConstValue, MilData, MilDType, TensorType, ValueType } from "../program.js";
import { shapeStr } from "../shape.js";
import type { RtTensor } from "../values.js";
import { constData } from "../values.js";

/** Allowed dtypes of an input: a fixed list, or the name of one of the op's type domains. */
export type DTypeSpec = readonly MilDType[] | string;

export interface ParamDef {
  readonly name: string;
  /** Optional inputs may be left out; those with a `default` are then filled in with it. */
  readonly optional?: boolean;
  /** Must be a compile-time constant (a const / constexpr_* output or an inline value). */
  readonly const?: boolean;
  /** Takes several bindings (e.g. `concat.values`). */
  readonly variadic?: boolean;
  /** Takes a state (read_state / write_state `input`). */
  readonly state?: boolean;
  /** Allowed dtypes; inputs naming the same domain must share one dtype. Absent: any dtype. */
  readonly dtype?: DTypeSpec;
  /** The strings a string-valued input may take (typed as their union in the builder). */
  readonly values?: readonly string[];
  /**
   * coremltools' non-None default (`default_inputs()`), which Core ML expects emitted explicitly.
   * Called once the required inputs are known; `undefined` when no default applies.
   */
  readonly default?: (a: OpArgs) => ConstValue | undefined;
}

export type Precision = "fp32" | "fp16";

/** What evaluation may ask of the interpreter. */
export interface EvalContext {
  readonly precision: Precision;
  readState(name: string): RtTensor;
  writeState(name: string, value: RtTensor): void;
}

export type OpsetVersion = "iOS15" | "iOS16" | "iOS17" | "iOS18";

export interface OpDef {
  readonly type: string;
  /** coremltools op version whose signature this is (the op exists from `available` on). */
  readonly version: OpsetVersion;
  /** First opset in which the op exists at all (defaults to `version`). */
  readonly available?: OpsetVersion;
  readonly params: readonly ParamDef[];
  readonly domains?: Readonly<Record<string, readonly MilDType[]>>;
  /** Outputs are compile-time constants (const, constexpr_*): evaluated once and cached. */
  readonly constexpr?: boolean;
  /** Output values are the input's values unchanged (reshape, squeeze, ...): nothing to round. */
  readonly view?: boolean;
  /** How many outputs: one (default), several (split, topk) or none (write_state). */
  readonly outputs?: "one" | "many" | "none";
  /** What the builder method says about the op, when its name is not enough. */
  readonly doc?: string;
  /** Output types from the (validated) inputs; throws ParamError for bad shapes/values. */
  infer(a: OpArgs): TensorType[];
  /** Reference evaluation; returns one tensor per output type. */
  evaluate(a: OpArgs, out: readonly TensorType[], ctx: EvalContext): RtTensor[];
  /**
   * constexpr decompression ops: the one result kept compressed (a packed weight that matrix
   * products and gather decode where they read it), holding the values `evaluate` gives after
   * the interpreter's fp16 rounding of constants. undefined where this layout has no packed form.
   */
  compressed?(a: OpArgs, out: readonly TensorType[], opts: CompressOptions): RtTensor | undefined;
}

export interface CompressOptions {
  /** fp16 results: flush subnormals to zero (fp16 mode with flushSubnormals). */
  readonly flushSubnormals: boolean;
}

/** What is known about one bound input. */
export interface InputInfo {
  readonly type: ValueType;
  /** Bound to a compile-time constant. */
  readonly isConst: boolean;
  /** Variable name when bound by name. */
  readonly varName?: string;
  /** Values in compute form, when known (constants at build/check time; everything at run time). */
  value(): RtTensor | undefined;
  /** The stored constant, for inputs bound to a const op or an inline value. */
  constValue?(): ConstValue | undefined;
}

/** Raised by op definitions; the caller adds the op's type and name. */
export class ParamError extends Error {
  constructor(
    readonly param: string | undefined,
    readonly detail: string,
  ) {
    super(`${param ? `${param} ` : ""}${detail}`);
  }
}

/** Typed access to an op's inputs, shared by inference and evaluation. */
export class OpArgs {
  constructor(
    readonly opType: string,
    readonly opName: string,
    readonly inputs: Readonly<Record<string, readonly InputInfo[]>>,
  ) {}

  fail(param: string | undefined, detail: string): never {
    throw new ParamError(param, detail);
  }

  has(p: string): boolean {
    return (this.inputs[p]?.length ?? 0) > 0;
  }

  info(p: string): InputInfo {
    const i = this.inputs[p];
    if (!i || i.length === 0) this.fail(p, "is required but missing");
    return i[0];
  }

  type(p: string): TensorType {
    const t = this.info(p).type;
    if (t.kind !== "tensor") this.fail(p, "must be a tensor, got a state");
    return t;
  }

  typeOpt(p: string): TensorType | undefined {
    return this.has(p) ? this.type(p) : undefined;
  }

  types(p: string): TensorType[] {
    return (this.inputs[p] ?? []).map((i) => {
      if (i.type.kind !== "tensor") this.fail(p, "must be tensors");
      return i.type;
    });
  }

  /** The bound variable's name (state inputs). */
  varName(p: string): string {
    const n = this.info(p).varName;
    if (n === undefined) this.fail(p, "must be bound to a named variable");
    return n;
  }

  value(p: string): RtTensor {
    const v = this.info(p).value();
    if (!v) this.fail(p, "must be known when the op is built (a compile-time constant)");
    return v;
  }

  valueOpt(p: string): RtTensor | undefined {
    return this.has(p) ? this.value(p) : undefined;
  }

  values(p: string): RtTensor[] {
    return (this.inputs[p] ?? []).map((i) => {
      const v = i.value();
      if (!v) this.fail(p, "must be known");
      return v;
    });
  }

  /**
   * Payload bytes of a constant input (sub-byte types packed LSB first), read a slice at a time:
   * from its weight file when it has one, else from its in-memory data.
   */
  rawBytes(p: string): (into: Uint8Array, byteOffset: number) => void {
    const info = this.info(p);
    const cv = info.constValue?.();
    if (!cv) this.fail(p, "must be a compile-time constant");
    if ("blob" in cv && cv.readBytes) return cv.readBytes;
    const bytes = elementsToBytes(cv.type.dtype, constData(cv));
    return (into, byteOffset) => into.set(bytes.subarray(byteOffset, byteOffset + into.length));
  }

  /** Stored data of a constant input (for constexpr decoding without widening). */
  raw(p: string): { type: TensorType; data: MilData } {
    const info = this.info(p);
    const cv = info.constValue?.();
    if (!cv) this.fail(p, "must be a compile-time constant");
    return { type: cv.type, data: constData(cv) };
  }

  ints(p: string): number[] {
    const v = this.value(p);
    if (v.type.shape.length > 1) this.fail(p, `must be a scalar or 1-D, got shape ${shapeStr(v.type.shape)}`);
    return Array.from(v.data as ArrayLike<number>, Number);
  }

  int(p: string): number {
    const v = this.value(p);
    if (v.type.shape.length !== 0) this.fail(p, `must be a scalar, got shape ${shapeStr(v.type.shape)}`);
    return Number((v.data as ArrayLike<number>)[0]);
  }

  num(p: string): number {
    return this.int(p);
  }

  bool(p: string): boolean {
    return this.int(p) !== 0;
  }

  bools(p: string): boolean[] {
    return this.ints(p).map((v) => v !== 0);
  }

  str(p: string): string {
    const v = this.value(p);
    if (v.type.dtype !== "string" || v.type.shape.length !== 0) this.fail(p, "must be a string scalar");
    return (v.data as string[])[0];
  }
}
