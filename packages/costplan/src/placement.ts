/**
 * Predicted placement: a rule table, first match wins. Each rule names its condition, where the op
 * lands, why, and the public source the rule stands on. Rules about one op type are checked only
 * for the types whose OP_TABLE entry (op-table.ts) lists them, and the allow-list of ops seen on
 * the ANE is that table's too. Core ML decides placement in its own
 * compiler; these rules reproduce what public projects observed, so on a Mac prefer the truth
 * from MLComputePlan (native.ts) — the report says which one it holds.
 *
 * Sources are cited as in shared/reference/ane-toolchains.md (section numbers refer to it).
 */
import type { ComputeDevice, ComputeUnits } from "@anemll-qwen35/coreml";
import type { MilDType, ResolvedOperation } from "@anemll-qwen35/ir/mil";
import { ANE_OBSERVED_OPS, OP_TABLE } from "./op-table.js";
import type { Operand } from "./operands.js";

export type { ComputeUnits } from "@anemll-qwen35/coreml";
export type Device = ComputeDevice;
/** `load`: const / constexpr_* ops, evaluated when the model loads, not per prediction. */
export type Placement = Device | "load";

export interface RuleContext {
  readonly r: ResolvedOperation;
  readonly operands: readonly Operand[];
  /** Stored bytes of all weights the op's function uses. */
  readonly functionWeightBytes: number;
  /** slice_update ops of the function per state input. */
  readonly stateUpdates: ReadonlyMap<string, number>;
}

export interface PlacementRule {
  readonly id: string;
  /** The condition, in words. */
  readonly condition: string;
  /** "CPU/GPU": the GPU when the compute units include it, else the CPU. */
  readonly placement: "load" | "ANE" | "CPU" | "CPU/GPU";
  readonly reason: string;
  readonly source: string;
  /** Checked only for the op types whose OP_TABLE entry lists it (else for every op). */
  readonly perOpType?: boolean;
  /** A detail naming what matched (truthy), or undefined when the rule does not apply. */
  match(ctx: RuleContext): string | undefined;
}

/** The ANE's largest tensor dimension (ANEMLL splits the lm_head because of it). */
export const ANE_MAX_DIM = 16384;
/** Weights per ANE program above which Core ML was seen to fall back off the ANE. */
export const ANE_MAX_WEIGHT_BYTES = 2e9;
/** slice_updates one state takes on the ANE ("ANE can only handle 1-2 slice updates per buffer"). */
export const ANE_MAX_STATE_UPDATES = 2;

const DATA_ROLES = new Set(["weight", "activation", "state", "index"]);

function shapeText(s: readonly number[]): string {
  return `[${s.join(", ")}]`;
}

/** Data operands (not attributes) and results, with their dtypes and shapes. */
function tensors(
  ctx: RuleContext,
  opts: { indices: boolean },
): { what: string; dtype: MilDType; shape: readonly number[] }[] {
  const out: { what: string; dtype: MilDType; shape: readonly number[] }[] = [];
  for (const o of ctx.operands) {
    if (!o.type || !DATA_ROLES.has(o.role)) continue;
    if (o.role === "index" && !opts.indices) continue;
    out.push({ what: `input ${o.param}`, dtype: o.type.dtype, shape: o.type.shape });
  }
  ctx.r.outputs.forEach((t, i) => {
    out.push({ what: ctx.r.outputs.length === 1 ? "result" : `result ${i}`, dtype: t.dtype, shape: t.shape });
  });
  return out;
}

export const PLACEMENT_RULES: readonly PlacementRule[] = [
  {
    id: "load-time-constant",
    condition: "op is const or constexpr_* (weights, LUT / blockwise decompression)",
    placement: "load",
    reason: "evaluated when the model loads, not in each prediction",
    source:
      "coreml-format.md §4.2 (weight compression ops are compile-time; decompressed at load or on the fly); ane-costplan skips const ops (ane-toolchains.md §3.3)",
    match: (c) => (c.r.op.type === "const" || c.r.op.type.startsWith("constexpr_") ? c.r.op.type : undefined),
  },
  {
    id: "program-over-ane-size-limit",
    condition: `the function's weights exceed ${ANE_MAX_WEIGHT_BYTES / 1e9} GB (stored size)`,
    placement: "CPU/GPU",
    reason: "Core ML does not place programs this large on the ANE (1.3 GB ran, 2.6 GB fell back to CPU)",
    source:
      "shipstuff/mlx-ane-sd notes/2c_partial_target_probe.md; Anemll/Anemll#28 and docs/convert.md (~2 GB macOS limit) (ane-toolchains.md §1.11)",
    match: (c) =>
      c.functionWeightBytes > ANE_MAX_WEIGHT_BYTES
        ? `function weights ${(c.functionWeightBytes / 1e9).toFixed(2)} GB`
        : undefined,
  },
  {
    id: "in-graph-fill",
    condition: "fill: a tensor (e.g. a zero state) created inside the graph",
    placement: "CPU",
    reason: "state created in-graph (torch.zeros for cache=None) put the whole super-block on the CPU",
    source: "anemll-qwen35 CLAUDE.md via shipstuff/flash-moe docs (ane-toolchains.md §4.2–4.3)",
    perOpType: true,
    match: (c) => `fill ${shapeText(c.r.outputs[0].shape)}`,
  },
  {
    id: "band-part-mask",
    condition: "band_part (an in-graph triangular mask)",
    placement: "CPU",
    reason:
      "matrix_band_part is not ANE-supported and pushed chunks to the CPU; pass the mask as an fp16 input",
    source: "smpanaro/more-ane-transformers src/experiments/NOTES.md (ane-toolchains.md §6)",
    perOpType: true,
    match: () => "band_part",
  },
  {
    id: "int32-tensor",
    condition:
      "an int32 data operand or result (index operands — gather indices, slice bounds, shapes — and argmax's index result excepted)",
    placement: "CPU",
    reason: "the ANE has no int32 tensors: 'Unsupported tensor data type: int32'",
    source:
      "anemll-profile Espresso log reason strings; its AGENTS.md lists int32 ops as a signal (ane-toolchains.md §3.2)",
    match: (c) => {
      const argmax = c.r.op.type === "reduce_argmax" || c.r.op.type === "reduce_argmin";
      const hit = tensors(c, { indices: false }).find(
        (t) => (t.dtype === "int32" || t.dtype === "int64") && !(argmax && t.what.startsWith("result")),
      );
      return hit ? `${hit.what} is ${hit.dtype} ${shapeText(hit.shape)}` : undefined;
    },
  },
  {
    id: "fp32-compute",
    condition: "an fp32 (or fp64) data operand or result",
    placement: "CPU/GPU",
    reason: "the ANE computes in fp16 only; fp32 ops stay on the CPU (or GPU)",
    source:
      "ane-toolchains.md §1.8 (ANE computes in fp16) and §4.3 (anemll-qwen35: 'Global fp32 compute kept ops on CPU')",
    match: (c) => {
      const hit = tensors(c, { indices: false }).find((t) => t.dtype === "fp32" || t.dtype === "fp64");
      return hit ? `${hit.what} is ${hit.dtype} ${shapeText(hit.shape)}` : undefined;
    },
  },
  {
    id: "gather-large-table",
    condition: `gather from a table whose gathered axis exceeds ${ANE_MAX_DIM} rows (a vocabulary embedding)`,
    placement: "CPU/GPU",
    reason:
      "a table that long is over the ANE's per-dimension limit; ANEMLL keeps embeddings in their own model",
    source:
      "ANEMLL llama_model.py comment (~16384 limit) and its separate embeddings part (ane-toolchains.md §1.2, §1.10)",
    perOpType: true,
    match: (c) => {
      const x = c.r.args.type("x");
      const raw = c.r.args.int("axis");
      const axis = raw < 0 ? raw + x.shape.length : raw;
      return x.shape[axis] > ANE_MAX_DIM ? `table ${shapeText(x.shape)}, axis ${axis}` : undefined;
    },
  },
  {
    id: "gather-runtime-index",
    condition:
      "gather whose indices are computed at run time (a function input or an op result), not constants",
    placement: "CPU",
    reason:
      "a gather by a run-time int32 index (the RoPE row at `position`) is not known to run on the ANE; public ports feed such rows from the host",
    source:
      "CoreML-LLM feeds cos/sin from the host; ane-graph-review R9 (RoPE gather by int32 position) and R16 (costplan assumed gathers run on the ANE)",
    perOpType: true,
    match: (c) => {
      const idx = c.operands.find((o) => o.param === "indices");
      return idx?.role === "index"
        ? `indices ${idx.varName ?? ""} are computed at run time`.trim()
        : undefined;
    },
  },
  {
    id: "dim-over-16384",
    condition: `any dimension of a data operand or result exceeds ${ANE_MAX_DIM}`,
    placement: "CPU/GPU",
    reason: `the ANE handles at most ~${ANE_MAX_DIM} per dimension (why the lm_head is split 8 or 16 ways)`,
    source:
      "Anemll/Anemll llama_model.py comment; 0seba/coremlmodels docs/AGENTS.md 'ANE's weight dimension limit (~16384)' (ane-toolchains.md §1.10)",
    match: (c) => {
      const hit = tensors(c, { indices: true }).find((t) => t.shape.some((d) => d > ANE_MAX_DIM));
      return hit ? `${hit.what} ${shapeText(hit.shape)}` : undefined;
    },
  },
  {
    id: "standalone-slice-update",
    condition: "slice_update whose target is not read from a state",
    placement: "CPU",
    reason: "'Cannot support standalone slice_update': the ANE updates in place only inside a state",
    source: "anemll-profile Espresso log reason strings (ane-toolchains.md §3.2)",
    perOpType: true,
    match: (c) => {
      const x = c.operands.find((o) => o.param === "x");
      return x && x.role !== "state" ? `x ${x.varName ?? ""} is not a state read`.trim() : undefined;
    },
  },
  {
    id: "many-state-updates",
    condition: `slice_update on a state that the function updates more than ${ANE_MAX_STATE_UPDATES} times`,
    placement: "CPU",
    reason: `the ANE took at most ${ANE_MAX_STATE_UPDATES} slice_updates per state buffer (more gave ANE error -14); write the state once`,
    source:
      "bhctsntrk/Anemll PR #50 qwen3_5_model.py: 'ANE can only handle 1-2 slice updates per buffer', 'ANE error -14 from multiple slice updates on shared buffers' (ane-toolchains.md §1.3)",
    perOpType: true,
    match: (c) => {
      const state = c.operands.find((o) => o.param === "x")?.state;
      const n = state ? (c.stateUpdates.get(state) ?? 0) : 0;
      return n > ANE_MAX_STATE_UPDATES
        ? `state ${state} takes ${n} slice_updates in this function`
        : undefined;
    },
  },
  {
    id: "bool-attention-mask",
    condition: "scaled_dot_product_attention with a bool attn_mask",
    placement: "CPU/GPU",
    reason: "keep the mask fp16 so attention stays on the ANE",
    source: "smpanaro/more-ane-transformers src/experiments/NOTES.md (ane-toolchains.md §6)",
    perOpType: true,
    match: (c) =>
      c.r.args.has("attn_mask") && c.r.args.type("attn_mask").dtype === "bool"
        ? "attn_mask is bool"
        : undefined,
  },
  {
    id: "no-known-ane-kernel",
    condition: "op type outside the allow-list of ops public ANE ports were seen to run on the ANE",
    placement: "CPU",
    reason:
      "no ANE kernel known for this op type (an allow-list, not Apple's list: MLComputePlan on macOS says for sure)",
    source:
      "assumed from ANE_OBSERVED_OPS, built from ANEMLL and anemll-qwen35 graphs (ane-toolchains.md §1.7, §4.3)",
    match: (c) => (ANE_OBSERVED_OPS.has(c.r.op.type) ? undefined : c.r.op.type),
  },
  {
    id: "ane-default",
    condition: "none of the above",
    placement: "ANE",
    reason: "fp16 op the ANE runs",
    source: "ane-toolchains.md §1.7 (fp16 everywhere, CPU_AND_NE)",
    match: () => "",
  },
];

export interface PlacementDecision {
  readonly device: Placement;
  readonly rule: string;
  readonly reason: string;
}

/** Where `placement` lands under `units`. */
export function resolveDevice(placement: PlacementRule["placement"], units: ComputeUnits): Placement {
  if (placement === "load") return "load";
  const gpu = units === "all" || units === "cpuAndGPU";
  const ane = units === "all" || units === "cpuAndNeuralEngine";
  if (placement === "ANE") return ane ? "ANE" : gpu ? "GPU" : "CPU";
  if (placement === "CPU/GPU") return gpu ? "GPU" : "CPU";
  return "CPU";
}

export function placeOp(ctx: RuleContext, units: ComputeUnits): PlacementDecision {
  const own: readonly string[] = OP_TABLE[ctx.r.op.type]?.rules ?? [];
  for (const rule of PLACEMENT_RULES) {
    if (rule.perOpType && !own.includes(rule.id)) continue;
    const detail = rule.match(ctx);
    if (detail === undefined) continue;
    const device = resolveDevice(rule.placement, units);
    const unitsNote =
      rule.placement === "ANE" && device !== "ANE" ? ` (compute units ${units} exclude the ANE)` : "";
    return { device, rule: rule.id, reason: `${rule.reason}${detail ? ` — ${detail}` : ""}${unitsNote}` };
  }
  throw new Error("unreachable: the last placement rule always matches");
}
