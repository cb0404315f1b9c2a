/**
 * Decoder layers and DDDA super-blocks (reference §2.1): every layer is
 *   h += mixer(RMSNorm1p(h));  h += MLP(RMSNorm1p(h))
 * with the mixer a Gated DeltaNet (layers 4s, 4s+1, 4s+2) or gated full attention (layer 4s+3).
 * The `superblocks` component fuses N consecutive super-blocks into one function; its inputs,
 * states and outputs are declared in superblock-io.ts.
 */

import type { ComponentIO } from "@anemll-qwen35/ir/chain";
import type { SuperBlock } from "@anemll-qwen35/ir/checkpoint";
import type { MilVar } from "@anemll-qwen35/ir/mil";
import type { ResolvedOptions } from "../options.js";
import { attentionLayer, type KvCache } from "./attention.js";
import { type GdnStateIn, gdnLayer } from "./gdn.js";
import { gdnChunkLayer } from "./gdn-chunked.js";
import { mlp } from "./mlp.js";
import { rmsNorm1p } from "./norms.js";
import { attentionChunkLayer } from "./prefill-attention.js";
import { type PrefillShape, type StepInputs, type StepOutputs, SuperblockIO } from "./superblock-io.js";
import type { GraphWeights } from "./weights.js";

/** One decoder layer: h [1, D, 1, T] → [1, D, 1, T] (T = 1 for decode). */
export async function decoderLayer(
  w: GraphWeights,
  layer: number,
  h: MilVar,
  inputs: StepInputs,
  outputs: StepOutputs,
): Promise<MilVar> {
  const b = w.b;
  // ops are named l{layer}_…, l{layer}_gdn_…, l{layer}_attn_…, l{layer}_mlp_…
  return b.scope(`l${layer}`, async () => {
    const x = await rmsNorm1p(w, `layers.${layer}.input_layernorm.weight`, h, "input_norm");
    const h1 = b.add({ x: h, y: await mixer(w, layer, x, inputs, outputs), name: "mixer_residual" });
    const x2 = await rmsNorm1p(w, `layers.${layer}.post_attention_layernorm.weight`, h1, "post_norm");
    const m = await b.scope("mlp", () => mlp(w, layer, x2, inputs.mlpMaxChannels));
    return b.add({ x: h1, y: m, name: "mlp_residual" });
  });
}

/**
 * The layer's token mixer on x (input-normed): a Gated DeltaNet or gated full attention, over one
 * token (decode) or the chunk (prefill); records the states it produces in `outputs`.
 */
async function mixer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  inputs: StepInputs,
  outputs: StepOutputs,
): Promise<MilVar> {
  const { chunk, rope, mask } = inputs;
  if (w.source.config.layerTypes[layer] === "linear_attention") {
    const state = inputs.gdn.get(layer) as GdnStateIn;
    const step = await w.b.scope("gdn", () =>
      chunk ? gdnChunkLayer(w, layer, x, state, chunk) : gdnLayer(w, layer, x, state),
    );
    outputs.gdn.set(layer, step);
    return step.out;
  }
  const attention = { rope, mask, cache: inputs.kv.get(layer) as KvCache, form: inputs.attention };
  const step = await w.b.scope("attn", () =>
    chunk ? attentionChunkLayer(w, layer, x, attention) : attentionLayer(w, layer, x, attention),
  );
  outputs.attention.set(layer, step);
  return step.out;
}

/** Super-block `sb`: its four layers in order. */
export async function superblock(
  w: GraphWeights,
  sb: SuperBlock,
  h: MilVar,
  inputs: StepInputs,
  outputs: StepOutputs,
): Promise<MilVar> {
  let x = h;
  for (const layer of sb.layers) x = await decoderLayer(w, layer, x, inputs, outputs);
  return x;
}

/**
 * The `superblocks` component: super-blocks first..first+count-1 in one function — the layers in
 * order over the hidden state, between the inputs and outputs SuperblockIO declares.
 */
export async function buildSuperblocks(
  w: GraphWeights,
  first: number,
  count: number,
  o: ResolvedOptions,
  prefill?: PrefillShape,
): Promise<ComponentIO> {
  const blocks = w.source.config.superBlocks.slice(first, first + count);
  const io = new SuperblockIO(w.b, w.source.config, blocks, o, prefill);
  let h = io.hidden;
  for (const sb of blocks) h = await superblock(w, sb, h, io.step, io.produced);
  return io.finish(h);
}
