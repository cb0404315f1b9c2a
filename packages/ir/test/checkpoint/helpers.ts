/** Helpers for the checkpoint tests (the shared ones come from the private testkit). */
export { listDir, tempDir, tinyConfigJson, writeTokenizerFiles } from "../testkit.js";

/** A tensor's values as a plain array (numbers; bigints for i64). */
export const vals = (t: { data: ArrayLike<number> | ArrayLike<bigint> }): (number | bigint)[] =>
  Array.from(t.data as ArrayLike<number | bigint>);

/** The text_config of Qwen3.5-0.8B (reference §1.1) with `layers` layers (its real count is 24). */
export const qwen08bTextConfig = (layers: number, extra: Record<string, unknown> = {}) => ({
  model_type: "qwen3_5_text",
  vocab_size: 248320,
  hidden_size: 1024,
  num_hidden_layers: layers,
  num_attention_heads: 8,
  num_key_value_heads: 2,
  head_dim: 256,
  linear_num_key_heads: 16,
  linear_num_value_heads: 16,
  linear_key_head_dim: 128,
  linear_value_head_dim: 128,
  linear_conv_kernel_dim: 4,
  intermediate_size: 3584,
  rms_norm_eps: 1e-6,
  rope_parameters: { rope_theta: 1e7, partial_rotary_factor: 0.25 },
  ...extra,
});
