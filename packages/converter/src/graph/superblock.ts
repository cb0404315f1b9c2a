/**
 * Decoder layers and DDDA super-blocks (reference §2.1): every layer is
 *   h += mixer(RMSNorm1p(h));  h += MLP(RMSNorm1p(h))
 * with the mixer a Gated DeltaNet (layers 4s, 4s+1, 4s+2) or gated full attention (layer 4s+3).
 * The `superblocks` component fuses N consecutive super-blocks into one function.
 */

import type { Qwen35Config, SuperBlock } from "@anemll-qwen35/ir/checkpoint";
import { type MilVar, tensorType } from "@anemll-qwen35/ir/mil";
import { GDN_V_SCALE, MASK_NEG } from "./ane.js";
import {
  type AttentionCore,
  type AttentionStep,
  attentionLayer,
  type KvCache,
  type RopeRow,
  ropeSpec,
} from "./attention.js";
import { type GdnStateIn, type GdnStep, gdnLayer } from "./gdn.js";
import { type GdnChunkInputs, type GdnPrefillForm, gdnChunkLayer } from "./gdn-chunked.js";
import type { ComponentIO, GraphDType, IoTensor } from "./io.js";
import { mlp } from "./mlp.js";
import { rmsNorm1p } from "./norms.js";
import type { ResolvedOptions } from "./options.js";
import { attentionChunkLayer } from "./prefill-attention.js";
import type { GraphWeights } from "./weights.js";

/** What every layer of one step reads besides the hidden state. */
export interface StepInputs {
  readonly rope: RopeRow;
  readonly mask: MilVar;
  readonly gdn: ReadonlyMap<number, GdnStateIn>;
  readonly kv: ReadonlyMap<number, KvCache>;
  readonly attention: AttentionCore;
  /** Most intermediate channels per MLP projection (wider MLPs are split: mlp.ts). */
  readonly mlpMaxChannels: number;
  /** The prefill function: the chunk's GDN inputs (the mixers then run over T tokens). */
  readonly chunk?: GdnChunkInputs;
}

/** The prefill function's shape: T tokens a call, and how its GDN layers run the delta rule. */
export interface PrefillShape {
  readonly tokens: number;
  readonly gdnForm: GdnPrefillForm;
  readonly wyChunk: number;
}

/** What the layers of one step produce besides the hidden state, by layer. */
export interface StepOutputs {
  readonly gdn: Map<number, GdnStep>;
  readonly attention: Map<number, AttentionStep>;
}

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
    let mixed: MilVar;
    const chunk = inputs.chunk;
    if (w.source.config.layerTypes[layer] === "linear_attention") {
      const state = inputs.gdn.get(layer) as GdnStateIn;
      const step = await b.scope("gdn", () =>
        chunk ? gdnChunkLayer(w, layer, x, state, chunk) : gdnLayer(w, layer, x, state),
      );
      outputs.gdn.set(layer, step);
      mixed = step.out;
    } else {
      const kv = inputs.kv.get(layer) as KvCache;
      const form = inputs.attention;
      const step = await b.scope("attn", () =>
        chunk
          ? // the bench-only joined form has no prefill variant: its prefill is the matmul form's
            attentionChunkLayer(
              w,
              layer,
              x,
              inputs.rope,
              inputs.mask,
              kv,
              form === "matmul-joined" ? "matmul" : form,
            )
          : attentionLayer(w, layer, x, inputs.rope, inputs.mask, kv, form),
      );
      outputs.attention.set(layer, step);
      mixed = step.out;
    }
    const h1 = b.add({ x: h, y: mixed, name: "mixer_residual" });
    const x2 = await rmsNorm1p(w, `layers.${layer}.post_attention_layernorm.weight`, h1, "post_norm");
    const m = await b.scope("mlp", () => mlp(w, layer, x2, inputs.mlpMaxChannels));
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

/** The rope_cos / rope_sin inputs [1, 1, T, rot/2] of a step of T tokens (the host computes them). */
export function ropeInputs(
  input: (t: IoTensor) => MilVar,
  cfg: Qwen35Config,
  dt: GraphDType,
  tokens: number,
): RopeRow {
  const shape = [1, 1, tokens, cfg.rotaryDim / 2];
  const spec = ropeSpec(cfg);
  return {
    cos: input({ name: "rope_cos", dtype: dt, shape, role: { kind: "rope", part: "cos", ...spec } }),
    sin: input({ name: "rope_sin", dtype: dt, shape, role: { kind: "rope", part: "sin", ...spec } }),
  };
}

/**
 * The `superblocks` component: super-blocks first..first+count-1 in one function, with its
 * inputs (hidden, position, mask, the GDN states, the KV caches or the KV state) and outputs.
 *
 * Attention scores every layer's cached rows and this token's row apart (attention.ts), so the
 * mask has ctx + 1 keys in both KV placements. RoPE's cos/sin come in as inputs (the host computes
 * them for any position), so the function has no gather. With the KV in a Core ML state, the
 * function reads the state once, and writes all layers' new rows at `position` in one
 * slice_update at its end; the int32 bounds of that write are computed once, at the start — the
 * only run-time-index work of the function — so no int32 op sits between two ANE ops.
 */
export async function buildSuperblocks(
  w: GraphWeights,
  first: number,
  count: number,
  o: ResolvedOptions,
  prefill?: PrefillShape,
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
  const T = prefill?.tokens ?? 1;
  const keys = ctx + T;
  const convShape = [1, cfg.convDim, cfg.linearConvKernelDim - 1];
  const recShape = [1, cfg.linearNumValueHeads, cfg.linearKeyHeadDim, cfg.linearValueHeadDim];
  const kvShape = [1, Hkv, ctx, hd];
  const newShape = [1, Hkv, T, hd];

  const ins: IoTensor[] = [];
  const outs: IoTensor[] = [];
  const states: IoTensor[] = [];
  const input = (t: IoTensor) => {
    ins.push(t);
    return b.input(t.name, tensorType(t.dtype, t.shape));
  };

  const hidden = input({ name: "hidden", dtype: dt, shape: [1, D, 1, T], role: { kind: "hidden_in" } });
  const rope = ropeInputs(input, cfg, dt, T);
  const mask = input({
    name: "mask",
    dtype: dt,
    shape: [1, 1, T, keys],
    role: { kind: "mask", rule: prefill ? "prefill" : "io", keys, maskValue: MASK_NEG },
  });
  const K1 = cfg.linearConvKernelDim - 1;
  const chunk: GdnChunkInputs | undefined = prefill && {
    valid: input({ name: "valid", dtype: dt, shape: [1, 1, T, 1], role: { kind: "valid" } }),
    convPick: input({ name: "conv_pick", dtype: dt, shape: [1, T + K1, K1], role: { kind: "conv_pick" } }),
    form: prefill.gdnForm,
    wyChunk: prefill.wyChunk,
  };
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
  const kv = new Map<number, KvCache>();
  const n = attnLayers.length;
  /** mlstate: the state and the bounds of this step's one write. */
  let kvWrite: { state: MilVar; begin: MilVar; end: MilVar } | undefined;
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
      kv.set(L, { k, v });
    }
  } else {
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
    const position = input({ name: "position", dtype: "int32", shape: [1], role: { kind: "position" } });
    // [0, 0, position, 0] .. [2n, Hkv, position + T, hd]
    const begin = b.concat({
      values: [b.const([0, 0], "int32", [2]), position, b.const([0], "int32", [1])],
      axis: 0,
      name: "kv_write_begin",
    });
    const next = b.add({ x: position, y: T, name: "kv_write_end_pos" });
    const end = b.concat({
      values: [b.const([2 * n, Hkv], "int32", [2]), next, b.const([hd], "int32", [1])],
      axis: 0,
      name: "kv_write_end",
    });
    kvWrite = { state, begin, end };
  }
  const kvRead = kvWrite && b.readState({ input: kvWrite.state, name: "kv_read" }); // [2n, Hkv, ctx, hd]
  if (kvRead) {
    const rowsOf = (row: number, name: string) => {
      const x = b.sliceByIndex({ x: kvRead, begin: [row, 0, 0, 0], end: [row + 1, Hkv, ctx, hd], name });
      return dt === "fp16" ? x : b.cast({ x, dtype: "fp32", name: `${name}_f32` }); // fp32 graphs
    };
    for (const [i, L] of attnLayers.entries())
      kv.set(L, { k: rowsOf(i, `kv${L}_k_rows`), v: rowsOf(n + i, `kv${L}_v_rows`) });
  }

  const inputs: StepInputs = {
    rope,
    mask,
    gdn,
    kv,
    attention: o.attention,
    mlpMaxChannels: o.mlpMaxChannels,
    chunk,
  };
  const outputs: StepOutputs = { gdn: new Map(), attention: new Map() };
  let h = hidden;
  for (const sb of blocks) h = await superblock(w, sb, h, inputs, outputs);

  if (kvWrite && kvRead) {
    // every layer's new k rows, then every v rows, in state-row order: [2n, Hkv, T, hd]
    const steps = attnLayers.map((L) => outputs.attention.get(L) as AttentionStep);
    let update = b.concat({
      values: [...steps.map((s) => s.kNew), ...steps.map((s) => s.vNew)],
      axis: 0,
      name: "kv_new_rows",
    });
    if (update.dtype !== "fp16") update = b.cast({ x: update, dtype: "fp16", name: "kv_new_rows_f16" });
    const written = b.sliceUpdate({
      x: kvRead,
      update,
      begin: kvWrite.begin,
      end: kvWrite.end,
      name: "kv_write",
    });
    b.writeState({ input: kvWrite.state, data: written });
  }
  const output = (t: IoTensor, v: MilVar) => {
    outs.push(t);
    b.output(t.name, v);
  };
  output({ name: "hidden_out", dtype: dt, shape: [1, D, 1, T], role: { kind: "hidden_out" } }, h);
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
    prefill
      ? `mask [T, ctx + T]: row i is 0 for cache rows < position and for chunk keys ≤ i, ${MASK_NEG} elsewhere`
      : `mask: 0 for key rows < position and for the last key (this token), ${MASK_NEG} elsewhere`,
  ];
  if (prefill)
    notes.push(
      `prefill: ${T} tokens at positions [position, position + ${T}) in one call; a shorter chunk of n tokens feeds zero hidden rows after them, valid = 1 for the first n rows and 0 after, conv_pick picks window columns n … n + ${K1 - 1}; all ${T} KV rows are written (rows past n are masked until decode overwrites them), so position + ${T} ≤ ctx`,
    );
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
