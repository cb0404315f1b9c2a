/** The `embed` component: token id → its embedding row, channels-first (reference §2.1: no scaling). */
import type { ComponentIO } from "@anemll-qwen35/ir/chain";
import { tensorType } from "@anemll-qwen35/ir/mil";
import type { ResolvedOptions } from "../options.js";
import type { GraphWeights } from "./weights.js";

/** input_ids int32 [1, 1] → hidden [1, D, 1, 1]. */
export async function buildEmbed(w: GraphWeights, o: ResolvedOptions): Promise<ComponentIO> {
  const b = w.b;
  const D = w.source.config.hiddenSize;
  const ids = b.input("input_ids", tensorType("int32", [1, 1]));
  const stored = await w.stored("embed"); // [V, D]
  const V = stored.shape[0];
  const table = await w.encodeRows(stored, { start: 0, end: V, tail: [D] }, "embed", "embed_tokens"); // [V, D] (a LUT expands to this)
  const row = b.gather({ x: table, indices: ids, axis: 0, name: "embed_row" }); // [1, 1, D]
  b.output("hidden", b.reshape({ x: row, shape: [1, D, 1, 1], name: "embed_hidden" }));
  return {
    component: "embed",
    dtype: o.dtype,
    ctx: o.ctx,
    state: o.state,
    layers: [],
    superBlocks: [],
    inputs: [{ name: "input_ids", dtype: "int32", shape: [1, 1], role: { kind: "input_ids" } }],
    outputs: [{ name: "hidden", dtype: o.dtype, shape: [1, D, 1, 1], role: { kind: "hidden_out" } }],
    states: [],
    notes: [],
  };
}
