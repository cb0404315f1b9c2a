/**
 * Work of one op execution: FLOPs (a multiply-add counts 2) and bytes moved, by the op type's
 * entry in OP_TABLE (op-table.ts). Shapes and dtypes are the registry's (inputs as resolved by
 * `resolveFunction`, outputs as its inference gives them); the formulas only read them.
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
import type { ResolvedOperation, TensorType } from "@anemll-qwen35/ir/mil";
import { OP_TABLE } from "./op-table.js";
import { isViewOp, type Operand, tensorBytes } from "./operands.js";

export interface OpWork {
  readonly flops: number;
  readonly read: { readonly weights: number; readonly activations: number; readonly state: number };
  readonly written: { readonly activations: number; readonly state: number };
  /** Where the FLOP count came from: this table, or nothing known (0). */
  readonly formula: "costplan" | "unknown";
}

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

/** Share of an operand's stored bytes that `returned` dense bytes of it amount to. */
function partial(o: Operand, returnedDense: number): number {
  if (!o.type) return 0;
  const dense = tensorBytes(o.type);
  return dense === 0 ? 0 : Math.ceil(o.bytes * Math.min(1, returnedDense / dense));
}

export function opWork(r: ResolvedOperation, operands: readonly Operand[]): OpWork {
  const type = r.op.type;
  const entry = OP_TABLE[type];
  const flops = entry ? entry.flops(r) : 0;
  const formula: OpWork["formula"] = entry ? "costplan" : "unknown";
  const read = { weights: 0, activations: 0, state: 0 };
  const written = { activations: 0, state: 0 };
  const add = (o: Operand, bytes: number) => {
    if (o.role === "weight") read.weights += bytes;
    else if (o.role === "state") read.state += bytes;
    else if (o.role === "activation" || o.role === "index") read.activations += bytes;
  };
  const outBytes = sumBytes(r.outputs);

  const copies = entry?.bytes === "relayout" && layoutMoves(r.args.type("x").shape, r.outputs[0].shape);
  if (isViewOp(type) && !copies) return { flops: 0, read, written, formula };
  if (entry?.bytes === "state-write") {
    const data = operands.find((o) => o.param === "data");
    written.state = data?.inPlaceBytes ?? data?.bytes ?? 0;
    return { flops, read, written, formula };
  }
  if (entry?.bytes === "slice-update") {
    const x = operands.find((o) => o.param === "x");
    const upd = operands.find((o) => o.param === "update");
    if (x?.role === "state" && upd) {
      for (const o of operands) if (o.param !== "x") add(o, o.bytes);
      written.state = upd.bytes;
      return { flops, read, written, formula };
    }
  }
  for (const o of operands) {
    add(o, entry?.bytes === "returned" && o.param === "x" ? partial(o, outBytes) : o.bytes);
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
