/**
 * Work of one op execution, keyed by op type: FLOPs (a multiply-add counts 2) and bytes moved.
 * Shapes and dtypes are the registry's (inputs as resolved by `resolveFunction`, outputs as its
 * inference gives them); the formulas only read them.
 *
 * Byte rules (one place, so reports and tests agree):
 *  - every data input is read once, outputs are written once, nothing is assumed to stay on chip;
 *  - weights count at their stored size: LUT indices at their bit width plus the LUTs,
 *    blockwise-quantised data plus scales (and offsets) — see operands.ts;
 *  - views (reshape, squeeze, expand_dims, identity, read_state) move nothing — except a reshape
 *    that moves values between the channel and spatial axes, which the ANE copies (layoutMoves);
 *  - gather / slice_by_index read only what they return;
 *  - slice_update on a state read updates in place: it reads and writes the update only, and the
 *    write_state that stores it writes only that much; elsewhere it copies the whole tensor;
 *  - write_state writes its data into the state (the data was already counted where produced).
 */
import { numel } from "@anemll-qwen35/core";
import type { ResolvedOperation, TensorType } from "@anemll-qwen35/ir/mil";
import { isViewOp, type Operand, tensorBytes } from "./operands.js";

export interface OpWork {
  readonly flops: number;
  readonly read: { readonly weights: number; readonly activations: number; readonly state: number };
  readonly written: { readonly activations: number; readonly state: number };
  /** Where the FLOP count came from: this table, or nothing known (0). */
  readonly formula: "costplan" | "unknown";
}

type FlopsFn = (r: ResolvedOperation) => number;

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

const ELEMENTWISE = [
  "add",
  "sub",
  "mul",
  "real_div",
  "floor_div",
  "mod",
  "pow",
  "maximum",
  "minimum",
  "equal",
  "not_equal",
  "less",
  "less_equal",
  "greater",
  "greater_equal",
  "logical_and",
  "logical_or",
  "logical_xor",
  "logical_not",
  "abs",
  "square",
  "sqrt",
  "rsqrt",
  "inverse",
  "exp",
  "log",
  "tanh",
  "sigmoid",
  "silu",
  "softplus",
  "relu",
  "sin",
  "cos",
  "floor",
  "ceil",
  "cast",
  "select",
  "clip",
  "band_part",
];

const MOVES = [
  "reshape",
  "transpose",
  "expand_dims",
  "squeeze",
  "identity",
  "concat",
  "split",
  "slice_by_index",
  "slice_update",
  "gather",
  "gather_along_axis",
  "fill",
  "tile",
  "read_state",
  "write_state",
];

/** FLOPs per op type. Elementwise ops count one operation per output element (transcendentals too). */
export const OP_FLOPS: Readonly<Record<string, FlopsFn>> = {
  linear: (r) => {
    const w = r.args.type("weight").shape; // [Dout, Din]
    return 2 * (xNumel(r) / w[1]) * w[0] * w[1];
  },
  conv: (r) => {
    const w = r.args.type("weight").shape; // [Cout, Cin/groups, *K]
    return 2 * outNumel(r) * (numel(w) / w[0]);
  },
  matmul: matmulFlops,
  scaled_dot_product_attention: sdpaFlops,
  reduce_sum: xNumel,
  reduce_mean: xNumel,
  reduce_max: xNumel,
  reduce_min: xNumel,
  reduce_prod: xNumel,
  reduce_argmax: xNumel,
  reduce_argmin: xNumel,
  reduce_sum_square: (r) => 2 * xNumel(r),
  cumsum: xNumel,
  softmax: (r) => 5 * xNumel(r), // max, subtract, exp, sum, divide
  layer_norm: (r) => (5 + (r.args.has("gamma") ? 1 : 0) + (r.args.has("beta") ? 1 : 0)) * xNumel(r),
  topk: (r) => xNumel(r) * Math.log2(Math.max(2, r.args.int("k"))),
  ...Object.fromEntries(ELEMENTWISE.map((t) => [t, outNumel])),
  ...Object.fromEntries(MOVES.map((t) => [t, () => 0])),
};

const sumBytes = (ts: readonly TensorType[]): number => ts.reduce((s, t) => s + tensorBytes(t), 0);

/** A shape as the ANE lays it out, [N, C, H, W]: lower ranks left-padded with 1s, extra leading dims folded into N. */
export function aneLayout(shape: readonly number[]): [number, number, number, number] {
  const s = shape.length >= 4 ? shape : [...new Array<number>(4 - shape.length).fill(1), ...shape];
  const lead = s.slice(0, s.length - 3).reduce((a, b) => a * b, 1);
  return [lead, s[s.length - 3], s[s.length - 2], s[s.length - 1]];
}

/**
 * Whether a reshape (or expand_dims / squeeze) moves data on the ANE: its tensors are C planes of
 * H rows of W (padded) values, so a reshape that keeps C and W only relabels rows, while one that
 * changes either moves values between the channel and spatial axes — a copy (ml-ane-transformers:
 * "minimize memory copies (avoid reshapes/transposes)"; ane-graph-review R16).
 */
export function layoutMoves(from: readonly number[], to: readonly number[]): boolean {
  const a = aneLayout(from);
  const b = aneLayout(to);
  return a[1] !== b[1] || a[3] !== b[3];
}

const RESHAPES = new Set(["reshape", "expand_dims", "squeeze"]);

/** Share of an operand's stored bytes that `returned` dense bytes of it amount to. */
function partial(o: Operand, returnedDense: number): number {
  if (!o.type) return 0;
  const dense = tensorBytes(o.type);
  return dense === 0 ? 0 : Math.ceil(o.bytes * Math.min(1, returnedDense / dense));
}

export function opWork(r: ResolvedOperation, operands: readonly Operand[]): OpWork {
  const type = r.op.type;
  const fn = OP_FLOPS[type];
  let flops = 0;
  let formula: OpWork["formula"] = "unknown";
  if (fn) {
    flops = fn(r);
    formula = "costplan";
  }
  const read = { weights: 0, activations: 0, state: 0 };
  const written = { activations: 0, state: 0 };
  const add = (o: Operand, bytes: number) => {
    if (o.role === "weight") read.weights += bytes;
    else if (o.role === "state") read.state += bytes;
    else if (o.role === "activation" || o.role === "index") read.activations += bytes;
  };
  const outBytes = sumBytes(r.outputs);

  const copies = RESHAPES.has(type) && layoutMoves(r.args.type("x").shape, r.outputs[0].shape);
  if (isViewOp(type) && !copies) return { flops: 0, read, written, formula };
  if (type === "write_state") {
    const data = operands.find((o) => o.param === "data");
    written.state = data?.inPlaceBytes ?? data?.bytes ?? 0;
    return { flops, read, written, formula };
  }
  if (type === "slice_update") {
    const x = operands.find((o) => o.param === "x");
    const upd = operands.find((o) => o.param === "update");
    if (x?.role === "state" && upd) {
      for (const o of operands) if (o.param !== "x") add(o, o.bytes);
      written.state = upd.bytes;
      return { flops, read, written, formula };
    }
  }
  for (const o of operands) {
    const returnsPart =
      (type === "gather" || type === "gather_along_axis" || type === "slice_by_index") && o.param === "x";
    add(o, returnsPart ? partial(o, outBytes) : o.bytes);
  }
  written.activations = outBytes;
  return { flops, read, written, formula };
}

export function bytesRead(w: OpWork): number {
  return w.read.weights + w.read.activations + w.read.state;
}

export function bytesWritten(w: OpWork): number {
  return w.written.activations + w.written.state;
}
