/**
 * Decoder layers and DDDA super-blocks (reference §2.1): every layer is
 *   h += mixer(RMSNorm1p(h));  h += MLP(RMSNorm1p(h))
 * with the mixer a Gated DeltaNet (layers 4s, 4s+1, 4s+2) or gated full attention (layer 4s+3).
 * The `superblocks` component fuses N consecutive super-blocks into one function.
 */

import type { SuperBlock } from "@anemll-qwen35/ir/checkpoint";
import { type MilVar, tensorType } from "@anemll-qwen35/ir/mil";
import { GDN_V_SCALE, MASK_NEG } from "./ane.js";
import { type AttentionStep, attentionLayer, type KvBinding, type RopeRow, ropeRow } from "./attention.js";
import { type GdnStateIn, type GdnStep, gdnLayer } from "./gdn.js";
import type { ComponentIO, IoTensor } from "./io.js";
import { mlp } from "./mlp.js";
import { rmsNorm1p } from "./norms.js";
import type { ResolvedOptions } from "./options.js";
import type { GraphWeights } from "./weights.js";

/** What every layer of one step reads besides the hidden state. */
export interface StepInputs {
  readonly rope: RopeRow;
  readonly mask: MilVar;
  readonly gdn: ReadonlyMap<number, GdnStateIn>;
  readonly kv: ReadonlyMap<number, KvBinding>;
}

/** What the layers of one step produce besides the hidden state, by layer. */
export interface StepOutputs {
  readonly gdn: Map<number, GdnStep>;
  readonly attention: Map<number, AttentionStep>;
}

/** One decoder layer: h [1, D, 1, 1] → [1, D, 1, 1]. */
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
    let mixed: MilVar;
    if (w.source.config.layerTypes[layer] === "linear_attention") {
      const step = await b.scope("gdn", () => gdnLayer(w, layer, x, inputs.gdn.get(layer) as GdnStateIn));
      outputs.gdn.set(layer, step);
      mixed = step.out;
    } else {
      const step = await b.scope("attn", () =>
        attentionLayer(w, layer, x, inputs.rope, inputs.mask, inputs.kv.get(layer) as KvBinding),
      );
      outputs.attention.set(layer, step);
      mixed = step.out;
    }
    const h1 = b.add({ x: h, y: mixed, name: "mixer_residual" });
    const x2 = await rmsNorm1p(w, `layers.${layer}.post_attention_layernorm.weight`, h1, "post_norm");
    const m = await b.scope("mlp", () => mlp(w, layer, x2));
    return b.add({ x: h1, y: m, name: "mlp_residual" });
  });
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
 * The `superblocks` component: super-blocks first..first+count-1 in one function, with its
 * inputs (hidden, position, mask, the GDN states, the KV caches or the KV state) and outputs.
 */
export async function buildSuperblocks(
  w: GraphWeights,
  first: number,
  count: number,
  o: ResolvedOptions,
): Promise<ComponentIO> {
  const b = w.b;
  const cfg = w.source.config;
  const dt = o.dtype;
  const { ctx } = o;
  const D = cfg.hiddenSize;
  const Hkv = cfg.numKeyValueHeads;
  const hd = cfg.headDim;
  const blocks = cfg.superBlocks.slice(first, first + count);
  const layers = blocks.flatMap((sb) => [...sb.layers]);
  const gdnLayers = layers.filter((l) => cfg.layerTypes[l] === "linear_attention");
  const attnLayers = layers.filter((l) => cfg.layerTypes[l] === "full_attention");
  const keys = o.state === "io" ? ctx + 1 : ctx;
  const convShape = [1, cfg.convDim, cfg.linearConvKernelDim - 1];
  const recShape = [1, cfg.linearNumValueHeads, cfg.linearKeyHeadDim, cfg.linearValueHeadDim];
  const kvShape = [1, Hkv, ctx, hd];
  const newShape = [1, Hkv, 1, hd];

  const ins: IoTensor[] = [];
  const outs: IoTensor[] = [];
  const states: IoTensor[] = [];
  const input = (t: IoTensor) => {
    ins.push(t);
    return b.input(t.name, tensorType(t.dtype, t.shape));
  };

  const hidden = input({ name: "hidden", dtype: dt, shape: [1, D, 1, 1], role: { kind: "hidden_in" } });
  const position = input({ name: "position", dtype: "int32", shape: [1], role: { kind: "position" } });
  const mask = input({
    name: "mask",
    dtype: dt,
    shape: [1, 1, 1, keys],
    role: { kind: "mask", rule: o.state, keys, maskValue: MASK_NEG },
  });
  const gdn = new Map<number, GdnStateIn>();
  for (const L of gdnLayers) {
    const conv = input({
      name: `gdn${L}_conv`,
      dtype: dt,
      shape: convShape,
      role: { kind: "gdn_conv_in", layer: L },
    });
    const rec = input({
      name: `gdn${L}_rec`,
      dtype: dt,
      shape: recShape,
      role: { kind: "gdn_rec_in", layer: L, scale: GDN_V_SCALE },
    });
    gdn.set(L, { conv, rec });
  }
  const kv = new Map<number, KvBinding>();
  if (o.state === "io") {
    for (const L of attnLayers) {
      const k = input({
        name: `kv${L}_k`,
        dtype: dt,
        shape: kvShape,
        role: { kind: "kv_cache", layer: L, part: "k" },
      });
      const v = input({
        name: `kv${L}_v`,
        dtype: dt,
        shape: kvShape,
        role: { kind: "kv_cache", layer: L, part: "v" },
      });
      kv.set(L, { kind: "io", k, v });
    }
  } else {
    const n = attnLayers.length;
    const rows = attnLayers.flatMap((L, i) => [
      { row: i, layer: L, part: "k" as const },
      { row: n + i, layer: L, part: "v" as const },
    ]);
    const shape = [2 * n, Hkv, ctx, hd];
    states.push({
      name: "kv",
      dtype: "fp16",
      shape,
      role: { kind: "kv_state", rows: rows.sort((p, q) => p.row - q.row) },
    });
    const state = b.state("kv", tensorType("fp16", shape)); // Core ML states are fp16 in every dtype
    for (const [i, L] of attnLayers.entries())
      kv.set(L, { kind: "mlstate", state, kRow: i, vRow: n + i, position });
  }

  const inputs: StepInputs = { rope: ropeRow(w, ctx, position), mask, gdn, kv };
  const outputs: StepOutputs = { gdn: new Map(), attention: new Map() };
  let h = hidden;
  for (const sb of blocks) h = await superblock(w, sb, h, inputs, outputs);

  const output = (t: IoTensor, v: MilVar) => {
    outs.push(t);
    b.output(t.name, v);
  };
  output({ name: "hidden_out", dtype: dt, shape: [1, D, 1, 1], role: { kind: "hidden_out" } }, h);
  for (const L of layers) {
    const g = outputs.gdn.get(L);
    if (g) {
      output(
        {
          name: `gdn${L}_conv_out`,
          dtype: dt,
          shape: convShape,
          role: { kind: "gdn_conv_out", layer: L, next: `gdn${L}_conv` },
        },
        g.conv,
      );
      output(
        {
          name: `gdn${L}_rec_out`,
          dtype: dt,
          shape: recShape,
          role: { kind: "gdn_rec_out", layer: L, scale: GDN_V_SCALE, next: `gdn${L}_rec` },
        },
        g.rec,
      );
    }
    const a = outputs.attention.get(L);
    if (a && o.state === "io") {
      output(
        {
          name: `kv${L}_k_new`,
          dtype: dt,
          shape: newShape,
          role: { kind: "kv_new", layer: L, part: "k", cache: `kv${L}_k`, writeRow: "position" },
        },
        a.kNew,
      );
      output(
        {
          name: `kv${L}_v_new`,
          dtype: dt,
          shape: newShape,
          role: { kind: "kv_new", layer: L, part: "v", cache: `kv${L}_v`, writeRow: "position" },
        },
        a.vNew,
      );
    }
  }

  const notes = [
    `gdn{L}_rec holds ${GDN_V_SCALE}·S (v is scaled by ${GDN_V_SCALE} for fp16 safety); zero-initialise it at sequence start like the reference state`,
    `mask: ${o.state === "io" ? "0 for key rows < position and for the last key (this token), " : "0 for key rows <= position, "}${MASK_NEG} elsewhere`,
  ];
  if (o.state === "mlstate" && dt === "fp32")
    notes.push("the KV state is fp16 (Core ML states are fp16 only); this fp32 graph casts around it");
  return {
    component: "superblocks",
    dtype: dt,
    ctx,
    state: o.state,
    layers,
    superBlocks: blocks.map((sb) => sb.index),
    inputs: ins,
    outputs: outs,
    states,
    notes,
  };
}
