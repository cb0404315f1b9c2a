/**
 * The parameters a Qwen3.5 text model has, in mlx-lm's layout (names relative to `language_model.`),
 * with their logical shapes from the config. They drive the validation of MLX-format checkpoints,
 * quantization at load, model building and saving.
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";

/**
 * - linear / embedding / experts: a module `name` with `name.weight` (float), or quantized
 *   `name.weight` (uint32) + `name.scales` + `name.biases`;
 * - vector / norm / conv: one float tensor called `name`.
 */
export type ParamKind = "linear" | "embedding" | "experts" | "vector" | "conv";

export interface ParamSpec {
  readonly name: string;
  readonly kind: ParamKind;
  /** Logical shape: [out, in] (linear, embedding [V, D]), [E, out, in] (experts), [C, K, 1] (conv), [n]. */
  readonly shape: readonly number[];
  /** Bits when quantizing at load, overriding the requested width (mlx-lm's quant_predicate: 8 for MoE gates). */
  readonly bits?: number;
  /** Kept in float32 whatever the model dtype (A_log, as mlx-lm's cast_predicate). */
  readonly float32?: boolean;
  /** Layer index, or -1 for the embedding, final norm and head. */
  readonly layer: number;
}

/** Modules mlx-lm quantizes (nn.Linear, nn.Embedding, SwitchLinear). */
export const isQuantizable = (kind: ParamKind): boolean =>
  kind === "linear" || kind === "embedding" || kind === "experts";

/** Every parameter, in file order: embedding, layers, final norm, head (absent when tied). */
export function paramSpecs(cfg: Qwen35Config, tied: boolean): ParamSpec[] {
  const D = cfg.hiddenSize;
  const out: ParamSpec[] = [
    { name: "model.embed_tokens", kind: "embedding", shape: [cfg.vocabSize, D], layer: -1 },
  ];
  for (let i = 0; i < cfg.numHiddenLayers; i++) {
    const p = `model.layers.${i}.`;
    const add = (name: string, kind: ParamKind, shape: number[], extra: Partial<ParamSpec> = {}) =>
      out.push({ name: p + name, kind, shape, layer: i, ...extra });
    add("input_layernorm.weight", "vector", [D]);
    add("post_attention_layernorm.weight", "vector", [D]);
    if (cfg.layerTypes[i] === "linear_attention") {
      const Hv = cfg.linearNumValueHeads;
      add("linear_attn.in_proj_qkv", "linear", [cfg.convDim, D]);
      add("linear_attn.in_proj_z", "linear", [cfg.valueDim, D]);
      add("linear_attn.in_proj_b", "linear", [Hv, D]);
      add("linear_attn.in_proj_a", "linear", [Hv, D]);
      add("linear_attn.conv1d.weight", "conv", [cfg.convDim, cfg.linearConvKernelDim, 1]);
      add("linear_attn.dt_bias", "vector", [Hv]);
      add("linear_attn.A_log", "vector", [Hv], { float32: true });
      add("linear_attn.norm.weight", "vector", [cfg.linearValueHeadDim]);
      add("linear_attn.out_proj", "linear", [D, cfg.valueDim]);
    } else {
      const { numAttentionHeads: H, numKeyValueHeads: Hkv, headDim: hd } = cfg;
      add("self_attn.q_proj", "linear", [2 * H * hd, D]);
      add("self_attn.k_proj", "linear", [Hkv * hd, D]);
      add("self_attn.v_proj", "linear", [Hkv * hd, D]);
      add("self_attn.o_proj", "linear", [D, H * hd]);
      add("self_attn.q_norm.weight", "vector", [hd]);
      add("self_attn.k_norm.weight", "vector", [hd]);
    }
    if (cfg.moe) {
      const { numExperts: E, moeIntermediateSize: F, sharedExpertIntermediateSize: Fs } = cfg.moe;
      add("mlp.gate", "linear", [E, D], { bits: 8 });
      add("mlp.switch_mlp.gate_proj", "experts", [E, F, D]);
      add("mlp.switch_mlp.up_proj", "experts", [E, F, D]);
      add("mlp.switch_mlp.down_proj", "experts", [E, D, F]);
      add("mlp.shared_expert.gate_proj", "linear", [Fs, D]);
      add("mlp.shared_expert.up_proj", "linear", [Fs, D]);
      add("mlp.shared_expert.down_proj", "linear", [D, Fs]);
      add("mlp.shared_expert_gate", "linear", [1, D], { bits: 8 });
    } else {
      const F = cfg.intermediateSize!;
      add("mlp.gate_proj", "linear", [F, D]);
      add("mlp.up_proj", "linear", [F, D]);
      add("mlp.down_proj", "linear", [D, F]);
    }
  }
  out.push({ name: "model.norm.weight", kind: "vector", shape: [D], layer: -1 });
  if (!tied) out.push({ name: "lm_head", kind: "linear", shape: [cfg.vocabSize, D], layer: -1 });
  return out;
}
