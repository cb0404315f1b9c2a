/**
 * The static walk of one program: every op of every function, checked and typed through the op
 * registry (`resolveFunction`), with its work (op-cost.ts), the bytes of the weights it reads at
 * their stored size (operands.ts) and its predicted placement (placement.ts). Times are filled in
 * later (assemble.ts), so the same analysis can be re-timed for another chip.
 */
import {
  type MilFunction,
  type MlModel,
  type ResolvedOperation,
  resolveFunction,
} from "@anemll-qwen35/ir/mil";
import { bytesRead, bytesWritten, opWork } from "./op-cost.js";
import {
  constexprWeight,
  constWeight,
  type Operand,
  operandsOf,
  tensorBytes,
  type VarInfo,
  type WeightInfo,
} from "./operands.js";
import { type ComputeUnits, placeOp, type RuleContext } from "./placement.js";
import type { OpEntry } from "./report.js";

export interface AnalyzedFunction {
  readonly name: string;
  readonly opset: string;
  readonly ops: OpEntry[];
  /** Output names of each op (parallel to `ops`), for matching Core ML's compute plan. */
  readonly outputNames: readonly (readonly string[])[];
  /** Stored weight pieces this function reads at run time, by key (deduplicated). */
  readonly weightBlobs: ReadonlyMap<string, number>;
  readonly weightBytesDense: number;
  /** Bytes of the function's inputs and outputs, states excluded. */
  readonly io: { readonly inputBytes: number; readonly outputBytes: number };
  /** The KV cache its attention layers read (kvOf), for the ctx term; absent without attention. */
  readonly kv?: KvShape;
}

/** K or V caches a function reads: `parts` caches (one layer's K or V each) of `rows` rows. */
export interface KvShape {
  readonly parts: number;
  readonly rows: number;
  /** Bytes of one row of one part. */
  readonly bytesPerRow: number;
}

/**
 * KV caches by the names the converter and the stand-ins give them: io KV inputs `kv{L}_k` /
 * `kv{L}_v` [1, Hkv, ctx, hd], the mlstate state `kv` [2·n, Hkv, ctx, hd], states `*_k_cache` /
 * `*_v_cache`. Rank-4 tensors only; the rows are axis 2.
 */
const KV_NAME = /^kv\d+_[kv]$|^kv$|_[kv]_cache$/;

export function kvOf(fn: MilFunction): KvShape | undefined {
  let parts = 0;
  let rows = 0;
  let bytesPerRow = 0;
  for (const i of fn.inputs) {
    const t = i.type.kind === "state" ? i.type.wrapped : i.type;
    if (!KV_NAME.test(i.name) || t.shape.length !== 4) continue;
    const [n, heads, r, hd] = t.shape;
    parts += n;
    rows = Math.max(rows, r);
    bytesPerRow = tensorBytes({ ...t, shape: [1, heads, 1, hd] });
  }
  return parts > 0 ? { parts, rows, bytesPerRow } : undefined;
}

export interface AnalyzedModel {
  readonly specificationVersion: number;
  readonly defaultFunction: string;
  readonly functions: AnalyzedFunction[];
  /** Stored weight bytes of the package, blobs shared between functions counted once. */
  readonly weightBytesStored: number;
}

/** Ops whose result is (a view or slice of) their input: a state read stays a state read. */
const STATE_PASSTHROUGH = new Set([
  "reshape",
  "expand_dims",
  "squeeze",
  "identity",
  "transpose",
  "slice_by_index",
  "split",
]);

interface Walked {
  readonly r: ResolvedOperation;
  readonly operands: Operand[];
}

function outputInfo(
  r: ResolvedOperation,
  operands: readonly Operand[],
  env: Map<string, VarInfo>,
): VarInfo[] {
  const type = r.op.type;
  if (type === "const") return [{ type: r.outputs[0], weight: constWeight(r.op.value!, r.op.name) }];
  if (r.def.constexpr) return [{ type: r.outputs[0], weight: constexprWeight(r, env) }];
  if (type === "read_state") {
    const handle = operands.find((o) => o.role === "state-handle");
    return [{ type: r.outputs[0], fromState: true, state: handle?.varName }];
  }
  const x = operands.find((o) => o.param === "x");
  if (type === "slice_update" && x?.role === "state") {
    const upd = operands.find((o) => o.param === "update");
    return [{ type: r.outputs[0], fromState: true, inPlaceBytes: upd?.bytes, state: x.state }];
  }
  if (STATE_PASSTHROUGH.has(type) && x?.role === "state")
    return r.outputs.map((t) => ({ type: t, fromState: true, state: x.state }));
  return r.outputs.map((t) => ({ type: t }));
}

export function analyzeFunction(fn: MilFunction, name: string, units: ComputeUnits): AnalyzedFunction {
  const resolved = resolveFunction(fn, name);
  const env = new Map<string, VarInfo>();
  for (const i of fn.inputs) env.set(i.name, { type: i.type.kind === "tensor" ? i.type : undefined });
  const walked: Walked[] = [];
  const blobs = new Map<string, number>();
  const denseSeen = new Map<string, number>();
  for (const r of resolved) {
    const load = r.op.type === "const" || r.def.constexpr === true;
    const operands = load ? [] : operandsOf(r, env);
    for (const o of operands) {
      if (o.role !== "weight" || !o.weight) continue;
      for (const b of o.weight.blobs) blobs.set(b.key, b.bytes);
      denseSeen.set(o.varName ?? `${r.op.name}.${o.param}`, o.weight.denseBytes);
    }
    const infos = outputInfo(r, operands, env);
    r.op.outputs.forEach((o, i) => {
      env.set(o.name, infos[i] ?? { type: r.outputs[i] });
    });
    walked.push({ r, operands });
  }
  const functionWeightBytes = [...blobs.values()].reduce((s, b) => s + b, 0);
  // slice_updates per state (a placement rule looks at how many one state takes)
  const stateUpdates = new Map<string, number>();
  for (const { r, operands } of walked) {
    const x = operands.find((o) => o.param === "x");
    if (r.op.type === "slice_update" && x?.state)
      stateUpdates.set(x.state, (stateUpdates.get(x.state) ?? 0) + 1);
  }
  const ops = walked.map(({ r, operands }, index) =>
    entryOf(r, operands, index, env, { functionWeightBytes, stateUpdates }, units),
  );
  const bytesOf = (names: Iterable<string>) => {
    let n = 0;
    for (const v of names) {
      const t = env.get(v)?.type;
      if (t) n += tensorBytes(t);
    }
    return n;
  };
  return {
    name,
    opset: fn.opset,
    ops,
    outputNames: resolved.map((r) => r.op.outputs.map((o) => o.name)),
    weightBlobs: blobs,
    weightBytesDense: [...denseSeen.values()].reduce((s, b) => s + b, 0),
    io: {
      inputBytes: bytesOf(fn.inputs.filter((i) => i.type.kind === "tensor").map((i) => i.name)),
      outputBytes: bytesOf(fn.block.outputs),
    },
    kv: kvOf(fn),
  };
}

function weightsOf(operands: readonly Operand[]): OpEntry["weights"] {
  const ws = operands.filter((o) => o.role === "weight" && o.weight);
  if (ws.length === 0) return undefined;
  return ws.map((o) => ({
    param: o.param,
    storedBytes: (o.weight as WeightInfo).storedBytes,
    denseBytes: (o.weight as WeightInfo).denseBytes,
    encoding: (o.weight as WeightInfo).encoding,
  }));
}

function entryOf(
  r: ResolvedOperation,
  operands: readonly Operand[],
  index: number,
  env: ReadonlyMap<string, VarInfo>,
  fn: Pick<RuleContext, "functionWeightBytes" | "stateUpdates">,
  units: ComputeUnits,
): OpEntry {
  const base = { index, name: r.op.name, type: r.op.type, estimatedMs: 0, bound: "none" as const };
  const placement = placeOp({ r, operands, ...fn }, units);
  if (placement.device === "load") {
    const w = env.get(r.op.outputs[0]?.name ?? "")?.weight;
    return {
      ...base,
      device: "load",
      rule: placement.rule,
      reason: placement.reason,
      flops: 0,
      bytesRead: { weights: 0, activations: 0, state: 0 },
      bytesWritten: { activations: 0, state: 0 },
      intensity: 0,
      formula: "costplan",
      weights: w
        ? [{ param: "output", storedBytes: w.storedBytes, denseBytes: w.denseBytes, encoding: w.encoding }]
        : undefined,
    };
  }
  const work = opWork(r, operands);
  const moved = bytesRead(work) + bytesWritten(work);
  return {
    ...base,
    device: placement.device,
    rule: placement.rule,
    reason: placement.reason,
    flops: work.flops,
    bytesRead: { ...work.read },
    bytesWritten: { ...work.written },
    intensity: moved === 0 ? 0 : work.flops / moved,
    formula: work.formula,
    weights: weightsOf(operands),
  };
}

/** Name of the function a decode step calls when none is named: the default, "main", or the first. */
export function defaultFunctionOf(model: MlModel): string {
  const names = Object.keys(model.program.functions);
  if (model.defaultFunctionName && names.includes(model.defaultFunctionName))
    return model.defaultFunctionName;
  if (names.includes("main")) return "main";
  return names[0];
}

export function analyzeModel(model: MlModel, units: ComputeUnits): AnalyzedModel {
  const functions = Object.entries(model.program.functions).map(([name, fn]) =>
    analyzeFunction(fn, name, units),
  );
  const pkgBlobs = new Map<string, number>();
  for (const f of functions) {
    for (const [key, bytes] of f.weightBlobs)
      pkgBlobs.set(key.startsWith("@") ? key : `${f.name}/${key}`, bytes);
  }
  return {
    specificationVersion: model.specificationVersion,
    defaultFunction: defaultFunctionOf(model),
    functions,
    weightBytesStored: [...pkgBlobs.values()].reduce((s, b) => s + b, 0),
  };
}
