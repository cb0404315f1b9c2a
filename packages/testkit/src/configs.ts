/** Tiny Qwen3.5-shaped configs and fake side files for checkpoint tests. */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

/**
 * A tiny VL-layout config with Qwen3.5's structure: D=16, 4 layers (one DDDA super-block),
 * H=2 / Hkv=1 / hd=8, GDN Hk=2 / Hv=4 / dk=dv=4, vocab 32.
 */
export function tinyConfigJson(
  opts: { moe?: boolean; tied?: boolean; layers?: number; layout?: "vl" | "text" } = {},
) {
  const layers = opts.layers ?? 4;
  const moe = opts.moe ?? false;
  const text: Record<string, unknown> = {
    model_type: moe ? "qwen3_5_moe_text" : "qwen3_5_text",
    vocab_size: 32,
    hidden_size: 16,
    num_hidden_layers: layers,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    head_dim: 8,
    linear_num_key_heads: 2,
    linear_num_value_heads: 4,
    linear_key_head_dim: 4,
    linear_value_head_dim: 4,
    linear_conv_kernel_dim: 4,
    rms_norm_eps: 1e-6,
    layer_types: Array.from({ length: layers }, (_, i) =>
      (i + 1) % 4 === 0 ? "full_attention" : "linear_attention",
    ),
    rope_parameters: { rope_type: "default", rope_theta: 10000000, partial_rotary_factor: 0.25 },
    tie_word_embeddings: opts.tied ?? true,
    eos_token_id: 30,
    ...(moe
      ? {
          num_experts: 4,
          num_experts_per_tok: 2,
          moe_intermediate_size: 8,
          shared_expert_intermediate_size: 8,
        }
      : { intermediate_size: 24 }),
  };
  if (opts.layout === "text") return text;
  return {
    model_type: moe ? "qwen3_5_moe" : "qwen3_5",
    architectures: [moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"],
    tie_word_embeddings: opts.tied ?? true,
    text_config: text,
    vision_config: {
      depth: 1,
      hidden_size: 8,
      num_heads: 2,
      intermediate_size: 16,
      in_channels: 3,
      patch_size: 2,
      temporal_patch_size: 2,
      spatial_merge_size: 2,
      num_position_embeddings: 4,
      out_hidden_size: 16,
    },
  };
}

/** Writes fake tokenizer side files into `dir`. */
export async function writeTokenizerFiles(dir: string): Promise<void> {
  await writeFile(join(dir, "tokenizer.json"), JSON.stringify({ model: { type: "BPE" }, added_tokens: [] }));
  await writeFile(join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>" }));
  await writeFile(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [248046, 248044] }));
  await writeFile(join(dir, "preprocessor_config.json"), JSON.stringify({ vision: true }));
}
