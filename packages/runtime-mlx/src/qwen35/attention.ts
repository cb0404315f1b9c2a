/**
 * Gated full attention (qwen35-architecture.md §2.3; HF Qwen3_5Attention, mlx-lm Qwen3NextAttention).
 * q_proj emits [query | gate] per head; per-head zero-centred RMSNorm on q and k (the 1 + w is baked
 * into the weights at load); partial neox RoPE on the first rotaryDim dims; GQA SDPA; the output is
 * multiplied by sigmoid(gate) before o_proj.
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import type { KvCache } from "./cache.js";
import { type FusedLinear, fusedLinear, linear, type Weight } from "./linear.js";

export interface AttentionWeights {
  /** q_proj | k_proj | v_proj. */
  readonly qkv: FusedLinear;
  readonly o: Weight;
  /** [hd], 1 + w. */
  readonly qNorm: MxArray;
  readonly kNorm: MxArray;
}

/** x [1, T, D] at positions cache.offset … → [1, T, D]; writes k, v into the cache. */
export function attention(cfg: Qwen35Config, w: AttentionWeights, x: MxArray, cache: KvCache): MxArray {
  const [B, T] = x.shape;
  const { numAttentionHeads: H, numKeyValueHeads: Hkv, headDim: hd } = cfg;
  const [qg, k, v] = fusedLinear(w.qkv, x);
  // per head: [query (hd) | gate (hd)]
  const [q, gate] = mx.split(mx.reshape(qg, [B, T, H, 2 * hd]), 2, -1);
  const queries = mx.transpose(mx.rmsNorm(q, w.qNorm, cfg.rmsNormEps), [0, 2, 1, 3]); // [B, H, T, hd]
  const keys = mx.transpose(
    mx.rmsNorm(mx.reshape(k, [B, T, Hkv, hd]), w.kNorm, cfg.rmsNormEps),
    [0, 2, 1, 3],
  );
  const values = mx.transpose(mx.reshape(v, [B, T, Hkv, hd]), [0, 2, 1, 3]);

  const rope = { dims: cfg.rotaryDim, traditional: false, base: cfg.ropeTheta, offset: cache.offset };
  const [allKeys, allValues] = cache.update(mx.rope(keys, rope), values);
  const out = mx.scaledDotProductAttention(mx.rope(queries, rope), allKeys, allValues, {
    scale: hd ** -0.5,
    mask: T > 1 ? "causal" : undefined,
  });
  const merged = mx.reshape(mx.transpose(out, [0, 2, 1, 3]), [B, T, H * hd]);
  return linear(w.o, mx.multiply(merged, mx.sigmoid(mx.reshape(gate, [B, T, H * hd]))));
}
