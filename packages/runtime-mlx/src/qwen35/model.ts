/**
 * The Qwen3.5 text model forward (qwen35-architecture.md §2.1):
 *   h = embed(ids)
 *   per layer: h += mixer(norm1(h)) (Gated DeltaNet, or gated attention every 4th layer)
 *              h += ffn(norm2(h))  (SwiGLU, or sparse MoE)
 *   logits = lm_head(norm(h))      (lm_head = the embedding when tied)
 * Every RMSNorm weight here already holds 1 + w (baked in at load, as mlx-lm's sanitize does).
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import { type AttentionWeights, attention } from "./attention.js";
import type { GdnState, KvCache } from "./cache.js";
import { type GdnWeights, gatedDeltaNet } from "./gdn.js";
import { embed, linear, type Weight } from "./linear.js";
import { type MlpWeights, mlp } from "./mlp.js";
import { type MoeWeights, sparseMoe } from "./moe.js";

export type Mixer =
  | { readonly kind: "gdn"; readonly w: GdnWeights }
  | { readonly kind: "attention"; readonly w: AttentionWeights };
export type Ffn =
  | { readonly kind: "mlp"; readonly w: MlpWeights }
  | { readonly kind: "moe"; readonly w: MoeWeights };

export interface LayerWeights {
  /** [D], 1 + w */
  readonly inputNorm: MxArray;
  /** [D], 1 + w */
  readonly postNorm: MxArray;
  readonly mixer: Mixer;
  readonly ffn: Ffn;
}

/** The multi-token-prediction head's weights (see mtp.ts). */
export interface MtpWeights {
  /** [D, 2D] over concat(embedding, hidden). */
  readonly fc: Weight;
  /** [D], 1 + w */
  readonly preFcEmbedding: MxArray;
  /** [D], 1 + w */
  readonly preFcHidden: MxArray;
  /** The head's full-attention decoder layer. */
  readonly layer: LayerWeights;
  /** [D], 1 + w */
  readonly norm: MxArray;
}

export interface Qwen35Weights {
  readonly embed: Weight;
  /** The multi-token-prediction head, when the checkpoint has one and it was loaded (see mtp.ts). */
  readonly mtp?: MtpWeights;
  readonly layers: readonly LayerWeights[];
  /** [D], 1 + w */
  readonly norm: MxArray;
  /** The embedding itself when tied. */
  readonly lmHead: Weight;
  readonly tied: boolean;
}

/** Per layer: a KV cache (attention layers) or the GDN state carried from the previous call. */
export interface ForwardState {
  readonly kv: readonly (KvCache | undefined)[];
  readonly gdn: readonly (GdnState | undefined)[];
}

export interface ForwardOptions {
  /** Which logits to compute: none (a prefill chunk), the last position only, or every position. */
  readonly logits: "none" | "last" | "all";
  /** Receives the hidden states like HF's output_hidden_states: embedding output, after each layer but the last, after the final norm. */
  readonly hidden?: MxArray[];
  /** Also return every row's hidden state after the final norm (what the MTP head reads). */
  readonly normed?: boolean;
  /** Return each GDN layer's state after every row too (a speculative verify). */
  readonly perRow?: boolean;
}

export interface ForwardResult {
  /** [1, 1, V] (last), [1, T, V] (all) or undefined (none); in the activation dtype. */
  readonly logits: MxArray | undefined;
  /** The GDN layers' new state (undefined for attention layers). The KV caches are updated in place. */
  readonly gdn: (GdnState | undefined)[];
  /** With `normed`: [1, T, D], every row after the final norm. */
  readonly normed?: MxArray;
  /** With `perRow`: per layer, the GDN state after each row (undefined for attention layers). */
  readonly gdnRows?: (GdnState[] | undefined)[];
}

/** Runs ids [1, T] through the model (lazily: nothing is computed until evaluated). */
export function forward(
  cfg: Qwen35Config,
  w: Qwen35Weights,
  ids: MxArray,
  state: ForwardState,
  options: ForwardOptions,
): ForwardResult {
  const h0 = embed(w.embed, ids); // [1, T, D]
  options.hidden?.push(h0);
  const { h, gdn, gdnRows } = runLayers(cfg, w.layers, h0, state, options.hidden, options.perRow);
  // the norm is per row: norming every row, then taking the last, is the same as the other order
  const all = options.normed ? mx.rmsNorm(h, w.norm, cfg.rmsNormEps) : undefined;
  if (options.logits === "none") return { logits: undefined, gdn, normed: all, gdnRows };
  const T = h.shape[1];
  const normed = all
    ? options.logits === "last" && T > 1
      ? mx.slice(all, [0, T - 1], [1, T])
      : all
    : finalNorm(cfg, w, h, options.logits);
  options.hidden?.push(normed);
  return { logits: linear(w.lmHead, normed), gdn, normed: all, gdnRows };
}

/**
 * Runs h [1, T, D] through `layers` (all of the model's, or one pipeline stage's: `state` is indexed
 * like `layers`). `hidden` receives the output of every layer but the last.
 */
export function runLayers(
  cfg: Qwen35Config,
  layers: readonly LayerWeights[],
  h: MxArray,
  state: ForwardState,
  hidden?: MxArray[],
  perRow = false,
): { h: MxArray; gdn: (GdnState | undefined)[]; gdnRows?: (GdnState[] | undefined)[] } {
  const gdn: (GdnState | undefined)[] = [];
  const gdnRows: (GdnState[] | undefined)[] = [];
  layers.forEach((layer, i) => {
    const x = mx.rmsNorm(h, layer.inputNorm, cfg.rmsNormEps);
    let mixed: MxArray;
    if (layer.mixer.kind === "gdn") {
      const r = gatedDeltaNet(cfg, layer.mixer.w, x, state.gdn[i], perRow);
      mixed = r.out;
      gdn.push(r.state);
      gdnRows.push(r.rows);
    } else {
      mixed = attention(cfg, layer.mixer.w, x, state.kv[i]!);
      gdn.push(undefined);
      gdnRows.push(undefined);
    }
    h = mx.add(h, mixed);
    const y = mx.rmsNorm(h, layer.postNorm, cfg.rmsNormEps);
    h = mx.add(h, layer.ffn.kind === "mlp" ? mlp(layer.ffn.w, y) : sparseMoe(cfg, layer.ffn.w, y));
    if (i < layers.length - 1) hidden?.push(h);
  });
  return { h, gdn, gdnRows: perRow ? gdnRows : undefined };
}

/** The final norm over the last position (logits "last") or every one; the head then gives logits. */
export function finalNorm(
  cfg: Qwen35Config,
  w: Pick<Qwen35Weights, "norm">,
  h: MxArray,
  logits: "last" | "all",
): MxArray {
  if (logits === "last" && h.shape[1] > 1) {
    const T = h.shape[1];
    h = mx.slice(h, [0, T - 1], [1, T]);
  }
  return mx.rmsNorm(h, w.norm, cfg.rmsNormEps);
}
