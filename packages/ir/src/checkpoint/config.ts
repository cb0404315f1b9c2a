/**
 * Qwen3.5 config.json → Qwen35Config: every field the text model needs, validated, plus the
 * dimensions derived from them. Two layouts are accepted:
 * - the official VL wrapper (`model_type` qwen3_5 / qwen3_5_moe) with the text model under
 *   `text_config`;
 * - a plain text config (`model_type` qwen3_5_text / qwen3_5_moe_text), as HF's
 *   Qwen3_5ForCausalLM saves it.
 * Field meanings follow HF transformers' Qwen3_5TextConfig / Qwen3_5MoeTextConfig.
 */
import { readFile } from "node:fs/promises";
import { AnemllError } from "@anemll-qwen35/core";
import { z } from "zod";

/** A config.json problem; names the file and the field (dotted path) and what was expected. */
export class ConfigError extends AnemllError {
  readonly file: string | undefined;
  readonly field: string | undefined;
  /** Every problem found (the message lists them all). */
  readonly issues: readonly { field: string; message: string }[];
  constructor(
    file: string | undefined,
    issues: { field: string; message: string }[],
    options?: { cause?: unknown },
  ) {
    const where = file ?? "config";
    const lines = issues.map((i) => (i.field ? `field "${i.field}": ${i.message}` : i.message));
    const message =
      lines.length === 1
        ? `${where}: ${lines[0]}`
        : `${where}: ${lines.length} problems:\n  - ${lines.join("\n  - ")}`;
    super("E_CONFIG", message, options);
    this.file = file;
    this.field = issues[0]?.field;
    this.issues = issues;
  }
}

export type LayerType = "linear_attention" | "full_attention";
export type Qwen35TextModelType = "qwen3_5_text" | "qwen3_5_moe_text";

/** Four consecutive layers: three Gated DeltaNet layers then one full-attention layer (DDDA). */
export interface SuperBlock {
  readonly index: number;
  /** Layer indices, e.g. [0, 1, 2, 3]. */
  readonly layers: readonly [number, number, number, number];
}

export interface Qwen35MoeConfig {
  readonly numExperts: number;
  readonly numExpertsPerTok: number;
  readonly moeIntermediateSize: number;
  readonly sharedExpertIntermediateSize: number;
}

export interface Qwen35Config {
  /** Where it came from: the file (if any) and which layout it used. */
  readonly source: { readonly file: string | undefined; readonly layout: "vl" | "text" };
  readonly modelType: Qwen35TextModelType;
  readonly vocabSize: number;
  /** D */
  readonly hiddenSize: number;
  /** L */
  readonly numHiddenLayers: number;
  readonly rmsNormEps: number;
  readonly maxPositionEmbeddings: number | undefined;

  // Full attention
  /** H */
  readonly numAttentionHeads: number;
  /** Hkv */
  readonly numKeyValueHeads: number;
  /** hd (256 in every published size) */
  readonly headDim: number;
  /** H / Hkv: query heads per KV head. */
  readonly gqaRatio: number;
  readonly ropeTheta: number;
  readonly partialRotaryFactor: number;
  /** headDim * partialRotaryFactor: the leading dims of each head that RoPE rotates. */
  readonly rotaryDim: number;

  // Gated DeltaNet (linear attention)
  /** Hk */
  readonly linearNumKeyHeads: number;
  /** Hv */
  readonly linearNumValueHeads: number;
  /** dk */
  readonly linearKeyHeadDim: number;
  /** dv */
  readonly linearValueHeadDim: number;
  /** K (conv kernel width) */
  readonly linearConvKernelDim: number;
  /** Hk * dk */
  readonly keyDim: number;
  /** Hv * dv */
  readonly valueDim: number;
  /** 2 * keyDim + valueDim: channels of in_proj_qkv and of the depthwise conv. */
  readonly convDim: number;
  /** r = Hv / Hk: value heads per q/k head (value head j uses q/k head floor(j / r)). */
  readonly gdnHeadRatio: number;

  // Feed-forward
  /** Dense SwiGLU width F; undefined for MoE models. */
  readonly intermediateSize: number | undefined;
  /** MoE sizes; undefined for dense models. */
  readonly moe: Qwen35MoeConfig | undefined;

  /** Per layer, from `layer_types` or the full_attention_interval rule. */
  readonly layerTypes: readonly LayerType[];
  readonly fullAttentionInterval: number;
  /** The layers grouped as DDDA super-blocks (the converter's unit). */
  readonly superBlocks: readonly SuperBlock[];

  /**
   * The config's tie_word_embeddings (the wrapper's flag in the VL layout, as HF's VL class
   * reads it). The final decision also looks at the tensors: see usesTiedEmbeddings().
   */
  readonly tieWordEmbeddings: boolean;
  /** EOS ids from the config (text_config and wrapper, deduplicated); may be empty. */
  readonly eosTokenIds: readonly number[];
  /** Stored dtype named by the config ("bfloat16"), if any. */
  readonly dtype: string | undefined;
  /** The text config object as read (text_config in the VL layout). */
  readonly textConfig: Readonly<Record<string, unknown>>;
  /** The whole config.json object. */
  readonly raw: Readonly<Record<string, unknown>>;
}

// --- schema -----------------------------------------------------------------------------------

const POS_INT = "a positive integer";
const posInt = () => z.int({ error: POS_INT }).positive({ error: POS_INT });
const nonNegInt = () =>
  z.int({ error: "a non-negative integer" }).nonnegative({ error: "a non-negative integer" });
const posNum = () => z.number({ error: "a positive number" }).positive({ error: "a positive number" });
/**
 * A size with an upper bound far above every Qwen3.5 release (the largest has 60 layers, 4096 wide,
 * 512 experts), so that a hostile config cannot make the readers allocate without end.
 */
const size = (max: number) =>
  posInt().max(max, { error: `a positive integer of at most ${max.toLocaleString("en-US")}` });
const LAYER_TYPES = ["linear_attention", "full_attention"] as const;

/** partial_rotary_factor, at the top level or in rope_parameters. */
const rotaryFactor = () =>
  z
    .number({ error: "a number in (0, 1]" })
    .gt(0, { error: "a number in (0, 1]" })
    .lte(1, { error: "a number in (0, 1]" })
    .optional();

const textSchema = z.looseObject({
  model_type: z
    .enum(["qwen3_5_text", "qwen3_5_moe_text"], { error: '"qwen3_5_text" or "qwen3_5_moe_text"' })
    .optional(),
  vocab_size: size(1 << 21),
  hidden_size: size(65_536),
  num_hidden_layers: size(1024),
  num_attention_heads: size(1024),
  num_key_value_heads: size(1024),
  head_dim: size(4096),
  linear_num_key_heads: size(1024),
  linear_num_value_heads: size(1024),
  linear_key_head_dim: size(4096),
  linear_value_head_dim: size(4096),
  linear_conv_kernel_dim: size(64),
  intermediate_size: size(1 << 20).optional(),
  rms_norm_eps: posNum(),
  max_position_embeddings: size(1 << 24).optional(),
  hidden_act: z.literal("silu", { error: '"silu" (the only activation Qwen3.5 uses)' }).optional(),
  attention_bias: z.literal(false, { error: "false (Qwen3.5 has no attention biases)" }).optional(),
  layer_types: z
    .array(z.enum(LAYER_TYPES, { error: '"linear_attention" or "full_attention"' }), {
      error: "an array of layer types",
    })
    .max(1024, { error: "at most 1,024 layer types" })
    .optional(),
  full_attention_interval: size(1024).optional(),
  rope_parameters: z
    .looseObject(
      {
        rope_type: z
          .literal("default", { error: '"default" (other RoPE scalings are not supported)' })
          .optional(),
        rope_theta: posNum().optional(),
        partial_rotary_factor: rotaryFactor(),
      },
      { error: "an object" },
    )
    .optional(),
  rope_theta: posNum().optional(),
  partial_rotary_factor: rotaryFactor(),
  tie_word_embeddings: z.boolean({ error: "true or false" }).optional(),
  eos_token_id: z
    .union([nonNegInt(), z.array(nonNegInt())], { error: "a token id or an array of ids" })
    .nullable()
    .optional(),
  mlp_only_layers: z
    .array(z.int())
    .max(0, { error: "[] (every Qwen3.5 layer has the same FFN kind)" })
    .optional(),
  num_experts: size(4096).optional(),
  num_experts_per_tok: size(4096).optional(),
  moe_intermediate_size: size(1 << 20).optional(),
  shared_expert_intermediate_size: size(1 << 20).optional(),
  dtype: z.string({ error: "a string" }).optional(),
  torch_dtype: z.string({ error: "a string" }).optional(),
});

const wrapperSchema = z.looseObject({
  model_type: z.enum(["qwen3_5", "qwen3_5_moe"], { error: '"qwen3_5" or "qwen3_5_moe"' }),
  text_config: z.looseObject({}, { error: "an object" }),
  tie_word_embeddings: z.boolean({ error: "true or false" }).optional(),
  eos_token_id: z
    .union([nonNegInt(), z.array(nonNegInt())], { error: "a token id or an array of ids" })
    .nullable()
    .optional(),
});

type Issue = { field: string; message: string };

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const k of path) {
    if (typeof v !== "object" || v === null) return undefined;
    v = (v as Record<PropertyKey, unknown>)[k];
  }
  return v;
}

function describe(v: unknown): string {
  if (v === undefined) return "missing";
  const s = JSON.stringify(v);
  return `got ${s.length > 60 ? `${s.slice(0, 57)}...` : s}`;
}

function zodIssues(error: z.ZodError, root: unknown, prefix: string): Issue[] {
  return error.issues.map((issue) => {
    const field = [prefix, ...issue.path.map(String)].filter(Boolean).join(".");
    const expected = issue.message.replace(/^Invalid (input|option): /, "");
    const got = describe(valueAt(root, issue.path));
    return { field, message: `expected ${expected.replace(/^expected /, "")}, ${got}` };
  });
}

// --- parse ------------------------------------------------------------------------------------

/**
 * Parses a config.json object. `file` is used in error messages only. Throws ConfigError
 * listing every problem found.
 */
export function parseQwen35Config(json: unknown, file?: string): Qwen35Config {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ConfigError(file, [{ field: "", message: `expected a JSON object, ${describe(json)}` }]);
  }
  const raw = json as Record<string, unknown>;
  const layout: "vl" | "text" = "text_config" in raw ? "vl" : "text";
  const prefix = layout === "vl" ? "text_config" : "";
  const issues: Issue[] = [];
  const f = (name: string) => (prefix ? `${prefix}.${name}` : name);
  /** A problem with text-config field `name`. */
  const problem = (name: string, message: string) => issues.push({ field: f(name), message });

  let wrapper: z.infer<typeof wrapperSchema> | undefined;
  if (layout === "vl") {
    const w = wrapperSchema.safeParse(raw);
    if (!w.success) throw new ConfigError(file, zodIssues(w.error, raw, ""));
    wrapper = w.data;
  }
  const textRaw = (layout === "vl" ? raw.text_config : raw) as Record<string, unknown>;
  const parsed = textSchema.safeParse(textRaw);
  if (!parsed.success) throw new ConfigError(file, zodIssues(parsed.error, textRaw, prefix));
  const t = parsed.data;

  // model type: explicit in the text layout; in the VL layout text_config's must agree with the wrapper's
  let modelType: Qwen35TextModelType;
  if (wrapper) {
    modelType = wrapper.model_type === "qwen3_5_moe" ? "qwen3_5_moe_text" : "qwen3_5_text";
    if (t.model_type !== undefined && t.model_type !== modelType) {
      problem(
        "model_type",
        `expected "${modelType}" to match model_type "${wrapper.model_type}", got "${t.model_type}"`,
      );
    }
  } else if (t.model_type === undefined) {
    const got = raw.model_type === undefined ? "missing" : `got ${JSON.stringify(raw.model_type)}`;
    issues.push({
      field: "model_type",
      message: `expected "qwen3_5_text" or "qwen3_5_moe_text" (or a VL config with text_config), ${got}`,
    });
    modelType = "qwen3_5_text";
  } else {
    modelType = t.model_type;
  }

  // attention geometry
  const H = t.num_attention_heads;
  const Hkv = t.num_key_value_heads;
  if (H % Hkv !== 0) {
    problem("num_key_value_heads", `expected a divisor of num_attention_heads (${H}), got ${Hkv}`);
  }
  const Hk = t.linear_num_key_heads;
  const Hv = t.linear_num_value_heads;
  if (Hv % Hk !== 0) {
    problem("linear_num_value_heads", `expected a multiple of linear_num_key_heads (${Hk}), got ${Hv}`);
  }

  // RoPE: rope_parameters wins over the older top-level fields; partial factor defaults to 0.25
  const rp = t.rope_parameters;
  const ropeTheta = rp?.rope_theta ?? t.rope_theta;
  if (ropeTheta === undefined) {
    problem("rope_parameters.rope_theta", "expected a positive number (or top-level rope_theta), missing");
  }
  const partialRotaryFactor = rp?.partial_rotary_factor ?? t.partial_rotary_factor ?? 0.25;
  const rotaryExact = t.head_dim * partialRotaryFactor;
  const rotaryDim = Math.round(rotaryExact);
  if (Math.abs(rotaryExact - rotaryDim) > 1e-9 || rotaryDim % 2 !== 0 || rotaryDim === 0) {
    problem(
      rp?.partial_rotary_factor !== undefined
        ? "rope_parameters.partial_rotary_factor"
        : "partial_rotary_factor",
      `expected head_dim (${t.head_dim}) x partial_rotary_factor to be a positive even integer, got ${rotaryExact}`,
    );
  }

  // layer plan: explicit layer_types, else HF's rule (layer i is full attention iff (i+1) % interval == 0)
  const L = t.num_hidden_layers;
  const interval = t.full_attention_interval ?? 4;
  let layerTypes: LayerType[];
  if (t.layer_types) {
    layerTypes = t.layer_types;
    if (layerTypes.length !== L) {
      problem("layer_types", `expected ${L} entries (num_hidden_layers), got ${layerTypes.length}`);
    }
  } else {
    layerTypes = Array.from({ length: L }, (_, i) =>
      (i + 1) % interval === 0 ? "full_attention" : "linear_attention",
    );
  }
  const superBlocks: SuperBlock[] = [];
  if (layerTypes.length === L) {
    const pattern: LayerType[] = [
      "linear_attention",
      "linear_attention",
      "linear_attention",
      "full_attention",
    ];
    const bad = layerTypes.findIndex((lt, i) => lt !== pattern[i % 4]);
    if (L % 4 !== 0 || bad >= 0) {
      const detail =
        bad >= 0
          ? `layer ${bad} is "${layerTypes[bad]}" where the pattern needs "${pattern[bad % 4]}"`
          : `${L} layers is not a multiple of 4`;
      problem(
        t.layer_types ? "layer_types" : "num_hidden_layers",
        `expected whole DDDA super-blocks (3 linear_attention layers then 1 full_attention, repeated): ${detail}`,
      );
    } else {
      for (let b = 0; b < L / 4; b++) {
        superBlocks.push({ index: b, layers: [4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3] });
      }
    }
  }

  // FFN: dense needs intermediate_size; MoE needs the four expert sizes
  let moe: Qwen35MoeConfig | undefined;
  if (modelType === "qwen3_5_moe_text") {
    const need = [
      "num_experts",
      "num_experts_per_tok",
      "moe_intermediate_size",
      "shared_expert_intermediate_size",
    ] as const;
    for (const k of need) {
      if (t[k] === undefined) problem(k, `expected ${POS_INT} (required for MoE models), missing`);
    }
    if (need.every((k) => t[k] !== undefined)) {
      moe = {
        numExperts: t.num_experts!,
        numExpertsPerTok: t.num_experts_per_tok!,
        moeIntermediateSize: t.moe_intermediate_size!,
        sharedExpertIntermediateSize: t.shared_expert_intermediate_size!,
      };
      if (moe.numExpertsPerTok > moe.numExperts) {
        problem(
          "num_experts_per_tok",
          `expected at most num_experts (${moe.numExperts}), got ${moe.numExpertsPerTok}`,
        );
      }
    }
  } else if (t.intermediate_size === undefined) {
    problem("intermediate_size", `expected ${POS_INT} (the dense FFN width), missing`);
  }

  if (issues.length > 0) throw new ConfigError(file, issues);

  const eos = new Set<number>();
  for (const v of [t.eos_token_id, wrapper?.eos_token_id]) {
    if (typeof v === "number") eos.add(v);
    else if (Array.isArray(v)) for (const x of v) eos.add(x);
  }
  const outside = [...eos].filter((id) => id >= t.vocab_size);
  if (outside.length > 0) {
    throw new ConfigError(file, [
      {
        field: f("eos_token_id"),
        message: `expected ids below vocab_size (${t.vocab_size}), got ${outside.join(", ")}`,
      },
    ]);
  }
  const keyDim = Hk * t.linear_key_head_dim;
  const valueDim = Hv * t.linear_value_head_dim;
  return {
    source: { file, layout },
    modelType,
    vocabSize: t.vocab_size,
    hiddenSize: t.hidden_size,
    numHiddenLayers: L,
    rmsNormEps: t.rms_norm_eps,
    maxPositionEmbeddings: t.max_position_embeddings,
    numAttentionHeads: H,
    numKeyValueHeads: Hkv,
    headDim: t.head_dim,
    gqaRatio: H / Hkv,
    ropeTheta: ropeTheta!,
    partialRotaryFactor,
    rotaryDim,
    linearNumKeyHeads: Hk,
    linearNumValueHeads: Hv,
    linearKeyHeadDim: t.linear_key_head_dim,
    linearValueHeadDim: t.linear_value_head_dim,
    linearConvKernelDim: t.linear_conv_kernel_dim,
    keyDim,
    valueDim,
    convDim: 2 * keyDim + valueDim,
    gdnHeadRatio: Hv / Hk,
    intermediateSize: moe ? t.intermediate_size : t.intermediate_size!,
    moe,
    layerTypes,
    fullAttentionInterval: interval,
    superBlocks,
    tieWordEmbeddings: wrapper?.tie_word_embeddings ?? t.tie_word_embeddings ?? false,
    eosTokenIds: [...eos],
    dtype: t.dtype ?? t.torch_dtype,
    textConfig: textRaw,
    raw,
  };
}

/** Reads and parses `path` (a config.json). */
export async function readQwen35Config(path: string): Promise<Qwen35Config> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (cause) {
    throw new ConfigError(path, [{ field: "", message: `cannot read: ${(cause as Error).message}` }], {
      cause,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new ConfigError(path, [{ field: "", message: `not valid JSON (${(cause as Error).message})` }], {
      cause,
    });
  }
  return parseQwen35Config(json, path);
}

/**
 * Whether the LM head is the embedding. Final rule: if the checkpoint has no `lm_head.weight`
 * the embedding is used whatever the flag says; if it has one, the config flag decides (HF ties
 * the head to the embedding when the flag is set).
 */
export function usesTiedEmbeddings(config: Qwen35Config, tensorNames: Iterable<string>): boolean {
  for (const n of tensorNames) if (n === "lm_head.weight" || n === "lm_head") return config.tieWordEmbeddings;
  return true;
}
