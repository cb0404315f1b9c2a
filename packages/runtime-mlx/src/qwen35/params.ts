/**
 * The parameters a Qwen3.5 text model has, in mlx-lm's layout (names relative to `language_model.`),
 * with their logical shapes from the config. They drive the validation of MLX-format checkpoints,
 * quantization at load, model building and saving.
 */
import {
  mtpLayerCount,
  type Qwen35Config,
  type Qwen35Parameter,
  qwen35MtpParameters,
  qwen35Parameters,
} from "@anemll-qwen35/ir/checkpoint";

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

/** mlx-lm's name for a canonical (ir) tensor name: `model.` + the HF rest; modules without `.weight`. */
function mlxName(p: Qwen35Parameter): string {
  if (p.canonical === "embed") return "model.embed_tokens";
  if (p.canonical === "lm_head") return "lm_head";
  const name = p.canonical === "norm" ? "model.norm.weight" : `model.${p.canonical}`;
  return p.quantizable ? name.replace(/\.weight$/, "") : name;
}

const MLX_KIND: Readonly<Record<Qwen35Parameter["kind"], ParamKind>> = {
  projection: "linear",
  embedding: "embedding",
  experts: "experts",
  norm: "vector",
  vector: "vector",
  conv: "conv",
};

/**
 * Every parameter in mlx-lm's layout and file order (embedding, layers, final norm, head — absent
 * when tied), derived from ir's parameter table: conv [C, 1, K] → [C, K, 1], fused experts
 * `experts.gate_up_proj` [E, 2F, D] → `switch_mlp.gate_proj` + `switch_mlp.up_proj` [E, F, D].
 */
export function paramSpecs(cfg: Qwen35Config, tied: boolean): ParamSpec[] {
  const out: ParamSpec[] = [];
  for (const p of qwen35Parameters(cfg, { tied, expertLayout: "fused" })) {
    const common = {
      kind: MLX_KIND[p.kind],
      layer: p.layer,
      bits: p.mlxBits,
      float32: p.float32 || undefined,
    };
    if (p.kind === "experts") {
      const bank = `model.layers.${p.layer}.mlp.switch_mlp`;
      const [E, rows, cols] = p.shape;
      if (p.role === "moe.experts.gate_up_proj") {
        out.push({ ...common, name: `${bank}.gate_proj`, shape: [E, rows / 2, cols] });
        out.push({ ...common, name: `${bank}.up_proj`, shape: [E, rows / 2, cols] });
      } else {
        out.push({ ...common, name: `${bank}.down_proj`, shape: p.shape });
      }
      continue;
    }
    const shape = p.kind === "conv" ? [p.shape[0], p.shape[2], p.shape[1]] : p.shape;
    out.push({ ...common, name: mlxName(p), shape });
  }
  return out;
}

/**
 * The multi-token-prediction head's parameters of a dense model (names as the checkpoint stores
 * them, modules without `.weight`: `mtp.fc`, `mtp.layers.0.self_attn.q_proj`, `mtp.norm.weight`).
 * Its layer k is numbered numHiddenLayers + k.
 */
export function mtpParamSpecs(cfg: Qwen35Config): ParamSpec[] {
  return qwen35MtpParameters(cfg, { layers: mtpLayerCount(cfg) }).map((p) => ({
    name: p.quantizable ? p.canonical.replace(/\.weight$/, "") : p.canonical,
    kind: MLX_KIND[p.kind],
    shape: p.shape,
    layer: p.layer,
    bits: p.mlxBits,
    float32: p.float32 || undefined,
  }));
}
