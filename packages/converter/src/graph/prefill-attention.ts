/**
 * Gated full attention over a chunk of T tokens (the prefill function): T queries against the
 * cached rows plus the chunk's own rows, causal within the chunk, partial RoPE at the chunk's T
 * positions (the host's cos/sin rows). The same math as the decode step (attention.ts), with the
 * chunk's keys scored apart from the cache — so the cache is never copied — and all T new k/v
 * rows returned for the KV cache (io) or the state write (mlstate).
 */
import type { MilBuilder, MilVar } from "@anemll-qwen35/ir/mil";
import { scalar } from "./ane.js";
import {
  type AttentionInputs,
  type AttentionStep,
  attentionSetup,
  gatedOutput,
  type KvCache,
  normAndRope,
} from "./attention.js";
import type { GraphWeights } from "./weights.js";

/**
 * q [1, Hkv, G·T, hd] (row g·T + t: query head j·G + g at chunk token t) against the cache and
 * the chunk's k/v (`fresh`, [1, Hkv, T, hd]), mask [1, 1, T, ctx + T] (the cache rows, then the
 * chunk's) → [1, Hkv, G·T, hd]. The bench-only "matmul-joined" core has no chunk form: its
 * prefill is the matmul form's.
 */
function attendChunk(
  b: MilBuilder,
  q: MilVar,
  fresh: KvCache,
  { form, cache, mask }: AttentionInputs,
): MilVar {
  const { k: kNew, v: vNew } = fresh;
  const [, Hkv, GT, hd] = q.shape;
  const T = kNew.shape[2];
  const G = GT / T;
  const ctx = cache.k.shape[2];
  if (form === "sdpa") {
    const keys = b.concat({ values: [cache.k, kNew], axis: 2, name: "keys" }); // [1, Hkv, ctx+T, hd]
    const values = b.concat({ values: [cache.v, vNew], axis: 2, name: "values" });
    const rows =
      G === 1 ? mask : b.concat({ values: new Array<MilVar>(G).fill(mask), axis: 2, name: "mask_rows" });
    return b.scaledDotProductAttention({ query: q, key: keys, value: values, attnMask: rows, name: "sdpa" });
  }
  const qs = b.mul({ x: q, y: scalar(1 / Math.sqrt(hd), q), name: "q_scaled" });
  const sCache = b.matmul({ x: qs, y: cache.k, transposeY: true, name: "scores_cache" }); // [1, Hkv, G·T, ctx]
  const sNew = b.matmul({ x: qs, y: kNew, transposeY: true, name: "scores_new" }); // [1, Hkv, G·T, T]
  const joined = b.concat({ values: [sCache, sNew], axis: 3, name: "scores_cat" });
  // per query head [1, H, T, ctx+T], so the [T, ctx+T] mask applies to every head alike
  const perHead = b.reshape({ x: joined, shape: [1, Hkv * G, T, ctx + T], name: "scores_heads" });
  const p = b.softmax({ x: b.add({ x: perHead, y: mask, name: "scores" }), axis: 3, name: "probs_heads" });
  const probs = b.reshape({ x: p, shape: [1, Hkv, GT, ctx + T], name: "probs" });
  const pCache = b.sliceByIndex({
    x: probs,
    begin: [0, 0, 0, 0],
    end: [1, Hkv, GT, ctx],
    name: "probs_cache",
  });
  const pNew = b.sliceByIndex({
    x: probs,
    begin: [0, 0, 0, ctx],
    end: [1, Hkv, GT, ctx + T],
    name: "probs_new",
  });
  const oCache = b.matmul({ x: pCache, y: cache.v, name: "o_cache" }); // [1, Hkv, G·T, hd]
  const oNew = b.matmul({ x: pNew, y: vNew, name: "o_new" });
  return b.add({ x: oCache, y: oNew, name: "attn" });
}

/**
 * x [1, D, 1, T] (already input-normed), mask [1, 1, T, ctx + T] → the mixer output [1, D, 1, T]
 * and the chunk's k/v rows [1, Hkv, T, hd].
 */
export async function attentionChunkLayer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  at: AttentionInputs,
): Promise<AttentionStep> {
  const T = x.shape[3];
  const b = w.b;
  const a = attentionSetup(w, layer, x);
  const { H, Hkv, hd, G } = a;

  // q_proj: per head [q_h | gate_h] along the channels
  const qgHeads = b.reshape({
    x: await a.project("q_proj", "qg"),
    shape: [1, H, 2 * hd, T],
    name: "qg_heads",
  });
  const qCols = b.sliceByIndex({ x: qgHeads, begin: [0, 0, 0, 0], end: [1, H, hd, T], name: "q_cols" });
  const gate = b.sliceByIndex({ x: qgHeads, begin: [0, 0, hd, 0], end: [1, H, 2 * hd, T], name: "gate" }); // [1, H, hd, T]
  const qRaw = b.transpose({ x: qCols, perm: [0, 1, 3, 2], name: "q_raw" }); // [1, H, T, hd]
  /** [1, Hkv·hd, 1, T] → [1, Hkv, T, hd] */
  const rows = async (name: "k_proj" | "v_proj", as: string) =>
    b.transpose({
      x: b.reshape({ x: await a.project(name, name), shape: [1, Hkv, hd, T], name: `${as}_hd` }),
      perm: [0, 1, 3, 2],
      name: as,
    });
  const kRaw = await rows("k_proj", "k_raw");
  const vNew = await rows("v_proj", "v_new");

  const { q, kNew } = await normAndRope(w, layer, qRaw, kRaw, at.rope);

  const qGroups = b.reshape({ x: q, shape: [1, Hkv, G * T, hd], name: "q_groups" });
  const o = attendChunk(b, qGroups, { k: kNew, v: vNew }, at); // [1, Hkv, G·T, hd]
  const oHeads = b.reshape({ x: o, shape: [1, H, T, hd], name: "o_heads" });
  const oFlat = b.reshape({
    x: b.transpose({ x: oHeads, perm: [0, 1, 3, 2], name: "o_hd" }),
    shape: [1, H * hd, 1, T],
    name: "o",
  });
  const gateFlat = b.reshape({ x: gate, shape: [1, H * hd, 1, T], name: "gate_flat" });
  const out = await gatedOutput(w, layer, oFlat, gateFlat); // [1, D, 1, T]
  return { out, kNew, vNew };
}
