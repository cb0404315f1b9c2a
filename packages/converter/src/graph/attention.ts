/**
 * Gated full attention, one decode step (reference §2.3): q_proj rows are per-head
 * [q_h | gate_h] blocks; per-head zero-centred q_norm/k_norm; partial RoPE on the first
 * `rotaryDim` dims; GQA without expanding K/V — the H/Hkv query heads of one KV head are the L
 * rows of that head's scaled_dot_product_attention; output × sigmoid(gate) → o_proj.
 */

import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { MilBuilder, MilVar, StateType } from "@anemll-qwen35/ir/mil";
import { conv1x1, rmsNormAne } from "./ane.js";
import { zeroCentredGain } from "./norms.js";
import type { GraphWeights } from "./weights.js";

/** cos/sin tables [ctx, rot/2] for positions 0..ctx-1 (HF: fp32 inv_freq, fp32 angle, cos/sin). */
export function ropeTables(config: Qwen35Config, ctx: number): { cos: Float32Array; sin: Float32Array } {
  const half = config.rotaryDim / 2;
  const cos = new Float32Array(ctx * half);
  const sin = new Float32Array(ctx * half);
  for (let i = 0; i < half; i++) {
    const invFreq = Math.fround(1 / Math.fround(config.ropeTheta ** Math.fround((2 * i) / config.rotaryDim)));
    for (let p = 0; p < ctx; p++) {
      const angle = Math.fround(p * invFreq);
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** cos and sin rows of this step's position, each [1, 1, 1, rot/2] (shared by all attention layers). */
export interface RopeRow {
  readonly cos: MilVar;
  readonly sin: MilVar;
}

/** Gathers the position's row of the constant tables. */
export function ropeRow(w: GraphWeights, ctx: number, position: MilVar): RopeRow {
  const b = w.b;
  const half = w.source.config.rotaryDim / 2;
  const t = ropeTables(w.source.config, ctx);
  const row = (table: Float32Array, name: string) => {
    const c = w.constant(table, [ctx, half], `rope_${name}_table`);
    const g = b.gather({ x: c, indices: position, axis: 0, name: `rope_${name}_row` }); // [1, rot/2]
    return b.reshape({ x: g, shape: [1, 1, 1, half], name: `rope_${name}` });
  };
  return { cos: row(t.cos, "cos"), sin: row(t.sin, "sin") };
}

/**
 * Rotate-half RoPE on the first `rot` dims of x [1, n, 1, hd]; dims rot..hd pass through.
 * x1 = x[0:rot/2], x2 = x[rot/2:rot] → [x1·c − x2·s, x2·c + x1·s, x[rot:]] (static slices + concat).
 */
function applyRope(b: MilBuilder, x: MilVar, rope: RopeRow, rot: number, name: string): MilVar {
  const [, n, , hd] = x.shape;
  const half = rot / 2;
  const x1 = b.sliceByIndex({ x, begin: [0, 0, 0, 0], end: [1, n, 1, half], name: `${name}_x1` });
  const x2 = b.sliceByIndex({ x, begin: [0, 0, 0, half], end: [1, n, 1, rot], name: `${name}_x2` });
  const r1 = b.sub({
    x: b.mul({ x: x1, y: rope.cos, name: `${name}_x1c` }),
    y: b.mul({ x: x2, y: rope.sin, name: `${name}_x2s` }),
    name: `${name}_r1`,
  });
  const r2 = b.add({
    x: b.mul({ x: x2, y: rope.cos, name: `${name}_x2c` }),
    y: b.mul({ x: x1, y: rope.sin, name: `${name}_x1s` }),
    name: `${name}_r2`,
  });
  if (rot === hd) return b.concat({ values: [r1, r2], axis: 3, name });
  const pass = b.sliceByIndex({ x, begin: [0, 0, 0, rot], end: [1, n, 1, hd], name: `${name}_pass` });
  return b.concat({ values: [r1, r2, pass], axis: 3, name });
}

/**
 * Where this layer's keys and values live:
 *   io:      the host's caches kv{L}_k / kv{L}_v [1, Hkv, ctx, hd] (rows < position valid); attention
 *            runs over concat(cache, this row), ctx + 1 keys, and the new row is returned;
 *   mlstate: rows `kRow` / `vRow` of the package's state [2n, Hkv, ctx, hd], written at `position`.
 */
export type KvBinding =
  | { readonly kind: "io"; readonly k: MilVar; readonly v: MilVar }
  | {
      readonly kind: "mlstate";
      readonly state: MilVar;
      readonly kRow: number;
      readonly vRow: number;
      readonly position: MilVar;
    };

export interface AttentionStep {
  /** [1, D, 1, 1] */
  readonly out: MilVar;
  /** This token's k (post-norm, post-RoPE) and v, [1, Hkv, 1, hd] in the graph dtype. */
  readonly kNew: MilVar;
  readonly vNew: MilVar;
}

/**
 * Writes this token's k/v rows into the Core ML state at `position` (read_state → slice_update →
 * write_state → read_state, as coremltools' coreml_update_state) and returns the layer's full
 * K and V [1, Hkv, ctx, hd]. The state is fp16 (Core ML states are fp16 only); an fp32 graph
 * casts around it.
 */
function kvFromState(
  b: MilBuilder,
  kv: Extract<KvBinding, { kind: "mlstate" }>,
  kNew: MilVar,
  vNew: MilVar,
  name: string,
): { keys: MilVar; values: MilVar } {
  const [, Hkv, ctx, hd] = (kv.state.type as StateType).wrapped.shape; // [2n, Hkv, ctx, hd]
  const toState = (x: MilVar, tag: string) =>
    x.dtype === "fp16" ? x : b.cast({ x, dtype: "fp16", name: `${name}_${tag}_f16` });
  const rowBegin = (row: number, tag: string) =>
    b.concat({
      values: [b.const([row, 0], "int32", [2]), kv.position, b.const([0], "int32", [1])],
      axis: 0,
      name: `${name}_${tag}_begin`,
    });
  const rowEnd = (row: number, tag: string) => {
    const next = b.add({ x: kv.position, y: 1, name: `${name}_${tag}_pos1` });
    return b.concat({
      values: [b.const([row + 1, Hkv], "int32", [2]), next, b.const([hd], "int32", [1])],
      axis: 0,
      name: `${name}_${tag}_end`,
    });
  };
  let cache = b.readState({ input: kv.state, name: `${name}_read` }); // [rows, Hkv, ctx, hd]
  cache = b.sliceUpdate({
    x: cache,
    update: toState(kNew, "k"),
    begin: rowBegin(kv.kRow, "k"),
    end: rowEnd(kv.kRow, "k"),
    name: `${name}_put_k`,
  });
  cache = b.sliceUpdate({
    x: cache,
    update: toState(vNew, "v"),
    begin: rowBegin(kv.vRow, "v"),
    end: rowEnd(kv.vRow, "v"),
    name: `${name}_put_v`,
  });
  const all = b.coremlUpdateState(kv.state, cache, { name: `${name}_state` });
  const take = (row: number, tag: string) => {
    const x = b.sliceByIndex({
      x: all,
      begin: [row, 0, 0, 0],
      end: [row + 1, Hkv, ctx, hd],
      name: `${name}_${tag}_rows`,
    });
    return kNew.dtype === "fp16" ? x : b.cast({ x, dtype: "fp32", name: `${name}_${tag}_cast` }); // fp32 graphs
  };
  return { keys: take(kv.kRow, "keys"), values: take(kv.vRow, "values") };
}

/** x [1, D, 1, 1] (already input-normed), mask [1, 1, 1, keys] → the mixer output and this token's k/v. */
export async function attentionLayer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  rope: RopeRow,
  mask: MilVar,
  kv: KvBinding,
): Promise<AttentionStep> {
  const b = w.b;
  const cfg = w.source.config;
  const H = cfg.numAttentionHeads;
  const Hkv = cfg.numKeyValueHeads;
  const hd = cfg.headDim;
  const G = H / Hkv; // query heads per KV head
  const eps = cfg.rmsNormEps;
  const p = `layers.${layer}.self_attn.`;

  // q_proj: per head [q_h | gate_h]
  const qg = conv1x1(b, x, await w.conv1x1Weight(`${p}q_proj.weight`, "body"), "qg"); // [1, 2·H·hd, 1, 1]
  const qgHeads = b.reshape({ x: qg, shape: [1, H, 1, 2 * hd], name: "qg_heads" });
  const qRaw = b.sliceByIndex({ x: qgHeads, begin: [0, 0, 0, 0], end: [1, H, 1, hd], name: "q_raw" }); // [1, H, 1, hd]
  const gate = b.sliceByIndex({
    x: qgHeads,
    begin: [0, 0, 0, hd],
    end: [1, H, 1, 2 * hd],
    name: "gate",
  }); // [1, H, 1, hd]
  const kRaw = b.reshape({
    x: conv1x1(b, x, await w.conv1x1Weight(`${p}k_proj.weight`, "body"), "k_proj"),
    shape: [1, Hkv, 1, hd],
    name: "k_raw",
  });
  const vNew = b.reshape({
    x: conv1x1(b, x, await w.conv1x1Weight(`${p}v_proj.weight`, "body"), "v_proj"),
    shape: [1, Hkv, 1, hd],
    name: "v_new",
  });

  // per-head zero-centred RMSNorm over hd, then partial RoPE
  const qGain = await zeroCentredGain(w, `${p}q_norm.weight`, [hd]);
  const kGain = await zeroCentredGain(w, `${p}k_norm.weight`, [hd]);
  const q = applyRope(
    b,
    rmsNormAne(b, qRaw, { axis: 3, eps, gamma: qGain, name: "q_norm" }),
    rope,
    cfg.rotaryDim,
    "q_rope",
  );
  const kNew = applyRope(
    b,
    rmsNormAne(b, kRaw, { axis: 3, eps, gamma: kGain, name: "k_norm" }),
    rope,
    cfg.rotaryDim,
    "k_new",
  );

  // keys and values this query attends to
  let keys: MilVar;
  let values: MilVar;
  if (kv.kind === "io") {
    keys = b.concat({ values: [kv.k, kNew], axis: 2, name: "keys" }); // [1, Hkv, ctx+1, hd]
    values = b.concat({ values: [kv.v, vNew], axis: 2, name: "values" });
  } else {
    ({ keys, values } = kvFromState(b, kv, kNew, vNew, "kv")); // [1, Hkv, ctx, hd]
  }

  // GQA: query heads h = j·G .. j·G+G-1 are the G query rows of KV head j; SDPA scales by 1/√hd
  const qGroups = b.reshape({ x: q, shape: [1, Hkv, G, hd], name: "q_groups" });
  const o = b.scaledDotProductAttention({
    query: qGroups,
    key: keys,
    value: values,
    attnMask: mask,
    name: "sdpa",
  }); // [1, Hkv, G, hd]
  const oFlat = b.reshape({ x: o, shape: [1, H * hd, 1, 1], name: "o" });
  const gateFlat = b.reshape({ x: gate, shape: [1, H * hd, 1, 1], name: "gate_flat" });
  const gated = b.mul({ x: oFlat, y: b.sigmoid({ x: gateFlat, name: "gate_sig" }), name: "gated" });
  const out = conv1x1(b, gated, await w.conv1x1Weight(`${p}o_proj.weight`, "body"), "out"); // [1, D, 1, 1]
  return { out, kNew, vNew };
}
