/**
 * The `lm_head` component: the final RMSNorm, then the vocabulary projection in pieces.
 *
 * The final norm lives here, once, rather than at the end of the last super-block package: that
 * way every super-block package has the same interface (hidden in, hidden out, pre-norm), so any
 * grouping of super-blocks into packages — fused or not — needs no special last block.
 *
 * The projection is split along the vocabulary into pieces of at most `lmHeadMaxRows` rows (the
 * ANE's ~16384 per-dimension limit; ane-toolchains.md §1.10), each its own 1×1 conv. With
 * `argmax`, each piece reduces to its top-1 index and value in-graph, so only 2·k numbers leave
 * the device instead of the vocabulary's logits.
 */
import type { ComponentIO, IoTensor } from "@anemll-qwen35/ir/chain";
import { type MilVar, tensorType } from "@anemll-qwen35/ir/mil";
import type { ResolvedOptions } from "../options.js";
import { pieceUnit } from "../quant/plan.js";
import { conv1x1 } from "./ane.js";
import { planPieces } from "./io.js";
import { finalNormUnlessNormed } from "./mtp.js";
import { rmsNorm1p } from "./norms.js";
import type { GraphWeights } from "./weights.js";

/** hidden [1, D, 1, 1] → logits_i [1, rows_i], or argmax_idx int32 [k] and argmax_val [k]. */
export async function buildLmHead(w: GraphWeights, o: ResolvedOptions): Promise<ComponentIO> {
  const b = w.b;
  const cfg = w.source.config;
  const D = cfg.hiddenSize;
  const dt = o.dtype;
  const hidden = b.input("hidden", tensorType(dt, [1, D, 1, 1]));
  const x = await rmsNorm1p(w, "norm", hidden, "final_norm");

  const { V, pieces, outs } = await scorePieces(w, o, x, 1);
  return lmHeadIO(o, {
    inputs: [{ name: "hidden", dtype: dt, shape: [1, D, 1, 1], role: { kind: "hidden_in" } }],
    outputs: outs,
    lmHead: { vocab: V, pieces, argmax: o.argmax },
    notes: ["the final RMSNorm is applied here; super-block packages output the pre-norm hidden state"],
  });
}

/**
 * The lm_head's verify function (chains with an MTP head): T hidden rows [1, D, 1, T] in one call —
 * the verify's rows, a prefill's last row or an MTP draft's, padded — each normed by the final
 * norm unless its `normed` entry is 1 (the head's output is normed already) → logits_i [T, rows_i],
 * or argmax_idx int32 / argmax_val [T, k] (row t: the per-piece top-1 of hidden row t). While
 * speculating it is the package's only function loaded, so the vocabulary is resident once.
 */
export async function buildLmHeadRows(w: GraphWeights, o: ResolvedOptions, T: number): Promise<ComponentIO> {
  const b = w.b;
  const cfg = w.source.config;
  const D = cfg.hiddenSize;
  const dt = o.dtype;
  const hidden = b.input("hidden", tensorType(dt, [1, D, 1, T]));
  const normed = b.input("normed", tensorType(dt, [1, 1, 1, T]));
  const x = await finalNormUnlessNormed(w, hidden, normed, "rows_normed");

  const { V, pieces, outs } = await scorePieces(w, o, x, T);
  return lmHeadIO(o, {
    inputs: [
      { name: "hidden", dtype: dt, shape: [1, D, 1, T], role: { kind: "hidden_in" } },
      { name: "normed", dtype: dt, shape: [1, 1, 1, T], role: { kind: "normed" } },
    ],
    outputs: outs,
    lmHead: { vocab: V, pieces, argmax: o.argmax, rows: T },
    notes: [
      `${T} hidden rows a call: row t is normed by the final RMSNorm unless normed[t] = 1 (the MTP head's output); unused rows are zeros`,
    ],
  });
}

/** The lm_head's ComponentIO: no layers, no state; its own inputs, outputs and notes. */
function lmHeadIO(
  o: ResolvedOptions,
  io: Pick<ComponentIO, "inputs" | "outputs" | "lmHead" | "notes">,
): ComponentIO {
  // the key order is ComponentIO's, as model.json records it
  const { inputs, outputs, lmHead, notes } = io;
  const head = {
    component: "lm_head",
    dtype: o.dtype,
    ctx: o.ctx,
    state: o.state,
    layers: [],
    superBlocks: [],
  } as const;
  return { ...head, inputs, outputs, states: [], lmHead, notes };
}

/**
 * The vocabulary projection of normed hidden rows x [1, D, 1, T], piece by piece: logits_i
 * ([1, rows_i] for one row, [T, rows_i] for T), or their per-piece arg-max pair argmax_idx /
 * argmax_val ([k], or [T, k]); the outputs declared and described.
 */
async function scorePieces(
  w: GraphWeights,
  o: ResolvedOptions,
  x: MilVar,
  T: number,
): Promise<{ V: number; pieces: ReturnType<typeof planPieces>; outs: IoTensor[] }> {
  const b = w.b;
  const D = x.shape[1];
  const dt = o.dtype;
  const head = await w.stored("lm_head"); // [V, D]; the embedding when tied
  const V = head.shape[0];
  const pieces = planPieces(V, o.lmHeadMaxRows, pieceUnit(o.quant.tensor("lm_head").encoding));
  const outs: IoTensor[] = [];
  const idx: MilVar[] = [];
  const val: MilVar[] = [];
  for (const [i, piece] of pieces.entries()) {
    const rows = { start: piece.rowOffset, end: piece.rowOffset + piece.rows, tail: [D, 1, 1] };
    const weight = await w.encodeRows(head, rows, "lm_head", `lm_head_${i}_weight`);
    const y = conv1x1(b, x, weight, `lm_head_${i}`); // [1, rows, 1, T]
    const logits =
      T === 1
        ? b.reshape({ x: y, shape: [1, piece.rows], name: `logits_${i}_flat` })
        : b.transpose({
            x: b.reshape({ x: y, shape: [piece.rows, T], name: `logits_${i}_cols` }),
            perm: [1, 0],
            name: `logits_${i}_rows`,
          }); // [T, rows]
    if (o.argmax) {
      // per row, within the piece: [1] int32 and [1] for one row, [T, 1] for T
      const keepDims = T > 1;
      idx.push(
        b.reduceArgmax({ x: logits, axis: 1, ...(keepDims ? { keepDims } : {}), name: `argmax_${i}_idx` }),
      );
      val.push(
        b.reduceMax({ x: logits, axes: [1], ...(keepDims ? { keepDims } : {}), name: `argmax_${i}_val` }),
      );
    } else {
      b.output(`logits_${i}`, logits);
      outs.push({
        name: `logits_${i}`,
        dtype: dt,
        shape: [T, piece.rows],
        role: { kind: "logits", piece: i, rowOffset: piece.rowOffset, rows: piece.rows },
      });
    }
  }
  if (o.argmax) {
    const rowOffsets = pieces.map((p) => p.rowOffset);
    const k = pieces.length;
    const axis = T === 1 ? 0 : 1;
    const shape = T === 1 ? [k] : [T, k];
    b.output("argmax_idx", k === 1 ? idx[0] : b.concat({ values: idx, axis, name: "argmax_idx_cat" }));
    b.output("argmax_val", k === 1 ? val[0] : b.concat({ values: val, axis, name: "argmax_val_cat" }));
    outs.push({ name: "argmax_idx", dtype: "int32", shape, role: { kind: "argmax_idx", rowOffsets } });
    outs.push({ name: "argmax_val", dtype: dt, shape, role: { kind: "argmax_val", rowOffsets } });
  }
  return { V, pieces, outs };
}
