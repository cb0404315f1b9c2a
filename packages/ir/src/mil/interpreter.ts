/**
 * The reference interpreter: runs one function of a MIL program on named inputs and states,
 * op by op through the registry's reference evaluations.
 *
 * Precision modes:
 *   fp32 — every float computes and stores in fp32 whatever its declared dtype; ints exact.
 *          (Compile-time constants keep their declared dtype: fp16 consts and fp16 constexpr_*
 *          results hold fp16 values in both modes.)
 *   fp16 — emulates an fp16 datapath (the ANE): every fp16-typed op result is rounded to fp16
 *          (overflow -> inf, optionally subnormals -> 0). Ops still accumulate in fp32/fp64
 *          internally; only op outputs are rounded. With flushSubnormals, fp16 constants (const
 *          ops, inline values, op defaults, constexpr results) are flushed too, as the ANE holds
 *          them: an epsilon of 1e-6 is 0 there.
 * The first op whose output holds inf/NaN while its inputs did not is reported by name
 * ("collect", the default), raised ("throw") or not looked for ("ignore").
 * Constants and constexpr_* results are materialised once and cached per op/value identity,
 * across runs and across interpreters over the same program. By default LUT / int8 weights stay
 * compressed and large tables stay in their file (`weights`: "packed"); products decode as they go.
 */
import {
  type DType,
  f32ToF16Bits,
  InvalidArgumentError,
  type Tensor,
  tensor,
  toFloat32,
} from "@anemll-qwen35/core";
import { resolveFunction } from "./check.js";
import { MilNonFiniteError, MilProgramError, MilRuntimeError } from "./errors.js";
import { countNonFinite, roundF16InPlace, roundF16Values } from "./fp16.js";
import {
  type EvalContext,
  type InputInfo,
  OpArgs,
  type OpDef,
  ParamError,
  type Precision,
} from "./ops/index.js";
import type {
  ConstValue,
  MilDType,
  MilFunction,
  NamedValueType,
  Operation,
  Program,
  TensorType,
  ValueType,
} from "./program.js";
import { typeToString } from "./program.js";
import { constInputInfo, resolveOp } from "./resolve.js";
import { shapeStr } from "./shape.js";
import type { RtData, RtTensor } from "./values.js";
import {
  allocF32,
  allocRt,
  BufferPool,
  constToRt,
  f16Table,
  isFloatDType,
  lazyConstToRt,
  numelOf,
  usePool,
} from "./values.js";

export type NonFiniteMode = "throw" | "collect" | "ignore";

export interface InterpreterOptions {
  /** Function to run (default: "main", or the only function). */
  readonly functionName?: string;
  readonly precision?: Precision;
  /** fp16 mode: flush fp16 subnormal results to zero. */
  readonly flushSubnormals?: boolean;
  readonly onNonFinite?: NonFiniteMode;
  /**
   * fp16 mode: ops whose results stay fp32 (not rounded to fp16) — fp32 islands in an fp16
   * program, as coremltools' op_selector keeps selected ops in fp32.
   */
  readonly keepFp32?: (op: { readonly type: string; readonly name: string }) => boolean;
  /**
   * "packed" (default): LUT and int8 weights stay compressed (matrix products and gather decode
   * them as they read; same values and bits) and large tables are read from their file by row.
   * "dense": every constant is expanded to fp32 once and kept — more memory, for comparisons.
   */
  readonly weights?: WeightMode;
}

export type WeightMode = "packed" | "dense";

export interface NonFiniteReport {
  readonly opType: string;
  readonly opName: string;
  readonly output: string;
  readonly count: number;
  readonly total: number;
  /** No input of the op held inf/NaN: this op produced them. */
  readonly origin: boolean;
}

export interface RunOptions {
  /** States to read and update in place (default: a fresh zero state). */
  readonly state?: MilState | Readonly<Record<string, Tensor>>;
  /** "declared" (default): outputs in their declared dtype (fp16 as f16 bits); "fp32": all floats as f32. */
  readonly outputs?: "declared" | "fp32";
  /**
   * Outputs to write into these tensors (by output name) instead of new ones, where the dtype
   * and shape match what `outputs` asks for: a caller that feeds a step's outputs back as the
   * next step's inputs (carried state) allocates nothing per step. Safe to pass the tensors given
   * as this run's inputs: inputs are copied in before any output is written.
   */
  readonly into?: Readonly<Record<string, Tensor>>;
  /** Time each op type (result.profile); "ops" also times every op by name (result.opTimes). */
  readonly profile?: boolean | "ops";
}

/** Time spent per op type in one run. */
export type RunProfile = Record<string, { calls: number; ms: number }>;

/** One op's time in one run (profile: "ops"), in program order. */
export interface OpTiming {
  readonly name: string;
  readonly type: string;
  readonly ms: number;
}

export interface RunResult {
  readonly outputs: Record<string, Tensor>;
  /** The (updated) states. */
  readonly state: MilState;
  /** Every op output that held inf/NaN, in program order (empty in "ignore" mode). */
  readonly nonFinite: readonly NonFiniteReport[];
  /** The first op that produced inf/NaN from finite inputs. */
  readonly firstNonFinite?: NonFiniteReport;
  /** With `profile`: milliseconds per op type. */
  readonly profile?: RunProfile;
  /** With `profile: "ops"`: milliseconds per op. */
  readonly opTimes?: readonly OpTiming[];
}

const MIL_TO_DTYPE: Partial<Record<MilDType, DType>> = {
  fp32: "f32",
  fp16: "f16",
  bf16: "bf16",
  int8: "i8",
  uint8: "u8",
  int16: "i16",
  int32: "i32",
  bool: "bool",
};

/**
 * Converts an interpreter value to a Tensor in its declared dtype (or f32 for floats): a copy,
 * written into `into` when that is an f32 tensor of the same size.
 */
export function rtToTensor(t: RtTensor, format: "declared" | "fp32" = "declared", into?: Tensor): Tensor {
  const { dtype, shape } = t.type;
  if (isFloatDType(dtype)) {
    const src = t.data as Float32Array;
    if (format === "fp32" || dtype === "fp32" || dtype === "fp64") {
      if (
        into?.dtype === "f32" &&
        into.data.length === src.length &&
        shapeStr(into.shape) === shapeStr(shape)
      ) {
        (into.data as Float32Array).set(src);
        return into;
      }
      return tensor("f32", shape, src.slice());
    }
    const out = new Uint16Array(src.length);
    if (dtype === "fp16") for (let i = 0; i < src.length; i++) out[i] = f32ToF16Bits(src[i]);
    else {
      const u = new Uint32Array(src.buffer, src.byteOffset, src.length);
      for (let i = 0; i < src.length; i++) out[i] = (u[i] + 0x7fff + ((u[i] >>> 16) & 1)) >>> 16;
    }
    return tensor(dtype === "fp16" ? "f16" : "bf16", shape, out);
  }
  if (dtype === "bool") return tensor("bool", shape, (t.data as Uint8Array).slice());
  if (dtype === "string") throw new MilRuntimeError("string tensors cannot be returned as Tensors");
  const d = MIL_TO_DTYPE[dtype] ?? "i32";
  const src = t.data as Int32Array;
  if (d === "i32") return tensor("i32", shape, src.slice());
  const out = tensor(d, shape);
  (out.data as Int8Array).set(src);
  return out;
}

/** Converts a Tensor to an interpreter value of the declared `type` (checks the shape). */
export function tensorToRt(what: string, t: Tensor, type: TensorType): RtTensor {
  if (shapeStr(t.shape) !== shapeStr(type.shape)) {
    throw new InvalidArgumentError(
      `${what}: expected ${typeToString(type)}, got ${t.dtype} ${shapeStr(t.shape)}`,
    );
  }
  if (isFloatDType(type.dtype)) {
    if (t.dtype === "bool")
      throw new InvalidArgumentError(`${what}: expected ${typeToString(type)}, got a bool tensor`);
    const data = allocF32(t.data.length, false); // from the op-buffer pool during a run
    if (t.dtype === "f32") data.set(t.data as Float32Array);
    else if (t.dtype === "f16") {
      const table = f16Table();
      const src = t.data as Uint16Array;
      for (let i = 0; i < src.length; i++) data[i] = table[src[i]];
    } else data.set(toFloat32(t.dtype, t.data));
    // an fp16 input holds fp16 values in either mode
    if (type.dtype === "fp16" && t.dtype !== "f16") roundF16Values(data, false, false);
    return { type, data };
  }
  if (type.dtype === "bool") {
    if (t.dtype !== "bool" && t.dtype !== "u8")
      throw new InvalidArgumentError(`${what}: expected ${typeToString(type)}, got ${t.dtype}`);
    return { type, data: Uint8Array.from(t.data as Uint8Array, (v) => (v ? 1 : 0)) };
  }
  if (t.dtype === "f32" || t.dtype === "f16" || t.dtype === "bf16" || t.dtype === "bool") {
    throw new InvalidArgumentError(`${what}: expected ${typeToString(type)} (integers), got ${t.dtype}`);
  }
  const data = new Int32Array(numelOf(t.shape));
  if (t.dtype === "i64") {
    const src = t.data as BigInt64Array;
    for (let i = 0; i < src.length; i++) data[i] = Number(src[i]);
  } else data.set(t.data as Int32Array);
  return { type, data };
}

/** The states of one function (like an MLState): zero-initialised, updated in place by runs. */
export class MilState {
  /** @internal */
  readonly values = new Map<string, RtTensor>();
  readonly types: ReadonlyMap<string, TensorType>;

  /** Zeros of `types`, or a copy of `from`'s values. */
  constructor(types: ReadonlyMap<string, TensorType>, from?: MilState) {
    this.types = types;
    for (const [name, t] of types) {
      const v = from?.values.get(name);
      this.values.set(name, { type: t, data: v ? (v.data.slice() as typeof v.data) : allocRt(t) });
    }
  }

  names(): string[] {
    return [...this.types.keys()];
  }

  /** An independent copy (the same values, bit for bit, in whichever precision they are held). */
  clone(): MilState {
    return new MilState(this.types, this);
  }

  /** Bytes the values hold. */
  get bytes(): number {
    let n = 0;
    for (const v of this.values.values()) n += (v.data as { byteLength?: number }).byteLength ?? 0;
    return n;
  }

  /** A copy of state `name` in its declared dtype. */
  get(name: string, format: "declared" | "fp32" = "declared"): Tensor {
    const v = this.values.get(name);
    if (!v)
      throw new InvalidArgumentError(`no state '${name}' (states: ${this.names().join(", ") || "none"})`);
    return rtToTensor(v, format);
  }

  set(name: string, t: Tensor): void {
    const type = this.types.get(name);
    if (!type)
      throw new InvalidArgumentError(`no state '${name}' (states: ${this.names().join(", ") || "none"})`);
    this.values.set(name, tensorToRt(`state '${name}'`, t, type));
  }

  /** All states as Tensors in their declared dtypes. */
  toTensors(): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const n of this.names()) out[n] = this.get(n);
    return out;
  }
}

interface Step {
  readonly op: Operation;
  readonly def: OpDef;
  readonly args: OpArgs;
  readonly outTypes: readonly TensorType[];
  readonly outSlots: readonly number[];
  readonly inSlots: readonly number[];
  readonly constexpr: boolean;
}

/** Per weight mode: constants as stored, and (fp16 with flushed subnormals) as the ANE holds them. */
const constCache: Record<WeightMode, [WeakMap<ConstValue, RtTensor>, WeakMap<ConstValue, RtTensor>]> = {
  packed: [new WeakMap(), new WeakMap()],
  dense: [new WeakMap(), new WeakMap()],
};
/** Constexpr results per op, by precision, subnormal flushing and weight mode. */
const constexprCache = new WeakMap<Operation, Map<string, RtTensor[]>>();

/** Op result buffers, shared by every interpreter (runs are synchronous: one at a time). */
const opBuffers = new BufferPool(256 << 20);

function cachedConst(cv: ConstValue, mode: WeightMode, flush = false): RtTensor {
  const cache = constCache[mode][flush && cv.type.dtype === "fp16" ? 1 : 0];
  let v = cache.get(cv);
  if (!v) {
    if (cache === constCache[mode][1]) v = flushedF16(cachedConst(cv, mode));
    else v = mode === "packed" ? lazyConstToRt(cv) : constToRt(cv);
    cache.set(cv, v);
  }
  return v;
}

/** An fp16 constant with its subnormals flushed to zero (the same tensor when it has none). */
function flushedF16(v: RtTensor): RtTensor {
  const { rows, type } = v;
  if (rows) {
    // a table read by row: flush each read, and the whole table once when asked for
    const cols = type.shape.slice(1).reduce((n, d) => n * d, 1);
    let data: Float32Array | undefined;
    return {
      type,
      rows: {
        readRows(first, count, into, at = 0) {
          rows.readRows(first, count, into, at);
          roundF16InPlace(into.subarray(at, at + count * cols), true);
        },
      },
      get data() {
        data ??= flushCopy(v.data as Float32Array);
        return data;
      },
    };
  }
  const d = v.data as Float32Array;
  return d.some((x) => x !== 0 && Math.abs(x) < 2 ** -14) ? { type, data: flushCopy(d) } : v;
}

function flushCopy(d: Float32Array): Float32Array {
  const c = d.slice();
  roundF16InPlace(c, true); // the values are fp16 already: only the subnormals change
  return c;
}

/** Interprets one function of a program. Construction type-checks the function. */
export class MilInterpreter {
  readonly fn: MilFunction;
  readonly functionName: string;
  readonly precision: Precision;
  private readonly flush: boolean;
  /** fp16 mode with subnormals flushed: fp16 constants are flushed as well. */
  private readonly flushF16: boolean;
  private readonly mode: NonFiniteMode;
  readonly weights: WeightMode;
  private readonly keepFp32: InterpreterOptions["keepFp32"];
  private readonly frame: { env: (RtTensor | undefined)[] } = { env: [] };
  private readonly slots = new Map<string, number>();
  private readonly steps: Step[] = [];
  /** Per step: the slots whose last reader it is (their buffers go back to the pool after it). */
  private readonly lastReads: number[][] = [];
  private readonly stateTypes = new Map<string, TensorType>();
  private readonly slotType = new Map<number, ValueType>();
  private readonly slotConst = new Map<number, ConstValue>();
  private readonly slotConstexpr = new Set<number>();
  private constEnv: (RtTensor | undefined)[] | undefined;

  constructor(program: Program | MilFunction, opts: InterpreterOptions = {}) {
    if ("functions" in program) {
      const names = Object.keys(program.functions);
      const name = opts.functionName ?? (names.includes("main") || names.length !== 1 ? "main" : names[0]);
      const fn = program.functions[name];
      if (!fn)
        throw new MilProgramError(`program has no function '${name}' (functions: ${names.join(", ")})`);
      this.fn = fn;
      this.functionName = name;
    } else {
      this.fn = program;
      this.functionName = opts.functionName ?? "main";
    }
    this.precision = opts.precision ?? "fp32";
    this.flush = opts.flushSubnormals ?? false;
    this.flushF16 = this.precision === "fp16" && this.flush;
    this.mode = opts.onNonFinite ?? "collect";
    this.weights = opts.weights ?? "packed";
    this.keepFp32 = opts.keepFp32;
    const resolved = resolveFunction(this.fn, this.functionName); // full type check
    for (const i of this.fn.inputs) {
      this.slotType.set(this.slot(i.name), i.type);
      if (i.type.kind === "state") this.stateTypes.set(i.name, i.type.wrapped);
    }
    for (const r of resolved) this.compile(r.op, r.def);
    this.planReleases();
  }

  /** Finds each computed value's last reader (unread values: their producer); outputs excluded. */
  private planReleases(): void {
    const last = new Map<number, number>();
    this.steps.forEach((s, i) => {
      if (s.constexpr || s.op.type === "const") return;
      for (const k of s.inSlots) last.set(k, i);
      for (const k of s.outSlots) if (!last.has(k)) last.set(k, i);
    });
    for (const name of this.fn.block.outputs) last.delete(this.slots.get(name) as number);
    for (let i = 0; i < this.steps.length; i++) this.lastReads.push([]);
    for (const [slot, i] of last) {
      if (!this.slotConst.has(slot) && !this.slotConstexpr.has(slot)) this.lastReads[i].push(slot);
    }
  }

  private slot(name: string): number {
    let s = this.slots.get(name);
    if (s === undefined) {
      s = this.slots.size;
      this.slots.set(name, s);
    }
    return s;
  }

  private compile(op: Operation, def: OpDef): void {
    const frame = this.frame;
    const loc = { opType: op.type, opName: op.name, fn: this.functionName };
    const inSlots: number[] = [];
    const infos: Record<string, InputInfo[]> = {};
    for (const [param, bindings] of Object.entries(op.inputs)) {
      infos[param] = bindings.map((b): InputInfo => {
        if (b.kind === "value")
          return {
            ...constInputInfo(b.value),
            value: () => cachedConst(b.value, this.weights, this.flushF16),
          };
        const slot = this.slot(b.name);
        inSlots.push(slot);
        const cv = this.slotConst.get(slot);
        const type = this.slotType.get(slot);
        if (!type) throw new MilProgramError(`function '${this.functionName}': '${b.name}' is not defined`);
        return {
          type,
          isConst: cv !== undefined || this.slotConstexpr.has(slot),
          varName: b.name,
          value: cv ? () => cachedConst(cv, this.weights, this.flushF16) : () => frame.env[slot],
          constValue: () => cv,
        };
      });
    }
    let outTypes: readonly TensorType[];
    let args: OpArgs;
    if (op.type === "const" && op.value) {
      outTypes = [op.value.type];
      args = new OpArgs(op.type, op.name, {});
    } else {
      const r = resolveOp(def, loc, infos);
      outTypes = r.outputs;
      args = r.args;
      const defaults = Object.entries(r.defaults);
      if (this.flushF16 && defaults.length) {
        // an op's defaults are constants too (fp16 ones flushed)
        const inputs = { ...args.inputs };
        for (const [param, cv] of defaults)
          inputs[param] = [{ ...constInputInfo(cv), value: () => cachedConst(cv, this.weights, true) }];
        args = new OpArgs(op.type, op.name, inputs);
      }
    }
    const outSlots = op.outputs.map((o, i) => {
      const slot = this.slot(o.name);
      this.slotType.set(slot, outTypes[i]);
      if (op.type === "const") this.slotConst.set(slot, op.value as ConstValue);
      else if (def.constexpr) this.slotConstexpr.add(slot);
      return slot;
    });
    this.steps.push({ op, def, args, outTypes, outSlots, inSlots, constexpr: def.constexpr === true });
  }

  /** Function inputs (tensors) and states. */
  get inputs(): readonly NamedValueType[] {
    return this.fn.inputs;
  }

  /** A zero-initialised state for this function. */
  newState(): MilState {
    return new MilState(this.stateTypes);
  }

  /** Materialises constants and constexpr results (cached across runs and interpreters). */
  private prepare(ctx: EvalContext): (RtTensor | undefined)[] {
    if (this.constEnv) return this.constEnv;
    const env: (RtTensor | undefined)[] = new Array(this.slots.size);
    this.frame.env = env;
    for (const s of this.steps) {
      if (s.op.type === "const" && s.op.value) {
        env[s.outSlots[0]] = cachedConst(s.op.value, this.weights, this.flushF16);
      } else if (s.constexpr) {
        let cached = constexprCache.get(s.op);
        if (!cached) {
          cached = new Map();
          constexprCache.set(s.op, cached);
        }
        const flush = this.flushF16;
        const key = `${this.precision}${flush ? "+flush" : ""}:${this.weights}`;
        let results = cached.get(key);
        if (!results) {
          const compressed =
            this.weights === "packed" && s.def.compressed
              ? this.evalStep(s, () => s.def.compressed?.(s.args, s.outTypes, { flushSubnormals: flush }))
              : undefined;
          if (compressed) results = [compressed];
          else {
            results = this.evalStep(s, () => s.def.evaluate(s.args, s.outTypes, ctx));
            // decompressed weights are fp16 values on the device in either mode (like fp16 consts)
            for (const r of results) {
              if (r.type.dtype === "fp16") roundF16InPlace(r.data as Float32Array, flush);
            }
          }
          cached.set(key, results);
        }
        for (let i = 0; i < s.outSlots.length; i++) env[s.outSlots[i]] = results[i];
      }
    }
    this.constEnv = env;
    return env;
  }

  /** Runs `evaluate` (an evaluation of step s), naming the op in any error. */
  private evalStep<T>(s: Step, evaluate: () => T): T {
    try {
      return evaluate();
    } catch (e) {
      if (e instanceof ParamError) {
        throw new MilRuntimeError(`${this.functionName}: ${s.op.type} '${s.op.name}': ${e.message}`, {
          cause: e,
        });
      }
      if (e instanceof MilRuntimeError || e instanceof MilNonFiniteError) throw e;
      throw new MilRuntimeError(
        `${this.functionName}: ${s.op.type} '${s.op.name}' failed: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /** Runs the function once. */
  run(inputs: Readonly<Record<string, Tensor>>, opts: RunOptions = {}): RunResult {
    const state = this.stateFrom(opts.state);
    const ctx: EvalContext = {
      precision: this.precision,
      readState: (name) => {
        const v = state.values.get(name);
        if (!v) throw new MilRuntimeError(`state '${name}' is missing`);
        return v;
      },
      writeState: (name, value) => {
        // a pooled result is copied out: the state outlives the run, and a copy keeps the
        // memory in the garbage collector's sight (the SIMD heap is not)
        const pooled = opBuffers.owns(value.data);
        const data = pooled ? (value.data as Float32Array | Int32Array | Uint8Array).slice() : value.data;
        state.values.set(name, { type: value.type, data });
      },
    };
    const constEnv = this.prepare(ctx);
    const env = constEnv.slice();
    this.frame.env = env;
    const prevPool = usePool(opBuffers);
    try {
      return this.runWith(inputs, opts, state, ctx, constEnv, env);
    } finally {
      usePool(prevPool);
    }
  }

  private runWith(
    inputs: Readonly<Record<string, Tensor>>,
    opts: RunOptions,
    state: MilState,
    ctx: EvalContext,
    constEnv: (RtTensor | undefined)[],
    env: (RtTensor | undefined)[],
  ): RunResult {
    for (const i of this.fn.inputs) {
      if (i.type.kind === "state") continue;
      const t = inputs[i.name];
      if (!t) throw new InvalidArgumentError(`input '${i.name}' (${typeToString(i.type)}) is missing`);
      env[this.slots.get(i.name) as number] = tensorToRt(`input '${i.name}'`, t, i.type);
    }
    for (const name of Object.keys(inputs)) {
      if (!this.fn.inputs.some((i) => i.name === name && i.type.kind === "tensor")) {
        throw new InvalidArgumentError(
          `'${name}' is not an input of function '${this.functionName}' (inputs: ${this.fn.inputs
            .filter((i) => i.type.kind === "tensor")
            .map((i) => i.name)
            .join(", ")})`,
        );
      }
    }
    const nonFinite: NonFiniteReport[] = [];
    const profile: RunProfile | undefined = opts.profile ? {} : undefined;
    const opTimes: OpTiming[] | undefined = opts.profile === "ops" ? [] : undefined;
    // pool-made arrays in use: how many slots hold each (views hold their input's array)
    const live = new Map<RtData, number>();
    for (const i of this.fn.inputs) {
      const d = env[this.slots.get(i.name) as number]?.data;
      if (d && opBuffers.owns(d)) live.set(d, (live.get(d) ?? 0) + 1);
    }
    this.runSteps(env, ctx, live, nonFinite, profile, opTimes);
    const outputs: Record<string, Tensor> = {};
    for (const name of this.fn.block.outputs) {
      const v = env[this.slots.get(name) as number];
      if (!v) throw new MilRuntimeError(`output '${name}' was not computed`);
      outputs[name] = rtToTensor(v, opts.outputs, opts.into?.[name]); // a copy
    }
    for (const b of live.keys()) opBuffers.release(b);
    this.frame.env = constEnv;
    return { outputs, state, nonFinite, firstNonFinite: nonFinite.find((r) => r.origin), profile, opTimes };
  }

  private runSteps(
    env: (RtTensor | undefined)[],
    ctx: EvalContext,
    live: Map<RtData, number>,
    nonFinite: NonFiniteReport[],
    profile: RunProfile | undefined,
    opTimes: OpTiming[] | undefined,
  ): void {
    const bad = this.mode === "ignore" ? undefined : new Uint8Array(this.slots.size);
    const fp16 = this.precision === "fp16";
    for (let si = 0; si < this.steps.length; si++) {
      const s = this.steps[si];
      if (s.constexpr) continue;
      const t0 = profile ? performance.now() : 0;
      const results = this.evalStep(s, () => s.def.evaluate(s.args, s.outTypes, ctx));
      for (let i = 0; i < results.length; i++) {
        const r = results[i];
        const slot = s.outSlots[i];
        env[slot] = r;
        if (opBuffers.owns(r.data)) live.set(r.data, (live.get(r.data) ?? 0) + 1);
        if (!(r.data instanceof Float32Array)) continue;
        if (s.def.view) {
          if (bad) for (const k of s.inSlots) bad[slot] |= bad[k];
          continue;
        }
        const rounded = fp16 && r.type.dtype === "fp16" && !this.keepFp32?.(s.op);
        const nonFiniteAfterRounding = rounded ? roundF16Values(r.data, this.flush, bad !== undefined) : 0;
        if (!bad) continue;
        const count = rounded ? nonFiniteAfterRounding : countNonFinite(r.data);
        if (count === 0) continue;
        bad[slot] = 1;
        const origin = !s.inSlots.some((k) => bad[k]);
        const report = {
          opType: s.op.type,
          opName: s.op.name,
          output: s.op.outputs[i].name,
          count,
          total: r.data.length,
          origin,
        };
        if (this.mode === "throw" && origin) {
          throw new MilNonFiniteError(
            { opType: s.op.type, opName: s.op.name, fn: this.functionName },
            report.output,
            count,
            report.total,
          );
        }
        nonFinite.push(report);
      }
      // after the fp16 rounding and the inf/NaN scan: both are part of what the op costs here
      if (profile) {
        const ms = performance.now() - t0;
        profile[s.op.type] ??= { calls: 0, ms: 0 };
        const p = profile[s.op.type];
        p.calls++;
        p.ms += ms;
        opTimes?.push({ name: s.op.name, type: s.op.type, ms });
      }
      for (const k of this.lastReads[si]) {
        const d = env[k]?.data;
        const n = d && live.get(d);
        if (!n) continue;
        if (n > 1) live.set(d, n - 1);
        else {
          live.delete(d);
          opBuffers.release(d);
        }
      }
    }
  }

  private stateFrom(s: RunOptions["state"]): MilState {
    if (s instanceof MilState) {
      for (const [name, t] of this.stateTypes) {
        const have = s.types.get(name);
        if (!have || typeToString(have) !== typeToString(t)) {
          throw new InvalidArgumentError(
            `state '${name}': this function needs ${typeToString(t)}, the given state has ${have ? typeToString(have) : "none"}`,
          );
        }
      }
      return s;
    }
    const st = this.newState();
    if (s) for (const [name, t] of Object.entries(s)) st.set(name, t);
    return st;
  }
}

/** Runs function `functionName` (default "main") of `program` once: a one-shot convenience. */
export function interpret(
  program: Program | MilFunction,
  inputs: Readonly<Record<string, Tensor>>,
  opts: InterpreterOptions & RunOptions = {},
): RunResult {
  return new MilInterpreter(program, opts).run(inputs, opts);
}
