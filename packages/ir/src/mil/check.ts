/**
 * The type checker: replays every op of every function through the op registry — the same
 * checks coremltools' MIL loader makes (known op, required inputs, bindings to visible vars,
 * type domains, shape inference, declared output types equal to the inferred ones).
 * `resolveFunction` also hands each op's definition and typed inputs to other tools (the
 * cost model walks programs through it).
 */
import {
  MilBindingError,
  MilOutputTypeError,
  MilProgramError,
  MilTypeError,
  MilUnknownOpError,
} from "./errors.js";
import { getOpDef, type InputInfo, OpArgs, type OpDef, opAvailableIn, opsetIosVersion } from "./ops/index.js";
import type { ConstValue, MilFunction, Operation, Program, TensorType, ValueType } from "./program.js";
import { sameType, typeToString } from "./program.js";
import { constInputInfo, resolveOp } from "./resolve.js";

/** One op after checking: its definition, typed inputs (defaults filled in) and output types. */
export interface ResolvedOperation {
  readonly op: Operation;
  readonly def: OpDef;
  readonly args: OpArgs;
  readonly outputs: readonly TensorType[];
}

interface EnvEntry {
  readonly type: ValueType;
  readonly isConst: boolean;
  readonly cv?: ConstValue;
}

/** Checks one function and returns its ops resolved against the registry. Throws typed errors. */
export function resolveFunction(fn: MilFunction, fnName = "main"): ResolvedOperation[] {
  if (opsetIosVersion(fn.opset) === undefined) {
    throw new MilProgramError(
      `function '${fnName}': unknown opset "${fn.opset}" (expected CoreML5..CoreML9)`,
    );
  }
  const env = new Map<string, EnvEntry>();
  const define = (name: string, e: EnvEntry, what: string) => {
    if (env.has(name))
      throw new MilProgramError(`function '${fnName}': ${what} '${name}' redefines an existing name`);
    env.set(name, e);
  };
  for (const i of fn.inputs) define(i.name, { type: i.type, isConst: false }, "input");
  const out: ResolvedOperation[] = [];
  for (const op of fn.block.operations) {
    const loc = { opType: op.type, opName: op.name, fn: fnName };
    const def = getOpDef(op.type);
    if (!def) throw new MilUnknownOpError(loc);
    if (!opAvailableIn(def, fn.opset))
      throw new MilUnknownOpError(loc, `is not available in opset ${fn.opset}`);
    let outputs: TensorType[];
    let args: OpArgs;
    if (op.type === "const") {
      if (!op.value) throw new MilTypeError(loc, "val", "is missing (const ops carry their value)");
      outputs = [op.value.type];
      args = new OpArgs(op.type, op.name, {});
    } else {
      const infos: Record<string, InputInfo[]> = {};
      for (const [param, bindings] of Object.entries(op.inputs)) {
        infos[param] = bindings.map((b) => {
          if (b.kind === "value") return constInputInfo(b.value);
          const e = env.get(b.name);
          if (!e) throw new MilBindingError(loc, param, b.name);
          return entryInfo(b.name, e);
        });
      }
      const r = resolveOp(def, loc, infos);
      outputs = r.outputs;
      args = r.args;
    }
    if (op.outputs.length !== outputs.length) {
      throw new MilOutputTypeError(
        loc,
        op.outputs.map((o) => o.name).join(", ") || "(none)",
        `${op.outputs.length} output(s)`,
        `${outputs.length} output(s): ${outputs.map(typeToString).join(", ") || "none"}`,
      );
    }
    op.outputs.forEach((o, i) => {
      if (!sameType(o.type, outputs[i]))
        throw new MilOutputTypeError(loc, o.name, typeToString(o.type), typeToString(outputs[i]));
      define(
        o.name,
        { type: o.type, isConst: def.constexpr === true, cv: op.type === "const" ? op.value : undefined },
        "output",
      );
    });
    out.push({ op, def, args, outputs });
  }
  for (const name of fn.block.outputs) {
    const e = env.get(name);
    if (!e) throw new MilProgramError(`function '${fnName}': block output '${name}' is not defined`);
    if (e.type.kind !== "tensor")
      throw new MilProgramError(`function '${fnName}': block output '${name}' is a state`);
  }
  return out;
}

function entryInfo(name: string, e: EnvEntry): InputInfo {
  if (e.cv) return constInputInfo(e.cv, name);
  return {
    type: e.type,
    isConst: e.isConst,
    varName: name,
    value: () => undefined,
    constValue: () => undefined,
  };
}

/** Checks every function of a program; throws the first error found (typed, naming the op). */
export function checkProgram(program: Program): { functions: number; operations: number } {
  const names = Object.keys(program.functions);
  if (names.length === 0) throw new MilProgramError("program has no functions");
  let operations = 0;
  for (const name of names) operations += resolveFunction(program.functions[name], name).length;
  return { functions: names.length, operations };
}
