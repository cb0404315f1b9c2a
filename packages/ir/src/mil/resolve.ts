/**
 * Checking one op against its definition — the step shared by the builder (as ops are added),
 * the type checker (programs read from packages) and the interpreter (when it compiles a
 * function): inputs known to the signature, required inputs present, arity, const-ness,
 * dtypes in their type domains, defaults filled in, then the op's own inference.
 */
import { MilTypeError, type OpLocation } from "./errors.js";
import { type InputInfo, OpArgs, type OpDef, ParamError } from "./ops/index.js";
import type { ConstValue, MilDType, TensorType } from "./program.js";
import { tensorType } from "./program.js";
import type { RtTensor } from "./values.js";
import { constToRt, toMilData } from "./values.js";

export interface ResolvedOp {
  readonly outputs: TensorType[];
  readonly args: OpArgs;
  /** Optional inputs that were absent and filled with their default (the builder emits them). */
  readonly defaults: Readonly<Record<string, ConstValue>>;
}

/** An input bound to a constant. The value is materialised on first use. */
export function constInputInfo(cv: ConstValue, varName?: string): InputInfo {
  let v: RtTensor | undefined;
  return {
    type: cv.type,
    isConst: true,
    varName,
    value: () => {
      v ??= constToRt(cv);
      return v;
    },
    constValue: () => cv,
  };
}

function listDTypes(ds: readonly MilDType[]): string {
  return ds.length === 1 ? ds[0] : `${ds.slice(0, -1).join(", ")} or ${ds[ds.length - 1]}`;
}

/** Validates `given` against `def` and infers the output types; throws MilTypeError. */
export function resolveOp(
  def: OpDef,
  loc: OpLocation,
  given: Readonly<Record<string, readonly InputInfo[]>>,
): ResolvedOp {
  const fail = (param: string | undefined, detail: string): never => {
    throw new MilTypeError(loc, param, detail);
  };
  const known = new Set(def.params.map((p) => p.name));
  for (const name of Object.keys(given)) {
    if (!known.has(name)) {
      fail(
        name,
        `is not an input of ${def.type} (inputs: ${def.params.map((p) => p.name).join(", ") || "none"})`,
      );
    }
  }
  const inputs: Record<string, readonly InputInfo[]> = {};
  const domainOf: Record<string, { dtype: MilDType; param: string }> = {};
  for (const p of def.params) {
    const bound = given[p.name] ?? [];
    if (bound.length === 0) {
      if (!p.optional && !p.variadic) fail(p.name, "is required but missing");
      continue;
    }
    if (bound.length > 1 && !p.variadic) fail(p.name, `takes one value, got ${bound.length}`);
    bound.forEach((b, i) => {
      const at = p.variadic ? `${p.name}[${i}]` : p.name;
      if (p.state && b.type.kind !== "state") fail(at, "must be a state (a state<...> function input)");
      if (!p.state && b.type.kind === "state")
        fail(at, "must be a tensor, got a state (read it with read_state)");
      if (p.const && !b.isConst)
        fail(at, "must be a compile-time constant (a const / constexpr_* output or an inline value)");
      if (b.type.kind !== "tensor" || p.dtype === undefined) return;
      const dt = b.type.dtype;
      if (typeof p.dtype === "string") {
        const domain = def.domains?.[p.dtype] ?? [];
        if (!domain.includes(dt)) fail(at, `must be ${listDTypes(domain)}, got ${dt}`);
        const seen = domainOf[p.dtype];
        if (seen && seen.dtype !== dt)
          fail(at, `must have the same dtype as ${seen.param} (${seen.dtype}), got ${dt}`);
        if (!seen) domainOf[p.dtype] = { dtype: dt, param: at };
      } else if (!p.dtype.includes(dt)) {
        fail(at, `must be ${listDTypes(p.dtype)}, got ${dt}`);
      }
    });
    inputs[p.name] = bound;
  }
  const args = new OpArgs(def.type, loc.opName, inputs);
  const defaults: Record<string, ConstValue> = {};
  try {
    for (const p of def.params) {
      if (inputs[p.name] || !p.default) continue;
      let cv = p.default(args);
      if (!cv) continue;
      // a default in a type domain already fixed by another input takes that dtype (e.g.
      // layer_norm's epsilon follows an fp16 gamma)
      const bound = typeof p.dtype === "string" ? domainOf[p.dtype]?.dtype : undefined;
      if (bound && bound !== cv.type.dtype) {
        cv = {
          type: tensorType(bound, cv.type.shape),
          data: toMilData(bound, constToRt(cv).data as Float32Array),
        };
      }
      defaults[p.name] = cv;
      inputs[p.name] = [constInputInfo(cv)];
    }
    return { outputs: def.infer(args), args, defaults };
  } catch (e) {
    if (e instanceof ParamError) throw new MilTypeError(loc, e.param, e.detail, { cause: e });
    throw e;
  }
}
