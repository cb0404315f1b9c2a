/**
 * Gated full attention, one decode step (reference §2.3): q_proj rows are per-head
 * [q_h | gate_h] blocks; per-head zero-centred q_norm/k_norm; partial RoPE on the first
 * `rotaryDim` dims; GQA without expanding K/V — the H/Hkv query heads of one KV head are the
 * query rows of that head's attention; output × sigmoid(gate) → o_proj.
 */

import { type RopeSpec, ropeCosSin } from "@anemll-qwen35/ir/chain";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { MilBuilder, MilVar } from "@anemll-qwen35/ir/mil";
import { conv1x1, rmsNormAne, scalar } from "./ane.js";
import { zeroCentredGain } from "./norms.js";
import type { GraphWeights } from "./weights.js";

/** cos/sin tables [ctx, rot/2] for positions 0..ctx-1 (the host's computation, ir/chain's ropeCosSin). */
export function ropeTables(config: Qwen35Config, ctx: number): { cos: Float32Array; sin: Float32Array } {
  return ropeCosSin(
    ropeSpec(config),
    Array.from({ length: ctx }, (_, p) => p),
  );
}

/** The model's RoPE as the host computes it. */
export function ropeSpec(config: Qwen35Config): RopeSpec {
  return { rotaryDim: config.rotaryDim, theta: config.ropeTheta };
}

/**
 * cos and sin of this step's positions, each [1, 1, T, rot/2] (shared by all attention layers):
 * inputs the host computes (ir/chain's ropeCosSin), so no super-block gathers by position.
 */
export interface RopeRow {
  readonly cos: MilVar;
  readonly sin: MilVar;
}

/**
 * Rotate-half RoPE on the first `rot` dims of x [1, n, T, hd] (cos/sin [1, 1, T, rot/2]); dims
 * rot..hd pass through.
 * x1 = x[0:rot/2], x2 = x[rot/2:rot] → [x1·c − x2·s, x2·c + x1·s, x[rot:]] (static slices + concat).
 */
export function applyRope(b: MilBuilder, x: MilVar, rope: RopeRow, rot: number, name: string): MilVar {
  const [, n, t, hd] = x.shape;
  const half = rot / 2;
  const x1 = b.sliceByIndex({ x, begin: [0, 0, 0, 0], end: [1, n, t, half], name: `${name}_x1` });
  const x2 = b.sliceByIndex({ x, begin: [0, 0, 0, half], end: [1, n, t, rot], name: `${name}_x2` });
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
  const pass = b.sliceByIndex({ x, begin: [0, 0, 0, rot], end: [1, n, t, hd], name: `${name}_pass` });
  return b.concat({ values: [r1, r2, pass], axis: 3, name });
}

/**
 * This layer's cached keys and values [1, Hkv, ctx, hd] (post-norm, post-RoPE k; raw v), rows
 * < position valid and this token's row not yet among them: the host's caches kv{L}_k / kv{L}_v
 * (io), or the layer's rows of the package's KV state as read at the start of the step (mlstate,
 * where the new rows are written once, at the end of the function: superblock.ts).
 */
export interface KvCache {
  readonly k: MilVar;
  readonly v: MilVar;
}

/**
 * The attention core, softmax(q·kᵀ/√hd + mask)·v over the cached rows and this token's row:
 *   matmul: q·Kᵀ and P·V as matmul ops beside softmax — the form ANE ports ship (ANEMLL, CoreML-LLM);
 *           the cache and the new row are scored apart and only the scores are joined, so no copy
 *           of the cache is made;
 *   sdpa:   the iOS18 scaled_dot_product_attention op over concat(cache, new row) — no ANE port
 *           is known to run it (ane-graph-review R8), kept to compare on a Mac.
 */
export type AttentionForm = "matmul" | "sdpa";
export const ATTENTION_FORMS: readonly AttentionForm[] = ["matmul", "sdpa"];
/**
 * The forms the graph builds: the two above and "matmul-joined", the matmul form over
 * concat(cache, new row) as the converter built it before the cache was scored apart — kept only
 * so that costplan's before/after (bench/costplan-fused.ts) can cost that one change.
 */
export type AttentionCore = AttentionForm | "matmul-joined";
export const ATTENTION_CORES: readonly AttentionCore[] = [...ATTENTION_FORMS, "matmul-joined"];

export interface AttentionStep {
  /** [1, D, 1, 1] */
  readonly out: MilVar;
  /** This token's k (post-norm, post-RoPE) and v, [1, Hkv, 1, hd] in the graph dtype. */
  readonly kNew: MilVar;
  readonly vNew: MilVar;
}

/**
 * q [1, Hkv, G, hd] (G query heads per KV head) against the cache and this token's k/v
 * (`fresh`, [1, Hkv, 1, hd]), mask [1, 1, 1, ctx + 1] (the cache rows, then this token) →
 * [1, Hkv, G, hd], in the chosen form.
 */
function attend(b: MilBuilder, q: MilVar, fresh: KvCache, { form, cache, mask }: AttentionInputs): MilVar {
  const { k: kNew, v: vNew } = fresh;
  const joined = () => ({
    keys: b.concat({ values: [cache.k, kNew], axis: 2, name: "keys" }), // [1, Hkv, ctx+1, hd]
    values: b.concat({ values: [cache.v, vNew], axis: 2, name: "values" }),
  });
  if (form === "sdpa") {
    const { keys, values } = joined();
    return b.scaledDotProductAttention({ query: q, key: keys, value: values, attnMask: mask, name: "sdpa" });
  }
  const [, Hkv, G, hd] = q.shape;
  const ctx = cache.k.shape[2];
  // 1/√hd on q (G·hd values) rather than on the scores, which also keeps q·k well inside fp16
  const qs = b.mul({ x: q, y: scalar(1 / Math.sqrt(hd), q), name: "q_scaled" });
  if (form === "matmul-joined") {
    const { keys, values } = joined();
    const s = b.matmul({ x: qs, y: keys, transposeY: true, name: "scores_joined" }); // [1, Hkv, G, ctx+1]
    const p = b.softmax({ x: b.add({ x: s, y: mask, name: "scores" }), axis: 3, name: "probs" });
    return b.matmul({ x: p, y: values, name: "attn" });
  }
  const sCache = b.matmul({ x: qs, y: cache.k, transposeY: true, name: "scores_cache" }); // [1, Hkv, G, ctx]
  const sNew = b.reduceSum({
    x: b.mul({ x: qs, y: kNew, name: "qk_new" }),
    axes: [3],
    keepDims: true,
    name: "score_new",
  }); // [1, Hkv, G, 1]
  const scores = b.add({
    x: b.concat({ values: [sCache, sNew], axis: 3, name: "scores_cat" }),
    y: mask,
    name: "scores",
  }); // [1, Hkv, G, ctx+1]
  const p = b.softmax({ x: scores, axis: 3, name: "probs" });
  const pCache = b.sliceByIndex({ x: p, begin: [0, 0, 0, 0], end: [1, Hkv, G, ctx], name: "probs_cache" });
  const pNew = b.sliceByIndex({ x: p, begin: [0, 0, 0, ctx], end: [1, Hkv, G, ctx + 1], name: "probs_new" });
  const oCache = b.matmul({ x: pCache, y: cache.v, name: "o_cache" }); // [1, Hkv, G, hd]
  const oNew = b.mul({ x: pNew, y: vNew, name: "o_new" }); // [1, Hkv, G, 1] · [1, Hkv, 1, hd]
  return b.add({ x: oCache, y: oNew, name: "attn" });
}

/**
 * One attention layer's sizes and its projections, as the decode step and the prefill chunk
 * (prefill-attention.ts) both read them: `project` applies q_proj, k_proj or v_proj to x as a
 * 1×1 conv ([1, rows, 1, T]).
 */
export interface AttentionLayerSetup {
  readonly layer: number;
  readonly H: number;
  readonly Hkv: number;
  readonly hd: number;
  /** Query heads per KV head. */
  readonly G: number;
  project(name: "q_proj" | "k_proj" | "v_proj", as: string): Promise<MilVar>;
}

export function attentionSetup(w: GraphWeights, layer: number, x: MilVar): AttentionLayerSetup {
  const cfg = w.source.config;
  const H = cfg.numAttentionHeads;
  const Hkv = cfg.numKeyValueHeads;
  const prefix = `layers.${layer}.self_attn.`;
  return {
    layer,
    H,
    Hkv,
    hd: cfg.headDim,
    G: H / Hkv,
    project: async (name, as) => conv1x1(w.b, x, await w.conv1x1Weight(`${prefix}${name}.weight`), as),
  };
}

/**
 * Per-head zero-centred RMSNorm over hd (q_norm, k_norm), then partial RoPE: q [1, H, T, hd] and
 * k [1, Hkv, T, hd] with rope rows [1, 1, T, rot/2] (T = 1 for decode).
 */
export async function normAndRope(
  w: GraphWeights,
  layer: number,
  qRaw: MilVar,
  kRaw: MilVar,
  rope: RopeRow,
): Promise<{ q: MilVar; kNew: MilVar }> {
  const b = w.b;
  const cfg = w.source.config;
  const hd = cfg.headDim;
  const eps = cfg.rmsNormEps;
  const p = `layers.${layer}.self_attn.`;
  const qGain = await zeroCentredGain(w, `${p}q_norm.weight`, [hd]);
  const kGain = await zeroCentredGain(w, `${p}k_norm.weight`, [hd]);
  const norm = (x: MilVar, gamma: MilVar, name: string) => rmsNormAne(b, x, { axis: 3, eps, gamma, name });
  return {
    q: applyRope(b, norm(qRaw, qGain, "q_norm"), rope, cfg.rotaryDim, "q_rope"),
    kNew: applyRope(b, norm(kRaw, kGain, "k_norm"), rope, cfg.rotaryDim, "k_new"),
  };
}

/** The attention output [1, H·hd, 1, T] × sigmoid(gate [1, H·hd, 1, T]) → o_proj → [1, D, 1, T]. */
export async function gatedOutput(w: GraphWeights, layer: number, o: MilVar, gate: MilVar): Promise<MilVar> {
  const b = w.b;
  const gated = b.mul({ x: o, y: b.sigmoid({ x: gate, name: "gate_sig" }), name: "gated" });
  return conv1x1(b, gated, await w.conv1x1Weight(`layers.${layer}.self_attn.o_proj.weight`), "out");
}

/** What an attention layer reads besides x: this step's RoPE rows and mask, its KV cache, the core's form. */
export interface AttentionInputs {
  readonly rope: RopeRow;
  readonly mask: MilVar;
  readonly cache: KvCache;
  readonly form: AttentionCore;
}

/** x [1, D, 1, 1] (already input-normed), mask [1, 1, 1, ctx + 1] → the mixer output and this token's k/v. */
export async function attentionLayer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  at: AttentionInputs,
): Promise<AttentionStep> {
  const b = w.b;
  const a = attentionSetup(w, layer, x);
  const { H, Hkv, hd, G } = a;

  // q_proj: per head [q_h | gate_h]
  const qgHeads = b.reshape({
    x: await a.project("q_proj", "qg"),
    shape: [1, H, 1, 2 * hd],
    name: "qg_heads",
  });
  const qRaw = b.sliceByIndex({ x: qgHeads, begin: [0, 0, 0, 0], end: [1, H, 1, hd], name: "q_raw" }); // [1, H, 1, hd]
  const gate = b.sliceByIndex({
    x: qgHeads,
    begin: [0, 0, 0, hd],
    end: [1, H, 1, 2 * hd],
    name: "gate",
  }); // [1, H, 1, hd]
  const heads = async (name: "k_proj" | "v_proj", as: string) =>
    b.reshape({ x: await a.project(name, name), shape: [1, Hkv, 1, hd], name: as });
  const kRaw = await heads("k_proj", "k_raw");
  const vNew = await heads("v_proj", "v_new");

  const { q, kNew } = await normAndRope(w, layer, qRaw, kRaw, at.rope);

  // GQA without expanding K/V: query heads j·G .. j·G+G-1 are the G query rows of KV head j
  const qGroups = b.reshape({ x: q, shape: [1, Hkv, G, hd], name: "q_groups" });
  const o = attend(b, qGroups, { k: kNew, v: vNew }, at); // [1, Hkv, G, hd]
  const oFlat = b.reshape({ x: o, shape: [1, H * hd, 1, 1], name: "o" });
  const gateFlat = b.reshape({ x: gate, shape: [1, H * hd, 1, 1], name: "gate_flat" });
  const out = await gatedOutput(w, layer, oFlat, gateFlat); // [1, D, 1, 1]
  return { out, kNew, vNew };
}
