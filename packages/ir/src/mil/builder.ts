/**
 * MilBuilder: builds MIL functions op by op. Every op is checked and typed by its registry
 * definition the moment it is added, so a bad shape fails where it is written, naming the op
 * and the input. Optional inputs with a coremltools default are emitted explicitly (Core ML
 * expects them), literals become `const` ops (inline values for constexpr_* inputs, as
 * coremltools writes them), and large constants stream to a BlobSink when one is given.
 *
 *   const b = new MilBuilder({ opset: "CoreML8" });
 *   const x = b.input("x", tensorType("fp16", [1, 1, 64]));
 *   const w = b.const(weights, "fp16", [32, 64], { name: "w" });
 *   b.output("y", b.linear({ x, weight: w, name: "proj" }));
 *   const model = b.model();
 */
import { type DType, InvalidArgumentError, type Tensor } from "@anemll-qwen35/core";
import { MilOpMethods } from "./builder-ops.gen.js";
import { MilProgramError, MilUnknownOpError } from "./errors.js";
import { getOpDef, type InputInfo, type OpDef, opAvailableIn, specVersionForOpset } from "./ops/index.js";
import type {
  Binding,
  BlobSink,
  ConstValue,
  MilDType,
  MilFunction,
  MlModel,
  ModelMetadata,
  NamedValueType,
  Operation,
  Program,
  StateType,
  TensorType,
} from "./program.js";
import { DEFAULT_OPSET, milDTypeBits, stateType, tensorType, typeToString } from "./program.js";
import { constInputInfo, resolveOp } from "./resolve.js";
import { constToRt, isFloatDType, numelOf, toMilData } from "./values.js";
import { type Arg, type ConstInit, MilVar, type OpOptions } from "./var.js";

export interface MilBuilderOptions {
  /** Function opset, default "CoreML8" (spec 9 / iOS 18). */
  readonly opset?: string;
  /** Receives large constants (>= 10 elements, and all sub-byte ones) instead of keeping them inline. */
  readonly blobSink?: BlobSink;
}

interface OpRecord {
  readonly type: string;
  name: string;
  readonly inputs: Record<string, (MilVar | ConstValue)[]>;
  readonly outputs: MilVar[];
  readonly value?: ConstValue;
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_@]*$/;
/** Constants at most this large stay readable during building (axes, shapes, begin/end, ...). */
const SMALL_CONST = 4096;

const DTYPE_OF_TENSOR: Readonly<Record<DType, MilDType>> = {
  f32: "fp32",
  f16: "fp16",
  bf16: "bf16",
  i8: "int8",
  u8: "uint8",
  i16: "int16",
  i32: "int32",
  i64: "int64",
  bool: "bool",
};

function isTensor(x: unknown): x is Tensor {
  return (
    typeof x === "object" &&
    x !== null &&
    "dtype" in x &&
    "shape" in x &&
    "data" in x &&
    (x as Tensor).dtype in DTYPE_OF_TENSOR
  );
}

function isConstInit(x: unknown): x is ConstInit {
  return (
    typeof x === "object" && x !== null && !Array.isArray(x) && "data" in x && "dtype" in x && "shape" in x
  );
}

function snake(k: string): string {
  return k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** Builds one MIL function; standalone, or one function of a MilProgramBuilder. */
export class MilBuilder extends MilOpMethods {
  readonly opset: string;
  readonly functionName: string;
  private readonly sink: BlobSink | undefined;
  private readonly parent: MilProgramBuilder | undefined;
  private readonly inputs: MilVar[] = [];
  private readonly ops: OpRecord[] = [];
  private readonly outputs: MilVar[] = [];
  private readonly names = new Set<string>();
  private readonly counters = new Map<string, number>();
  /** Name prefixes of the enclosing `scope` calls. */
  private scopes: readonly string[] = [];

  constructor(opts: MilBuilderOptions = {}, program?: MilProgramBuilder, functionName = "main") {
    super();
    this.opset = opts.opset ?? DEFAULT_OPSET;
    specVersionForOpset(this.opset); // validates the opset string
    this.sink = opts.blobSink;
    this.parent = program;
    this.functionName = functionName;
  }

  // -------------------------------------------------------------------------------------------
  // inputs, states, constants

  input(name: string, type: TensorType): MilVar {
    if (type.kind !== "tensor")
      throw new InvalidArgumentError(`input '${name}': expected a tensor type, got ${typeToString(type)}`);
    const v = new MilVar(this, this.claim(name, "input"), tensorType(type.dtype, type.shape), false);
    this.inputs.push(v);
    return v;
  }

  /** A state input (iOS18), e.g. a KV cache: read with read_state, write with write_state. */
  state(name: string, type: TensorType): MilVar {
    const st: StateType = stateType(tensorType(type.dtype, type.shape));
    const v = new MilVar(this, this.claim(name, "state"), st, false);
    this.inputs.push(v);
    return v;
  }

  /**
   * A `const` op. `data` may be a Tensor (dtype and shape taken from it), typed data, numbers
   * or booleans (converted to `dtype`; fp16/bf16 Uint16Array data are taken as bit patterns).
   */
  const(
    data: Tensor | ConstInit["data"] | number | boolean | string,
    dtype?: MilDType,
    shape?: readonly number[],
    opts: OpOptions = {},
  ): MilVar {
    let cv: ConstValue;
    if (isTensor(data)) {
      const dt = dtype ?? DTYPE_OF_TENSOR[data.dtype];
      const sh = shape ?? data.shape;
      cv = this.makeConst({
        data: data.dtype === "i64" ? Array.from(data.data as BigInt64Array, Number) : data.data,
        dtype: dt,
        shape: sh,
      });
    } else if (typeof data === "number" || typeof data === "boolean" || typeof data === "string") {
      const dt = dtype ?? (typeof data === "string" ? "string" : typeof data === "boolean" ? "bool" : "fp32");
      cv = this.makeConst({ data: [data] as never, dtype: dt, shape: shape ?? [] });
    } else {
      if (!dtype) throw new InvalidArgumentError("const: dtype is required for array data");
      cv = this.makeConst({ data, dtype, shape: shape ?? [data.length] });
    }
    return this.emitConst(
      cv,
      opts.name ? this.claim(this.scoped(opts.name), "const") : this.autoName("const"),
    );
  }

  private makeConst(init: ConstInit): ConstValue {
    const n = numelOf(init.shape);
    if (init.shape.some((d) => !Number.isInteger(d) || d < 0))
      throw new InvalidArgumentError(`const: invalid shape [${init.shape.join(", ")}]`);
    if (init.data.length !== n) {
      throw new InvalidArgumentError(
        `const: shape [${init.shape.join(", ")}] needs ${n} values, got ${init.data.length}`,
      );
    }
    const type = tensorType(init.dtype, init.shape);
    const data = toMilData(init.dtype, init.data as ArrayLike<number>);
    // coremltools' rule: >= 10 elements of a numeric type go to the weight file; sub-byte
    // types always do
    const subByte = milDTypeBits(init.dtype) < 8;
    if (this.sink && (n >= 10 || subByte) && init.dtype !== "bool" && init.dtype !== "string") {
      const blob = this.sink.write(type, data);
      if (n <= SMALL_CONST) return { type, blob, load: () => data };
      return { type, blob };
    }
    return { type, data };
  }

  private emitConst(cv: ConstValue, name: string): MilVar {
    const v = new MilVar(this, name, cv.type, true, cv);
    this.ops.push({ type: "const", name, inputs: {}, outputs: [v], value: cv });
    return v;
  }

  /**
   * The constant `v` of another function of the same program, in this function: the same op
   * (a const, or a constexpr_* op over inline values) over the same stored data — the blob refs
   * are shared, nothing is written again. Multifunction packages share their weights this way.
   */
  adopt(v: MilVar, name: string = v.name): MilVar {
    const from = v._owner as MilBuilder; // every MilVar is made by a MilBuilder
    if (from === this) return v;
    if (!this.parent || from.parent !== this.parent)
      throw new InvalidArgumentError(
        `adopt '${v.name}': only a constant of another function of the same program`,
      );
    const producer = from.ops.find((o) => o.outputs.includes(v));
    if (producer?.type === "const" && v._const) return this.emitConst(v._const, this.claim(name, "const"));
    const def = producer && getOpDef(producer.type);
    const values = producer ? Object.values(producer.inputs).flat() : [];
    if (!producer || !def?.constexpr || values.some((x) => x instanceof MilVar))
      throw new InvalidArgumentError(`adopt '${v.name}': not a constant (${producer?.type ?? "an input"})`);
    const out = new MilVar(this, this.claim(name, producer.type), v.type, true);
    this.ops.push({ type: producer.type, name: out.name, inputs: { ...producer.inputs }, outputs: [out] });
    return out;
  }

  // -------------------------------------------------------------------------------------------
  // the generic op

  /**
   * Adds an op by MIL type with MIL input names (snake_case). Returns its outputs.
   * Prefer the typed methods (`linear`, `matmul`, ...), which call this.
   */
  op(
    type: string,
    args: Readonly<Record<string, Arg | readonly MilVar[] | undefined>>,
    opts: OpOptions = {},
  ): MilVar[] {
    const name = opts.name !== undefined ? this.claim(this.scoped(opts.name), type) : this.autoName(type);
    const loc = { opType: type, opName: name, fn: this.functionName };
    const def = getOpDef(type);
    if (!def || type === "const") {
      this.names.delete(name);
      throw new MilUnknownOpError(loc, type === "const" ? "is added with const()" : "is not a known MIL op");
    }
    if (!opAvailableIn(def, this.opset)) {
      this.names.delete(name);
      throw new MilUnknownOpError(loc, `is not available in opset ${this.opset}`);
    }
    try {
      return this.addOp(def, name, loc, args);
    } catch (e) {
      this.names.delete(name);
      throw e;
    }
  }

  private addOp(
    def: OpDef,
    name: string,
    loc: { opType: string; opName: string; fn: string },
    args: Readonly<Record<string, Arg | readonly MilVar[] | undefined>>,
  ): MilVar[] {
    const infos: Record<string, InputInfo[]> = {};
    const bound: Record<string, (MilVar | ConstValue)[]> = {};
    const pending: [string, Arg][] = [];
    const domains: Record<string, MilDType> = {};
    let firstDtype: MilDType | undefined;
    // vars first: they fix the type domains that literals then follow
    for (const [key, raw] of Object.entries(args)) {
      if (raw === undefined) continue;
      const p = def.params.find((q) => q.name === key);
      const list =
        Array.isArray(raw) && raw.some((r) => r instanceof MilVar)
          ? (raw as readonly MilVar[])
          : [raw as Arg];
      if (!(list[0] instanceof MilVar)) {
        pending.push([key, raw as Arg]);
        continue;
      }
      for (const v of list) {
        if (!(v instanceof MilVar))
          throw new InvalidArgumentError(`${loc.opType} '${name}': ${key} mixes vars and literals`);
        if (v._owner !== this) {
          throw new InvalidArgumentError(
            `${loc.opType} '${name}': ${key} is '${v.name}' from another function`,
          );
        }
        if (v.type.kind === "tensor") {
          firstDtype ??= v.type.dtype;
          if (p && typeof p.dtype === "string") domains[p.dtype] ??= v.type.dtype;
        }
      }
      infos[key] = list.map((v) => this.info(v as MilVar));
      bound[key] = [...(list as MilVar[])];
    }
    const literalValues: Record<string, ConstValue> = {};
    // explicitly typed data fixes its domain too; plain literals come last
    pending.sort((p, q) => Number(!isConstInit(p[1])) - Number(!isConstInit(q[1])));
    for (const [key, raw] of pending) {
      const p = def.params.find((q) => q.name === key);
      let init: ConstInit;
      if (isConstInit(raw)) {
        init = raw;
        if (p && typeof p.dtype === "string") domains[p.dtype] ??= raw.dtype;
      } else {
        const values = (Array.isArray(raw) ? raw : [raw]) as (number | boolean | string)[];
        const shape = Array.isArray(raw) ? [raw.length] : [];
        init = {
          data: values as never,
          dtype: this.literalDType(def, p?.dtype, values, domains, firstDtype),
          shape,
        };
      }
      let cv: ConstValue;
      try {
        cv = this.makeConst(init);
      } catch (e) {
        throw new InvalidArgumentError(`${loc.opType} '${name}': ${key}: ${(e as Error).message}`, {
          cause: e,
        });
      }
      literalValues[key] = cv;
      infos[key] = [constInputInfo(cv)];
    }
    const resolved = resolveOp(def, loc, infos);
    // literal and default inputs: inline for constexpr ops, else const ops named <op>_<input>
    const emit = (key: string, cv: ConstValue) => {
      bound[key] = [def.constexpr ? cv : this.emitConst(cv, this.uniqueName(`${name}_${key}`))];
    };
    for (const p of def.params) {
      if (literalValues[p.name]) emit(p.name, literalValues[p.name]);
      else if (resolved.defaults[p.name]) emit(p.name, resolved.defaults[p.name]);
    }
    const outs = resolved.outputs.map(
      (t, i) =>
        new MilVar(
          this,
          resolved.outputs.length === 1 ? name : this.uniqueName(`${name}_${i}`),
          t,
          def.constexpr === true,
        ),
    );
    // keep the op's inputs in signature order
    const ordered: Record<string, (MilVar | ConstValue)[]> = {};
    for (const p of def.params) if (bound[p.name]) ordered[p.name] = bound[p.name];
    this.ops.push({ type: def.type, name, inputs: ordered, outputs: outs });
    return outs;
  }

  private info(v: MilVar): InputInfo {
    return {
      type: v.type,
      isConst: v.isConst,
      varName: v.name,
      value: () => {
        if (!v._const || numelOf((v.type as TensorType).shape) > SMALL_CONST) return undefined;
        v._small ??= constToRt(v._const);
        return v._small;
      },
      constValue: () => v._const,
    };
  }

  private literalDType(
    def: OpDef,
    spec: string | readonly MilDType[] | undefined,
    values: readonly (number | boolean | string)[],
    domains: Record<string, MilDType>,
    firstDtype: MilDType | undefined,
  ): MilDType {
    if (typeof spec === "string" && domains[spec]) return domains[spec];
    const allowed: readonly MilDType[] =
      spec === undefined ? [] : typeof spec === "string" ? (def.domains?.[spec] ?? []) : spec;
    const v = values[0];
    if (typeof v === "string") return "string";
    if (typeof v === "boolean") return "bool";
    if (allowed.length === 0) return firstDtype && isFloatDType(firstDtype) ? firstDtype : "fp32";
    if (allowed.includes("fp32")) return "fp32";
    if (allowed.includes("fp16")) return "fp16";
    if (allowed.includes("int32")) return "int32";
    return allowed[0];
  }

  // -------------------------------------------------------------------------------------------
  // names and outputs

  /**
   * Runs `build` (sync or async) with `prefix` scoping the names given inside it: an op named "qkv"
   * in scope "l3_gdn" is "l3_gdn_qkv". Scopes nest; inputs, states and outputs are never scoped.
   */
  scope<T>(prefix: string, build: () => T): T {
    return this.withScopes([...this.scopes, prefix], build);
  }

  /** Runs `build` with no scope (constants named for what they are, e.g. a checkpoint tensor). */
  unscoped<T>(build: () => T): T {
    return this.withScopes([], build);
  }

  private withScopes<T>(scopes: string[], build: () => T): T {
    const saved = this.scopes;
    this.scopes = scopes;
    const restore = () => {
      this.scopes = saved;
    };
    let result: T;
    try {
      result = build();
    } catch (err) {
      restore();
      throw err;
    }
    if (result instanceof Promise) return result.finally(restore) as T;
    restore();
    return result;
  }

  private scoped(name: string): string {
    return this.scopes.length === 0 ? name : `${this.scopes.join("_")}_${name}`;
  }

  private claim(name: string, what: string): string {
    if (!IDENT.test(name)) {
      throw new InvalidArgumentError(
        `${what} name '${name}' is not a MIL identifier ([A-Za-z_][A-Za-z0-9_@]*)`,
      );
    }
    if (this.names.has(name))
      throw new InvalidArgumentError(
        `${what} name '${name}' is already used in function '${this.functionName}'`,
      );
    this.names.add(name);
    return name;
  }

  private uniqueName(base: string): string {
    let name = base;
    for (let i = 1; this.names.has(name); i++) name = `${base}_${i}`;
    this.names.add(name);
    return name;
  }

  private autoName(type: string): string {
    let n = this.counters.get(type) ?? 0;
    let name = `${type}_${n}`;
    while (this.names.has(name)) name = `${type}_${++n}`;
    this.counters.set(type, n + 1);
    this.names.add(name);
    return name;
  }

  /**
   * Declares a function output named `name`. An op result is renamed to `name`; a function
   * input (or a var already output under another name) goes through an `identity` op.
   */
  output(name: string, v: MilVar): this {
    if (v._owner !== this)
      throw new InvalidArgumentError(`output '${name}': '${v.name}' belongs to another function`);
    if (v.type.kind !== "tensor")
      throw new InvalidArgumentError(`output '${name}': '${v.name}' is a state; read it first`);
    if (this.outputs.some((o) => o.name === name))
      throw new InvalidArgumentError(`output '${name}' is declared twice`);
    if (v.name === name) {
      this.outputs.push(v);
      return this;
    }
    const producer = this.ops.find((o) => o.outputs.includes(v));
    if (producer && !this.outputs.includes(v) && producer.type !== "const") {
      v._name = this.claim(name, "output");
      if (producer.outputs.length === 1) producer.name = v._name;
      this.outputs.push(v);
      return this;
    }
    this.outputs.push(this.identity({ x: v, name }));
    return this;
  }

  /** Emits write_state + read_state, like coremltools' coreml_update_state; returns the read. */
  coremlUpdateState(state: MilVar, value: MilVar, opts: OpOptions = {}): MilVar {
    this.writeState({ input: state, data: value });
    return this.readState({ input: state, name: opts.name });
  }

  // -------------------------------------------------------------------------------------------
  // results

  /** The function built so far. */
  function(): MilFunction {
    if (this.outputs.length === 0)
      throw new MilProgramError(`function '${this.functionName}' has no outputs; call output()`);
    const toBinding = (x: MilVar | ConstValue): Binding =>
      x instanceof MilVar ? { kind: "var", name: x.name } : { kind: "value", value: x };
    const operations: Operation[] = this.ops.map((o) => {
      const inputs: Record<string, Binding[]> = {};
      for (const [k, vs] of Object.entries(o.inputs)) inputs[k] = vs.map(toBinding);
      const outputs: NamedValueType[] = o.outputs.map((v) => ({ name: v.name, type: v.type }));
      return o.value
        ? { type: o.type, name: o.name, inputs, outputs, value: o.value }
        : { type: o.type, name: o.name, inputs, outputs };
    });
    return {
      inputs: this.inputs.map((v) => ({ name: v.name, type: v.type })),
      opset: this.opset,
      block: { inputs: [], outputs: this.outputs.map((v) => v.name), operations },
    };
  }

  /** A single-function program ("main"), or the whole program when part of a MilProgramBuilder. */
  program(): Program {
    if (this.parent) return this.parent.program();
    return { version: 1, functions: { [this.functionName]: this.function() } };
  }

  /** An ML Program model (spec version from the opset: CoreML8 -> 9). */
  model(opts: { metadata?: ModelMetadata } = {}): MlModel {
    if (this.parent) return this.parent.model(opts);
    return {
      specificationVersion: specVersionForOpset(this.opset),
      program: this.program(),
      metadata: opts.metadata,
    };
  }

  // -------------------------------------------------------------------------------------------
  // the typed op methods (builder-ops.gen.ts) land here

  protected one(type: string, a: object): MilVar {
    const outs = this.many(type, a);
    if (outs.length !== 1) throw new InvalidArgumentError(`${type}: expected one output, got ${outs.length}`);
    return outs[0];
  }

  protected many(type: string, a: object): MilVar[] {
    const { name, ...rest } = a as { name?: string } & Record<string, Arg | readonly MilVar[] | undefined>;
    const args: Record<string, Arg | readonly MilVar[] | undefined> = {};
    for (const [k, v] of Object.entries(rest)) args[snake(k)] = v;
    return this.op(type, args, { name });
  }
}

/** Builds a program of several functions (multifunction models, spec >= 9). */
export class MilProgramBuilder {
  private readonly opts: MilBuilderOptions;
  private readonly fns = new Map<string, MilBuilder>();

  constructor(opts: MilBuilderOptions = {}) {
    this.opts = opts;
  }

  /** A builder for function `name` (created on first call). */
  function(name: string): MilBuilder {
    if (!IDENT.test(name)) throw new InvalidArgumentError(`function name '${name}' is not a MIL identifier`);
    let f = this.fns.get(name);
    if (!f) {
      f = new MilBuilder(this.opts, this, name);
      this.fns.set(name, f);
    }
    return f;
  }

  program(): Program {
    if (this.fns.size === 0) throw new MilProgramError("program has no functions");
    const functions: Record<string, MilFunction> = {};
    for (const [name, f] of this.fns) functions[name] = f.function();
    return { version: 1, functions };
  }

  model(opts: { metadata?: ModelMetadata; defaultFunctionName?: string } = {}): MlModel {
    const program = this.program();
    const names = Object.keys(program.functions);
    const def = opts.defaultFunctionName ?? (names.includes("main") ? "main" : names[0]);
    if (!names.includes(def))
      throw new MilProgramError(`default function '${def}' is not one of ${names.join(", ")}`);
    const opsets = new Set(Object.values(program.functions).map((f) => f.opset));
    const spec = Math.max(...[...opsets].map(specVersionForOpset));
    return { specificationVersion: spec, program, defaultFunctionName: def, metadata: opts.metadata };
  }
}
