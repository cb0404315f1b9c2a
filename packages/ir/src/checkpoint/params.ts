/**
 * The Qwen3.5 parameter table: every tensor of the text model with its Hugging Face shape and the
 * facts each reader of a checkpoint needs about it. One table, read by the checkpoint checker,
 * runtime-mlx's loader (mlx-lm's layout is derived from it), the converter's weights and the
 * synthetic-checkpoint writer; the parameter counts are summed from it.
 *
 * Names are canonical (see weights.ts): `embed`, `norm`, `lm_head`, `layers.{i}.{HF rest}`.
 * Shapes and flags follow HF modeling_qwen3_5.py / modeling_qwen3_5_moe.py. The vision tower is
 * not listed; the multi-token-prediction head (`mtp.*`, not part of the text model either) has its
 * own table, qwen35MtpParameters, which no reader of the text model asks for.
 */
import { type DType, numel } from "@anemll-qwen35/core";
import { ConfigError, type Qwen35Config } from "./config.js";

/**
 * - projection: a matrix [out, in] applied to activations (nn.Linear);
 * - embedding:  the token table [V, D];
 * - experts:    a bank of MoE expert matrices [E, out, in];
 * - norm:       an RMSNorm gain [n];
 * - vector:     any other per-channel vector (A_log, dt_bias);
 * - conv:       the GDN depthwise causal conv, HF layout [C, 1, K] (MLX stores [C, K, 1]).
 */
export type ParamKind = "projection" | "embedding" | "experts" | "norm" | "vector" | "conv";

export interface Qwen35Parameter {
  readonly canonical: string;
  /** As Hugging Face stores it. */
  readonly shape: readonly number[];
  /**
   * Decoder layer, or -1 for the embedding, the final norm and the head (and the MTP head's fc and
   * norms); MTP layer k is numHiddenLayers + k, as vLLM numbers it.
   */
  readonly layer: number;
  readonly kind: ParamKind;
  /**
   * Where the tensor sits in its block, for quantization policies and reports: `gdn.in_proj_qkv`,
   * `attn.q_proj`, `mlp.down_proj`, `moe.experts.gate_up_proj`, `norm.input`, `embed`, `lm_head`, …
   */
  readonly role: string;
  /** An RMSNorm that stores w while the model multiplies by 1 + w (every norm but GDN's gated norm). */
  readonly zeroCentred: boolean;
  /** What official checkpoints store it as: F32 for A_log and the GDN gated norm, BF16 otherwise. */
  readonly storedDtype: DType;
  /** Kept in float32 at run time whatever the model's dtype (A_log; mlx-lm's cast predicate). */
  readonly float32: boolean;
  /** A matrix that weight quantization applies to (projections, the embedding, experts). */
  readonly quantizable: boolean;
  /** Bits forced when MLX quantizes at load (mlx-lm's quant predicate: 8 for the MoE router and shared-expert gate). */
  readonly mlxBits?: 8;
}

export type ExpertLayout = "fused" | "per-expert";

/** Float dtypes a weight may be stored in (official checkpoints: bf16, with f32 A_log and GDN norm). */
export const WEIGHT_DTYPES: readonly DType[] = ["bf16", "f16", "f32"];

export interface Qwen35ParametersOptions {
  /** Leave out lm_head (it is the embedding). */
  readonly tied: boolean;
  /**
   * MoE experts as fused 3-D tensors (`experts.gate_up_proj` [E, 2F, D], `experts.down_proj`
   * [E, D, F], the official layout) or per-expert 2-D ones; per layer when a function. Default fused.
   */
  readonly expertLayout?: ExpertLayout | ((layer: number) => ExpertLayout);
}

/** Every tensor of the text model, in checkpoint order: embedding, layers, final norm, head. */
export function qwen35Parameters(config: Qwen35Config, options: Qwen35ParametersOptions): Qwen35Parameter[] {
  const D = config.hiddenSize;
  const V = config.vocabSize;
  const out: Qwen35Parameter[] = [];
  const push = (...args: Parameters<typeof parameter>) => out.push(parameter(...args));
  const layoutOf =
    typeof options.expertLayout === "function"
      ? options.expertLayout
      : () => (options.expertLayout as ExpertLayout | undefined) ?? "fused";

  push("embed", -1, "embedding", "embed", [V, D]);
  for (let i = 0; i < config.numHiddenLayers; i++) {
    layerParameters(config, config.layerTypes[i], layoutOf(i), (rest, kind, role, shape, extra) =>
      push(`layers.${i}.${rest}`, i, kind, role, shape, extra),
    );
  }
  push("norm", -1, "norm", "norm.final", [D]);
  if (!options.tied) push("lm_head", -1, "projection", "lm_head", [V, D]);
  return out;
}

/** Appends one table row; `extra` overrides the defaults that follow from the kind. */
type AddParameter = (
  rest: string,
  kind: ParamKind,
  role: string,
  shape: number[],
  extra?: Partial<Qwen35Parameter>,
) => void;

/** One table row with the defaults that follow from its kind. */
function parameter(
  canonical: string,
  layer: number,
  kind: ParamKind,
  role: string,
  shape: readonly number[],
  extra: Partial<Qwen35Parameter> = {},
): Qwen35Parameter {
  return {
    canonical,
    shape,
    layer,
    kind,
    role,
    zeroCentred: kind === "norm",
    storedDtype: "bf16",
    float32: false,
    quantizable: kind === "projection" || kind === "embedding" || kind === "experts",
    ...extra,
  };
}

/** The tensors of one decoder layer (names relative to the layer), in checkpoint order. */
function layerParameters(config: Qwen35Config, type: string, experts: ExpertLayout, add: AddParameter): void {
  const D = config.hiddenSize;
  add("input_layernorm.weight", "norm", "norm.input", [D]);
  add("post_attention_layernorm.weight", "norm", "norm.post_attention", [D]);
  if (type === "linear_attention") {
    const Hv = config.linearNumValueHeads;
    add("linear_attn.in_proj_qkv.weight", "projection", "gdn.in_proj_qkv", [config.convDim, D]);
    add("linear_attn.in_proj_z.weight", "projection", "gdn.in_proj_z", [config.valueDim, D]);
    add("linear_attn.in_proj_b.weight", "projection", "gdn.in_proj_b", [Hv, D]);
    add("linear_attn.in_proj_a.weight", "projection", "gdn.in_proj_a", [Hv, D]);
    add("linear_attn.conv1d.weight", "conv", "gdn.conv1d", [config.convDim, 1, config.linearConvKernelDim]);
    add("linear_attn.dt_bias", "vector", "gdn.dt_bias", [Hv]);
    add("linear_attn.A_log", "vector", "gdn.A_log", [Hv], { storedDtype: "f32", float32: true });
    // the gated norm multiplies by w itself (Qwen3_5RMSNormGated), not by 1 + w
    add("linear_attn.norm.weight", "norm", "gdn.norm", [config.linearValueHeadDim], {
      zeroCentred: false,
      storedDtype: "f32",
    });
    add("linear_attn.out_proj.weight", "projection", "gdn.out_proj", [D, config.valueDim]);
  } else {
    const { headDim: hd, numAttentionHeads: H, numKeyValueHeads: Hkv } = config;
    add("self_attn.q_proj.weight", "projection", "attn.q_proj", [2 * H * hd, D]); // per head: [query | gate]
    add("self_attn.k_proj.weight", "projection", "attn.k_proj", [Hkv * hd, D]);
    add("self_attn.v_proj.weight", "projection", "attn.v_proj", [Hkv * hd, D]);
    add("self_attn.o_proj.weight", "projection", "attn.o_proj", [D, H * hd]);
    add("self_attn.q_norm.weight", "norm", "attn.q_norm", [hd]);
    add("self_attn.k_norm.weight", "norm", "attn.k_norm", [hd]);
  }
  if (config.moe) {
    const { numExperts: E, moeIntermediateSize: F, sharedExpertIntermediateSize: Fs } = config.moe;
    add("mlp.gate.weight", "projection", "moe.router", [E, D], { mlxBits: 8 });
    if (experts === "fused") {
      add("mlp.experts.gate_up_proj", "experts", "moe.experts.gate_up_proj", [E, 2 * F, D]); // gate rows first
      add("mlp.experts.down_proj", "experts", "moe.experts.down_proj", [E, D, F]);
    } else {
      for (let e = 0; e < E; e++) {
        add(`mlp.experts.${e}.gate_proj.weight`, "projection", "moe.expert.gate_proj", [F, D]);
        add(`mlp.experts.${e}.up_proj.weight`, "projection", "moe.expert.up_proj", [F, D]);
        add(`mlp.experts.${e}.down_proj.weight`, "projection", "moe.expert.down_proj", [D, F]);
      }
    }
    add("mlp.shared_expert.gate_proj.weight", "projection", "moe.shared.gate_proj", [Fs, D]);
    add("mlp.shared_expert.up_proj.weight", "projection", "moe.shared.up_proj", [Fs, D]);
    add("mlp.shared_expert.down_proj.weight", "projection", "moe.shared.down_proj", [D, Fs]);
    add("mlp.shared_expert_gate.weight", "projection", "moe.shared_gate", [1, D], { mlxBits: 8 });
  } else {
    const F = config.intermediateSize!;
    add("mlp.gate_proj.weight", "projection", "mlp.gate_proj", [F, D]);
    add("mlp.up_proj.weight", "projection", "mlp.up_proj", [F, D]);
    add("mlp.down_proj.weight", "projection", "mlp.down_proj", [D, F]);
  }
}

export interface Qwen35MtpParametersOptions {
  /** Decoder layers of the head: config.json's mtp_num_hidden_layers (see mtpLayerCount). */
  readonly layers: number;
  /** The MoE experts of each MTP layer (official 3.5-35B-A3B: per-expert; Qwen3.6: fused). Default fused. */
  readonly expertLayout?: ExpertLayout | ((mtpLayer: number) => ExpertLayout);
}

/**
 * Every tensor of the multi-token-prediction head, in checkpoint order (reference §2.8; the names,
 * shapes and zero-centred norms of vLLM's qwen3_5_mtp.py). Canonical names are the checkpoint's own
 * (`mtp.fc.weight`, `mtp.layers.0.self_attn.q_proj.weight`); roles are the text model's prefixed
 * with `mtp.` (`mtp.attn.q_proj`), plus `mtp.fc` and `mtp.norm.{pre_fc_embedding,pre_fc_hidden,final}`.
 *
 *   mtp.fc.weight                     [D, 2D]  over concat(embedding, hidden)
 *   mtp.pre_fc_norm_embedding.weight  [D]      zero-centred
 *   mtp.pre_fc_norm_hidden.weight     [D]      zero-centred
 *   mtp.layers.{k}.*                           a full-attention decoder layer (MoE MLP in MoE models)
 *   mtp.norm.weight                   [D]      zero-centred
 *
 * The head shares the text model's embedding and lm_head, so neither is listed here.
 */
export function qwen35MtpParameters(
  config: Qwen35Config,
  options: Qwen35MtpParametersOptions,
): Qwen35Parameter[] {
  const D = config.hiddenSize;
  const layoutOf =
    typeof options.expertLayout === "function"
      ? options.expertLayout
      : () => (options.expertLayout as ExpertLayout | undefined) ?? "fused";
  const out: Qwen35Parameter[] = [
    parameter("mtp.fc.weight", -1, "projection", "mtp.fc", [D, 2 * D]),
    parameter("mtp.pre_fc_norm_embedding.weight", -1, "norm", "mtp.norm.pre_fc_embedding", [D]),
    parameter("mtp.pre_fc_norm_hidden.weight", -1, "norm", "mtp.norm.pre_fc_hidden", [D]),
  ];
  for (let k = 0; k < options.layers; k++) {
    layerParameters(config, "full_attention", layoutOf(k), (rest, kind, role, shape, extra) =>
      out.push(
        parameter(`mtp.layers.${k}.${rest}`, config.numHiddenLayers + k, kind, `mtp.${role}`, shape, extra),
      ),
    );
  }
  out.push(parameter("mtp.norm.weight", -1, "norm", "mtp.norm.final", [D]));
  return out;
}

/**
 * The head's decoder layers: text_config's `mtp_num_hidden_layers` (1 in every Qwen3.5 release), 0
 * when the config has none. ConfigError when it is not a non-negative integer.
 */
export function mtpLayerCount(config: Qwen35Config): number {
  const n = config.textConfig.mtp_num_hidden_layers;
  if (n === undefined || n === null) return 0;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0 || n > 64) {
    const field =
      config.source.layout === "vl" ? "text_config.mtp_num_hidden_layers" : "mtp_num_hidden_layers";
    throw new ConfigError(config.source.file, [
      { field, message: `expected an integer from 0 to 64, got ${JSON.stringify(n)}` },
    ]);
  }
  return n;
}

/** The table by canonical name. */
export function qwen35ParameterMap(
  config: Qwen35Config,
  options: Qwen35ParametersOptions,
): ReadonlyMap<string, Qwen35Parameter> {
  return new Map(qwen35Parameters(config, options).map((p) => [p.canonical, p]));
}

export interface ParameterCounts {
  /** Embedding table V x D. */
  readonly embedding: number;
  /** Separate LM head (0 when tied to the embedding). */
  readonly lmHead: number;
  /** Final norm. */
  readonly finalNorm: number;
  /** Per decoder layer, in layer order. */
  readonly perLayer: readonly number[];
  /** All decoder layers. */
  readonly layers: number;
  /** Whole text model: embedding + layers + final norm + LM head (the embedding counted once when tied). */
  readonly total: number;
  /** total minus embedding and LM head. */
  readonly nonEmbedding: number;
  /** MoE only: parameters used per token (top-k routed experts + shared expert + the rest). */
  readonly activePerToken: number;
}

/** Counts for `config`; `tied` defaults to the config's flag. */
export function parameterCounts(config: Qwen35Config, options: { tied?: boolean } = {}): ParameterCounts {
  const tied = options.tied ?? config.tieWordEmbeddings;
  const perLayer = new Array<number>(config.numHiddenLayers).fill(0);
  let embedding = 0;
  let lmHead = 0;
  let finalNorm = 0;
  let inactiveExperts = 0;
  for (const { canonical, shape, layer, kind } of qwen35Parameters(config, { tied })) {
    const n = numel(shape);
    if (canonical === "embed") embedding = n;
    else if (canonical === "lm_head") lmHead = n;
    else if (canonical === "norm") finalNorm = n;
    else {
      perLayer[layer] += n;
      if (config.moe && kind === "experts") {
        const { numExperts: E, numExpertsPerTok: k } = config.moe;
        inactiveExperts += (n * (E - k)) / E;
      }
    }
  }
  const layers = perLayer.reduce((a, b) => a + b, 0);
  const total = embedding + layers + finalNorm + lmHead;
  return {
    embedding,
    lmHead,
    finalNorm,
    perLayer,
    layers,
    total,
    nonEmbedding: total - embedding - lmHead,
    activePerToken: total - inactiveExperts,
  };
}
