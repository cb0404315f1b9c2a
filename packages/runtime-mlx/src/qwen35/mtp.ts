/**
 * Qwen3.5's multi-token-prediction head (tools/oracle/README.md "The MTP head"; vLLM
 * qwen3_5_mtp.py). For position t, with the main model's hidden state h_t AFTER its final norm
 * and the token x_{t+1}:
 *   x      = fc(concat(pre_fc_norm_embedding(embed[x_{t+1}]), pre_fc_norm_hidden(h_t)))  (embedding first)
 *   x      = mtp.layers.0(x)  (a full-attention decoder layer at RoPE position t, cache slot t)
 *   out    = mtp.norm(x);  logits = lm_head(out)  predicts x_{t+2}
 * A recursive draft feeds `out` back as the next hidden state with its own token at t+1, t+2, …
 * Every norm is zero-centred (the 1 + w is baked in at load, as for the text model).
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import type { KvCache } from "./cache.js";
import { embed, linear } from "./linear.js";
import { type Qwen35Weights, runLayers } from "./model.js";

/**
 * The head over T pairs (hidden [1, T, D] after the main model's final norm, next [1, T] int) at
 * cache slots cache.offset …: writes their K/V into `cache`. With `logits`, also returns the
 * head's output [1, T, D] and logits [1, T, V]; without, nothing past the layer's K/V is built
 * (a prefill only fills the cache).
 */
export function mtpForward(
  cfg: Qwen35Config,
  w: Qwen35Weights,
  hidden: MxArray,
  next: MxArray,
  cache: KvCache,
  logits: boolean,
): { out: MxArray; logits: MxArray } | undefined {
  const head = w.mtp!;
  const eps = cfg.rmsNormEps;
  const e = mx.rmsNorm(embed(w.embed, next), head.preFcEmbedding, eps);
  const h = mx.rmsNorm(hidden, head.preFcHidden, eps);
  const x = linear(head.fc, mx.concatenate([e, h], -1));
  // Lazy graph: when only the cache is evaluated, the attention output and the MLP are never computed.
  const r = runLayers(cfg, [head.layer], x, { kv: [cache], gdn: [undefined] });
  if (!logits) return undefined;
  const out = mx.rmsNorm(r.h, head.norm, eps);
  return { out, logits: linear(w.lmHead, out) };
}
