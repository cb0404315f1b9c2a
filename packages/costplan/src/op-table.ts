/**
 * One entry per MIL op type, the one place the cost model keys anything by op type: the FLOPs of
 * one execution and how its bytes are counted (op-cost.ts), whether public ANE ports were seen to
 * run it on the ANE, and the placement rules that only concern it (placement.ts). Types and shapes
 * come from the op registry (`resolveFunction`); whether an op is a view is the registry's too.
 *
 * `ane`: an allow-list built from the graphs of public ports (ANEMLL conv 1×1 / matmul, RMSNorm via
 * layer_norm, in-model argmax, concat/slice, RoPE tables gathered by position; anemll-qwen35's
 * "ops only mul/sum/where/silu/softplus/exp"; the iOS18 SDPA and states), not Apple's list:
 * MLComputePlan on macOS says for sure. Sources: ane-toolchains.md §1.2, §1.3, §1.7, §4.3.
 */
import { numel } from "@anemll-qwen35/core";
import type { ResolvedOperation } from "@anemll-qwen35/ir/mil";

type FlopsFn = (r: ResolvedOperation) => number;

/** Placement rules (PLACEMENT_RULES ids) that are checked only for the op types listing them. */
export type OpPlacementRule =
  | "in-graph-fill"
  | "band-part-mask"
  | "gather-large-table"
  | "gather-runtime-index"
  | "standalone-slice-update"
  | "many-state-updates"
  | "bool-attention-mask";

export interface OpTypeEntry {
  /** FLOPs of one execution (a multiply-add counts 2). */
  readonly flops: FlopsFn;
  /**
   * How its bytes differ from "every data input read once, the outputs written once":
   * `relayout` a view that copies when it moves values between the channel and spatial axes;
   * `returned` reads only what it returns of `x`; `state-write` writes its data into the state;
   * `slice-update` updates a state read in place (reads and writes the update only).
   */
  readonly bytes?: "relayout" | "returned" | "state-write" | "slice-update";
  /** Seen running on the ANE in public ports (otherwise the rule no-known-ane-kernel applies). */
  readonly ane: boolean;
  readonly rules?: readonly OpPlacementRule[];
  /**
   * A kernel of its own on the ANE (projections, matmuls, attention): the ops the per-op cost
   * `aneOpMs` is charged to. Elementwise ops, norms and data movement are taken as fused into
   * their neighbours: charging every one of a 0.8B decode super-block's 316 ops even 20 µs would be
   * 6.3 ms, above the 2.41 ms the reference study measured for the whole super-block.
   */
  readonly kernel?: boolean;
}

const outNumel = (r: ResolvedOperation): number => numel(r.outputs[0]?.shape ?? []);
const xNumel = (r: ResolvedOperation): number => numel(r.args.type("x").shape);

function matmulFlops(r: ResolvedOperation): number {
  const a = r.args;
  const xs = a.type("x").shape;
  const x2 = xs.length === 1 ? [1, xs[0]] : xs;
  const K = a.bool("transpose_x") ? x2[x2.length - 2] : x2[x2.length - 1];
  return 2 * outNumel(r) * K;
}

function sdpaFlops(r: ResolvedOperation): number {
  const q = r.args.type("query").shape;
  const k = r.args.type("key").shape;
  const v = r.args.type("value").shape;
  const L = q[q.length - 2];
  const E = q[q.length - 1];
  const S = k[k.length - 2];
  const EV = v[v.length - 1];
  const B = numel(q.slice(0, -2));
  // Q·Kᵀ, P·V, and ~5 per score for scale + mask, max, exp, sum and the divide
  return 2 * B * L * S * E + 2 * B * L * S * EV + 5 * B * L * S;
}

/** The same entry for each of `types`. */
const each = (types: readonly string[], entry: OpTypeEntry): Record<string, OpTypeEntry> =>
  Object.fromEntries(types.map((t) => [t, entry]));

/** Moves data and computes nothing. */
const none = () => 0;

export const OP_TABLE: Readonly<Record<string, OpTypeEntry>> = {
  // projections and attention
  linear: {
    flops: (r) => {
      const w = r.args.type("weight").shape; // [Dout, Din]
      return 2 * (xNumel(r) / w[1]) * w[0] * w[1];
    },
    ane: true,
    kernel: true,
  },
  conv: {
    flops: (r) => {
      const w = r.args.type("weight").shape; // [Cout, Cin/groups, *K]
      return 2 * outNumel(r) * (numel(w) / w[0]);
    },
    ane: true,
    kernel: true,
  },
  matmul: { flops: matmulFlops, ane: true, kernel: true },
  scaled_dot_product_attention: {
    flops: sdpaFlops,
    ane: true,
    kernel: true,
    rules: ["bool-attention-mask"],
  },

  // elementwise: one operation per output element (transcendentals too)
  ...each(
    [
      ...["add", "sub", "mul", "real_div", "pow", "maximum", "minimum"],
      ...["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"],
      ...["abs", "square", "sqrt", "rsqrt", "inverse", "exp", "log", "tanh", "sigmoid", "silu"],
      ...["softplus", "relu", "sin", "cos", "clip", "cast", "select"],
    ],
    { flops: outNumel, ane: true },
  ),
  ...each(["floor_div", "mod", "logical_and", "logical_or", "logical_xor", "logical_not", "floor", "ceil"], {
    flops: outNumel,
    ane: false,
  }),
  band_part: { flops: outNumel, ane: false, rules: ["band-part-mask"] },

  // normalisation and reductions
  ...each(["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_argmax", "reduce_argmin"], {
    flops: xNumel,
    ane: true,
  }),
  reduce_sum_square: { flops: (r) => 2 * xNumel(r), ane: true },
  reduce_prod: { flops: xNumel, ane: false },
  cumsum: { flops: xNumel, ane: false },
  softmax: { flops: (r) => 5 * xNumel(r), ane: true }, // max, subtract, exp, sum, divide
  layer_norm: {
    flops: (r) => (5 + (r.args.has("gamma") ? 1 : 0) + (r.args.has("beta") ? 1 : 0)) * xNumel(r),
    ane: true,
  },
  topk: { flops: (r) => xNumel(r) * Math.log2(Math.max(2, r.args.int("k"))), ane: false },

  // data movement
  ...each(["reshape", "expand_dims", "squeeze"], { flops: none, bytes: "relayout", ane: true }),
  ...each(["transpose", "identity", "concat", "split"], { flops: none, ane: true }),
  slice_by_index: { flops: none, bytes: "returned", ane: true },
  slice_update: {
    flops: none,
    bytes: "slice-update",
    ane: true,
    rules: ["standalone-slice-update", "many-state-updates"],
  },
  gather: {
    flops: none,
    bytes: "returned",
    ane: true,
    rules: ["gather-large-table", "gather-runtime-index"],
  },
  gather_along_axis: { flops: none, bytes: "returned", ane: false, rules: ["gather-runtime-index"] },
  fill: { flops: none, ane: false, rules: ["in-graph-fill"] },
  tile: { flops: none, ane: false },

  // states (iOS18 KV cache)
  read_state: { flops: none, ane: true },
  write_state: { flops: none, bytes: "state-write", ane: true },
};

/** FLOPs per op type (OP_TABLE's). */
export const OP_FLOPS: Readonly<Record<string, FlopsFn>> = Object.fromEntries(
  Object.entries(OP_TABLE).map(([type, e]) => [type, e.flops]),
);

/** Op types that public ANE ports were seen to run on the ANE (OP_TABLE's allow-list). */
export const ANE_OBSERVED_OPS: ReadonlySet<string> = new Set(
  Object.entries(OP_TABLE)
    .filter(([, e]) => e.ane)
    .map(([type]) => type),
);

/** Op types charged the per-op ANE cost (OP_TABLE's `kernel`). */
export const ANE_KERNEL_OPS: ReadonlySet<string> = new Set(
  Object.entries(OP_TABLE)
    .filter(([, e]) => e.kernel)
    .map(([type]) => type),
);
