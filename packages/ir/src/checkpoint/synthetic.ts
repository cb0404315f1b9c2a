/**
 * Synthetic full-size Qwen3.5 checkpoints: the published config of a size with random weights,
 * in the official VL layout (config.json with text_config, `model.language_model.*` tensors in
 * BF16 with F32 `A_log` and GDN `norm.weight`, `lm_head.weight` when untied, an `mtp.*` head and
 * a `model.visual.*` tower, Qwen-style shard names + index). Stand-ins with the real shapes, for
 * benchmarks and for exercising the converter and the runtimes at real sizes without downloading
 * anything; their output is noise.
 *
 * Config values: the published configs (Qwen's config.json files; per-size hidden size, layers,
 * heads, FFN and tying as their model cards give them). The text model's tensors are the
 * parameter table's (params.ts). The vision tower is shape-plausible only (0.8B's published
 * depth and width for every size); nothing here reads it.
 *
 * Speed: bf16 values come from a 64 Ki-entry table of normal samples indexed by 16-bit chunks of
 * a xorshift32 stream (two values per PRNG step), filled into a reused Uint16Array chunk and
 * written while the next chunk is generated. Each tensor's stream is seeded from (seed, name),
 * so a tensor's values do not depend on the sharding or the order of writing.
 */
import { createHash } from "node:crypto";
import { copyFile, mkdir, readdir, readFile, rm, stat, statfs } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { f32ToBf16Bits, InvalidArgumentError, numel } from "@anemll-qwen35/core";
import { commitDirectory, pathExists, tempSiblingPath, writeFileAtomic } from "./atomic.js";
import { parseQwen35Config, type Qwen35Config } from "./config.js";
import { type Qwen35Parameter, qwen35Parameters } from "./params.js";
import { specByteLength, type TensorSpec } from "./safetensors-writer.js";
import { INDEX_FILE, qwenShardName, ShardedSafetensorsWriter } from "./sharded.js";
import { type CheckpointProgress, TEXT_SIDE_FILES } from "./side-files.js";
import { hfName } from "./weights.js";

export type SyntheticSize = "0.8b" | "2b" | "4b" | "9b" | "27b" | "35b-a3b";
export const SYNTHETIC_SIZES: readonly SyntheticSize[] = ["0.8b", "2b", "4b", "9b", "27b", "35b-a3b"];

interface Geometry {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  gdnValueHeads: number;
  gdnKeyHeads: number;
  ffn: number | { experts: number; topK: number; moe: number; shared: number };
  tied: boolean;
}

// Per-size values of the published configs (27B as its model card and third-party copies give it).
const GEOMETRY: Record<SyntheticSize, Geometry> = {
  "0.8b": {
    hidden: 1024,
    layers: 24,
    heads: 8,
    kvHeads: 2,
    gdnValueHeads: 16,
    gdnKeyHeads: 16,
    ffn: 3584,
    tied: true,
  },
  "2b": {
    hidden: 2048,
    layers: 24,
    heads: 8,
    kvHeads: 2,
    gdnValueHeads: 16,
    gdnKeyHeads: 16,
    ffn: 6144,
    tied: true,
  },
  "4b": {
    hidden: 2560,
    layers: 32,
    heads: 16,
    kvHeads: 4,
    gdnValueHeads: 32,
    gdnKeyHeads: 16,
    ffn: 9216,
    tied: true,
  },
  "9b": {
    hidden: 4096,
    layers: 32,
    heads: 16,
    kvHeads: 4,
    gdnValueHeads: 32,
    gdnKeyHeads: 16,
    ffn: 12288,
    tied: false,
  },
  "27b": {
    hidden: 5120,
    layers: 64,
    heads: 24,
    kvHeads: 4,
    gdnValueHeads: 48,
    gdnKeyHeads: 16,
    ffn: 17408,
    tied: false,
  },
  "35b-a3b": {
    hidden: 2048,
    layers: 40,
    heads: 16,
    kvHeads: 2,
    gdnValueHeads: 32,
    gdnKeyHeads: 16,
    ffn: { experts: 256, topK: 8, moe: 512, shared: 512 },
    tied: false,
  },
};

/** The published config.json (VL wrapper) of a size. */
export function publishedConfigJson(size: SyntheticSize): Record<string, unknown> {
  const g = GEOMETRY[size];
  if (!g)
    throw new InvalidArgumentError(`unknown size "${size}" (expected one of ${SYNTHETIC_SIZES.join(", ")})`);
  const moe = typeof g.ffn === "object" ? g.ffn : undefined;
  const layerTypes = Array.from({ length: g.layers }, (_, i) =>
    (i + 1) % 4 === 0 ? "full_attention" : "linear_attention",
  );
  const text: Record<string, unknown> = {
    attention_bias: false,
    attention_dropout: 0.0,
    attn_output_gate: true,
    dtype: "bfloat16",
    eos_token_id: 248044,
    full_attention_interval: 4,
    head_dim: 256,
    hidden_act: "silu",
    hidden_size: g.hidden,
    initializer_range: 0.02,
    ...(moe ? {} : { intermediate_size: g.ffn }),
    layer_types: layerTypes,
    linear_conv_kernel_dim: 4,
    linear_key_head_dim: 128,
    linear_num_key_heads: g.gdnKeyHeads,
    linear_num_value_heads: g.gdnValueHeads,
    linear_value_head_dim: 128,
    mamba_ssm_dtype: "float32",
    max_position_embeddings: 262144,
    ...(moe ? {} : { mlp_only_layers: [] }),
    model_type: moe ? "qwen3_5_moe_text" : "qwen3_5_text",
    mtp_num_hidden_layers: 1,
    mtp_use_dedicated_embeddings: false,
    ...(moe
      ? {
          moe_intermediate_size: moe.moe,
          num_experts: moe.experts,
          num_experts_per_tok: moe.topK,
          output_router_logits: false,
          router_aux_loss_coef: 0.001,
          shared_expert_intermediate_size: moe.shared,
        }
      : {}),
    num_attention_heads: g.heads,
    num_hidden_layers: g.layers,
    num_key_value_heads: g.kvHeads,
    rms_norm_eps: 1e-6,
    rope_parameters: {
      mrope_interleaved: true,
      mrope_section: [11, 11, 10],
      partial_rotary_factor: 0.25,
      rope_theta: 10000000,
      rope_type: "default",
    },
    tie_word_embeddings: g.tied,
    use_cache: true,
    vocab_size: 248320,
  };
  return {
    architectures: [moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"],
    image_token_id: 248056,
    model_type: moe ? "qwen3_5_moe" : "qwen3_5",
    text_config: text,
    tie_word_embeddings: g.tied,
    video_token_id: 248057,
    vision_config: {
      depth: 12,
      hidden_act: "gelu_pytorch_tanh",
      hidden_size: 768,
      in_channels: 3,
      intermediate_size: 3072,
      model_type: moe ? "qwen3_5_moe" : "qwen3_5",
      num_heads: 12,
      num_position_embeddings: 2304,
      out_hidden_size: g.hidden,
      patch_size: 16,
      spatial_merge_size: 2,
      temporal_patch_size: 2,
    },
    vision_end_token_id: 248054,
    vision_start_token_id: 248053,
  };
}

/**
 * A published size scaled down to fit a small disk: fewer layers (whole DDDA super-blocks) and,
 * for a mixture of experts, fewer experts; every other dimension (hidden, heads, expert width,
 * top-k, vocabulary) as published, so one token still does the published per-layer work.
 */
export function scaledConfigJson(
  size: SyntheticSize,
  o: { layers?: number; experts?: number } = {},
): Record<string, unknown> {
  const c = publishedConfigJson(size);
  const text = { ...(c.text_config as Record<string, unknown>) };
  const layers = o.layers ?? (text.num_hidden_layers as number);
  if (!Number.isInteger(layers) || layers < 4 || layers % 4 !== 0)
    throw new InvalidArgumentError(
      `layers must be a positive multiple of 4 (whole super-blocks), got ${layers}`,
    );
  text.num_hidden_layers = layers;
  text.layer_types = (text.layer_types as string[]).slice(0, layers);
  if (o.experts !== undefined) {
    if (text.num_experts === undefined) throw new InvalidArgumentError(`${size} has no experts to scale`);
    if (!Number.isInteger(o.experts) || o.experts < (text.num_experts_per_tok as number))
      throw new InvalidArgumentError(
        `experts must be an integer ≥ top-k (${text.num_experts_per_tok}), got ${o.experts}`,
      );
    text.num_experts = o.experts;
  }
  return { ...c, text_config: text };
}

/** How a tensor's values are drawn. */
type Init = { kind: "normal"; mean: number; std: number } | { kind: "logUniform"; lo: number; hi: number }; // log(U(lo, hi)), HF's A_log init

interface SyntheticTensor extends TensorSpec {
  init: Init;
}

/** How the text model's tensors are drawn, from the parameter table (HF's init where it matters). */
function textInit(p: Qwen35Parameter): Init {
  if (p.role === "gdn.A_log") return { kind: "logUniform", lo: 1, hi: 16 };
  if (p.role === "gdn.dt_bias") return { kind: "normal", mean: 1, std: 0.02 };
  if (p.kind === "norm" && !p.zeroCentred) return { kind: "normal", mean: 1, std: 0.02 }; // plain gain
  if (p.kind === "conv") return { kind: "normal", mean: 0, std: 0.2 };
  return { kind: "normal", mean: 0, std: 0.02 }; // zero-centred norms (1 + w) and matrices
}

/** Vision tower and MTP head (not in the parameter table): their norms by name. */
function extraInit(name: string): Init {
  if (name.startsWith("model.visual.") && /norm\d?\.weight$/.test(name))
    return { kind: "normal", mean: 1, std: 0.02 };
  return { kind: "normal", mean: 0, std: 0.02 }; // MTP norms are zero-centred like the text model's
}

function visionSpecs(vision: Record<string, number>): TensorSpec[] {
  const { depth, hidden_size: C, intermediate_size: I, in_channels: ch, out_hidden_size: out } = vision;
  const {
    patch_size: p,
    temporal_patch_size: tp,
    spatial_merge_size: m,
    num_position_embeddings: P,
  } = vision;
  const v = "model.visual.";
  const specs: TensorSpec[] = [
    { name: `${v}patch_embed.proj.weight`, dtype: "bf16", shape: [C, ch, tp, p, p] },
    { name: `${v}patch_embed.proj.bias`, dtype: "bf16", shape: [C] },
    { name: `${v}pos_embed.weight`, dtype: "bf16", shape: [P, C] },
  ];
  const lin = (name: string, o: number, i: number) => {
    specs.push({ name: `${name}.weight`, dtype: "bf16", shape: [o, i] });
    specs.push({ name: `${name}.bias`, dtype: "bf16", shape: [o] });
  };
  const norm = (name: string, n: number) => {
    specs.push({ name: `${name}.weight`, dtype: "bf16", shape: [n] });
    specs.push({ name: `${name}.bias`, dtype: "bf16", shape: [n] });
  };
  for (let b = 0; b < depth; b++) {
    const p2 = `${v}blocks.${b}.`;
    norm(`${p2}norm1`, C);
    norm(`${p2}norm2`, C);
    lin(`${p2}attn.qkv`, 3 * C, C);
    lin(`${p2}attn.proj`, C, C);
    lin(`${p2}mlp.linear_fc1`, I, C);
    lin(`${p2}mlp.linear_fc2`, C, I);
  }
  const merged = C * m * m;
  norm(`${v}merger.norm`, C);
  lin(`${v}merger.linear_fc1`, merged, merged);
  lin(`${v}merger.linear_fc2`, out, merged);
  return specs;
}

/** The MTP head: fc + norms + one full-attention decoder block (per-expert MoE in MoE models). */
function mtpSpecs(config: Qwen35Config): TensorSpec[] {
  const D = config.hiddenSize;
  const specs: TensorSpec[] = [
    { name: "mtp.fc.weight", dtype: "bf16", shape: [D, 2 * D] },
    { name: "mtp.pre_fc_norm_embedding.weight", dtype: "bf16", shape: [D] },
    { name: "mtp.pre_fc_norm_hidden.weight", dtype: "bf16", shape: [D] },
    { name: "mtp.norm.weight", dtype: "bf16", shape: [D] },
  ];
  // reuse the text-model shapes of a full-attention layer (layer 3) for mtp.layers.0
  const fa = config.layerTypes.indexOf("full_attention");
  for (const t of qwen35Parameters(config, { tied: true, expertLayout: "per-expert" })) {
    const prefix = `layers.${fa}.`;
    if (t.canonical.startsWith(prefix)) {
      specs.push({ name: `mtp.layers.0.${t.canonical.slice(prefix.length)}`, dtype: "bf16", shape: t.shape });
    }
  }
  return specs;
}

/** Every tensor of a synthetic checkpoint for a (VL) config.json object, with dtypes and inits. */
export function syntheticTensors(
  configJson: Record<string, unknown>,
  options: { vision?: boolean; mtp?: boolean } = {},
): SyntheticTensor[] {
  const config = parseQwen35Config(configJson);
  const layout = config.source.layout;
  const tensors: SyntheticTensor[] = qwen35Parameters(config, { tied: config.tieWordEmbeddings }).map(
    (p) => ({
      name: hfName(p.canonical, layout),
      dtype: p.storedDtype,
      shape: p.shape,
      init: textInit(p),
    }),
  );
  const extra: TensorSpec[] = [];
  if (options.mtp ?? true) extra.push(...mtpSpecs(config));
  const vision = configJson.vision_config as Record<string, number> | undefined;
  if ((options.vision ?? true) && vision) extra.push(...visionSpecs(vision));
  return [...tensors, ...extra.map((s) => ({ ...s, init: extraInit(s.name) }))];
}

// --- random fill --------------------------------------------------------------------------------

/** 32-bit FNV-1a of a string, mixed with the seed; never 0 (xorshift32 needs a non-zero state). */
function seedFor(seed: number, name: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  return h === 0 ? 0x9e3779b9 : h;
}

class XorShift32 {
  s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 0x9e3779b9;
  }
  next(): number {
    let s = this.s;
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    this.s = s >>> 0;
    return this.s;
  }
  /** Uniform in (0, 1). */
  uniform(): number {
    return (this.next() + 0.5) / 4294967296;
  }
  normal(): number {
    return Math.sqrt(-2 * Math.log(this.uniform())) * Math.cos(2 * Math.PI * this.uniform());
  }
}

const tables = new Map<string, Uint16Array>();

/** 65536 bf16 samples of N(mean, std²): indexing it with uniform 16-bit values samples the normal. */
function bf16NormalTable(mean: number, std: number): Uint16Array {
  const key = `${mean}/${std}`;
  let t = tables.get(key);
  if (!t) {
    const rng = new XorShift32(0x2545f491);
    t = new Uint16Array(65536);
    for (let i = 0; i < t.length; i++) t[i] = f32ToBf16Bits(mean + std * rng.normal());
    tables.set(key, t);
  }
  return t;
}

/** Fills `out` (bf16 bits) from the tensor's stream; returns the advanced PRNG state. */
function fillBf16(out: Uint16Array, n: number, table: Uint16Array, state: number): number {
  let s = state;
  let i = 0;
  for (; i + 1 < n; i += 2) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const r = s >>> 0;
    out[i] = table[r & 0xffff];
    out[i + 1] = table[r >>> 16];
  }
  if (i < n) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = table[(s >>> 0) & 0xffff];
  }
  return s >>> 0;
}

/** The values of a small (non-bf16 or non-normal) tensor as fp32. */
function smallValues(init: Init, n: number, rng: XorShift32): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    out[i] =
      init.kind === "normal"
        ? init.mean + init.std * rng.normal()
        : Math.log(init.lo + (init.hi - init.lo) * rng.uniform());
  }
  return out;
}

// --- plan ---------------------------------------------------------------------------------------

/** What a synthetic checkpoint holds, before anything is written. */
export interface SyntheticPlan {
  /** The config.json written: the size's published one, or the custom config as given. */
  readonly configJson: Record<string, unknown>;
  readonly config: Qwen35Config;
  /** Every tensor, in the order written. */
  readonly tensors: readonly TensorSpec[];
  /**
   * Parameters: the text model (the real count of the size), the MTP head, the vision tower
   * (shape-plausible only), and all of them.
   */
  readonly parameters: {
    readonly text: number;
    readonly mtp: number;
    readonly vision: number;
    readonly total: number;
  };
  /** Tensor bytes (BF16; F32 for A_log and the GDN norms). */
  readonly bytes: number;
}

/** The checkpoint `options` describe (a published size or a custom config), without writing it. */
export function planSyntheticCheckpoint(
  options: Pick<SyntheticOptions, "size" | "config" | "vision" | "mtp">,
): SyntheticPlan {
  return planOf(options).plan;
}

function planOf(options: Pick<SyntheticOptions, "size" | "config" | "vision" | "mtp">): {
  plan: SyntheticPlan;
  tensors: SyntheticTensor[];
} {
  if (!options.config && !options.size)
    throw new InvalidArgumentError("a synthetic checkpoint needs `size` or `config`");
  const configJson = options.config ?? publishedConfigJson(options.size!);
  const tensors = syntheticTensors(configJson, options);
  const count = (prefix: string) =>
    tensors.filter((t) => t.name.startsWith(prefix)).reduce((n, t) => n + numel(t.shape), 0);
  const mtp = count("mtp.");
  const vision = count("model.visual.");
  const total = count("");
  const plan: SyntheticPlan = {
    configJson,
    config: parseQwen35Config(configJson),
    tensors: tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    parameters: { text: total - mtp - vision, mtp, vision, total },
    bytes: tensors.reduce((n, t) => n + specByteLength(t), 0),
  };
  return { plan, tensors };
}

// --- writer -----------------------------------------------------------------------------------

export interface SyntheticOptions {
  /** A published size, or pass `config` instead. */
  size?: SyntheticSize;
  /** A custom (VL or text) config.json object, e.g. a tiny model for tests. */
  config?: Record<string, unknown>;
  /** Output folder (default defaultSyntheticDir(size)). */
  out?: string;
  seed?: number;
  /** Folder to copy tokenizer files from (tokenizer.json, tokenizer_config.json, ...). */
  tokenizerDir?: string;
  /** Include the vision tower / MTP head (default true, like the official layout). */
  vision?: boolean;
  mtp?: boolean;
  /** Shard size limit (default 1 GiB). */
  maxShardBytes?: number;
  /**
   * What `out` may already hold and be replaced by a new checkpoint: an earlier synthetic one
   * ("synthetic", the default: a cache of stand-ins) or nothing ("empty": only a missing or empty
   * folder). A checkpoint identical to the one asked for is kept either way (nothing is written).
   */
  replace?: "synthetic" | "empty";
  /** Replace whatever `out` holds, and rewrite even an identical checkpoint. */
  force?: boolean;
  onProgress?: (p: CheckpointProgress) => void;
  signal?: AbortSignal;
}

export interface SyntheticResult {
  dir: string;
  /** True when an identical checkpoint was already there. */
  skipped: boolean;
  tensors: number;
  bytes: number;
  files: string[];
  seconds: number;
}

/** The file that marks a folder as a synthetic checkpoint and records how it was made. */
export const SYNTHETIC_STAMP_FILE = "anemll-synthetic.json";
const GENERATOR_VERSION = 1;

/** `$ANEMLL_QWEN35_CACHE/synthetic/<name>`, else `~/.cache/anemll-qwen35/synthetic/<name>`. */
export function defaultSyntheticDir(name: string): string {
  const root = process.env.ANEMLL_QWEN35_CACHE || join(homedir(), ".cache", "anemll-qwen35");
  return join(root, "synthetic", name);
}

async function sha256File(path: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
}

/** Throws unless `dir` may be replaced (see SyntheticOptions.replace); true when it holds exactly `stampText`. */
async function checkTarget(dir: string, stampText: string, o: SyntheticOptions): Promise<boolean> {
  const info = await stat(dir).catch(() => undefined);
  if (info && !info.isDirectory()) throw new InvalidArgumentError(`${dir} is a file, not a folder`);
  const names = info ? await readdir(dir) : [];
  const stamped = names.includes(SYNTHETIC_STAMP_FILE);
  const stamp = stamped ? await readFile(join(dir, SYNTHETIC_STAMP_FILE), "utf8") : undefined;
  if (stamp === stampText && names.includes(INDEX_FILE) && !o.force) return true;
  if (names.length === 0 || o.force || (stamped && (o.replace ?? "synthetic") === "synthetic")) return false;
  const what = stamped ? "holds another synthetic checkpoint" : `is not empty (${names.length} entries)`;
  throw new InvalidArgumentError(
    `${dir} ${what}; choose a new or empty folder, or pass --force to replace it`,
  );
}

/**
 * Writes a random-weight checkpoint atomically (temp folder, then rename), unless the folder
 * already holds one with the same stamp (config, seed, options, tokenizer files); what else the
 * folder may hold and be replaced is `options.replace`'s.
 */
export async function writeSyntheticCheckpoint(options: SyntheticOptions): Promise<SyntheticResult> {
  const started = performance.now();
  const { signal, onProgress } = options;
  const { plan, tensors } = planOf(options);
  const { configJson, bytes: totalBytes } = plan;
  const dir = options.out ?? defaultSyntheticDir(options.size ?? "custom");
  const seed = options.seed ?? 0;

  const tokenizerFiles: { name: string; sha256: string }[] = [];
  if (options.tokenizerDir) {
    for (const name of TEXT_SIDE_FILES) {
      const p = join(options.tokenizerDir, name);
      if (await pathExists(p)) tokenizerFiles.push({ name, sha256: await sha256File(p) });
    }
  }
  const stamp = {
    generator: "anemll-qwen35 synthetic checkpoint",
    version: GENERATOR_VERSION,
    size: options.size ?? null,
    seed,
    maxShardBytes: options.maxShardBytes ?? 2 ** 30,
    vision: options.vision ?? true,
    mtp: options.mtp ?? true,
    configSha256: createHash("sha256").update(JSON.stringify(configJson)).digest("hex"),
    tokenizerFiles,
  };
  const stampText = `${JSON.stringify(stamp, null, 2)}\n`;
  if (await checkTarget(dir, stampText, options)) {
    return { dir, skipped: true, tensors: tensors.length, bytes: totalBytes, files: [], seconds: 0 };
  }

  const tmp = tempSiblingPath(dir);
  await mkdir(tmp, { recursive: true });
  try {
    const { bavail, bsize } = await statfs(tmp);
    if (bavail * bsize < totalBytes * 1.02) {
      throw new InvalidArgumentError(
        `not enough disk space for a ${(totalBytes / 1e9).toFixed(1)} GB checkpoint in ${dir} (${((bavail * bsize) / 1e9).toFixed(1)} GB free)`,
      );
    }
    const writer = await ShardedSafetensorsWriter.create(tmp, plan.tensors, {
      metadata: { format: "pt" },
      maxShardBytes: stamp.maxShardBytes,
      shardName: qwenShardName,
      fsync: false, // the commit rename below is what makes it visible; a crash leaves only the temp folder
    });
    let bytes = 0;
    const progress = (tensor: string) =>
      onProgress?.({ stage: "tensors", tensor, bytes, totalBytes, fraction: bytes / totalBytes });
    try {
      const CHUNK = 8 << 20; // elements per chunk (16 MiB of bf16)
      const buffers = [new Uint16Array(CHUNK), new Uint16Array(CHUNK)];
      let pending: Promise<void> = Promise.resolve();
      let which = 0;
      for (const t of tensors) {
        signal?.throwIfAborted();
        const n = numel(t.shape);
        const rng = new XorShift32(seedFor(seed, t.name));
        if (t.dtype === "bf16" && t.init.kind === "normal") {
          const table = bf16NormalTable(t.init.mean, t.init.std);
          let state = rng.s;
          for (let done = 0; done < n; done += CHUNK) {
            const m = Math.min(CHUNK, n - done);
            const buf = buffers[which];
            which ^= 1;
            state = fillBf16(buf, m, table, state);
            await pending; // the other buffer's write must finish before it is reused next round
            pending = writer.writeBytes(t.name, new Uint8Array(buf.buffer, 0, m * 2));
            bytes += m * 2;
            progress(t.name);
          }
        } else {
          await pending;
          const values = smallValues(t.init, n, rng);
          const data =
            t.dtype === "f32"
              ? new Uint8Array(values.buffer)
              : new Uint8Array(Uint16Array.from(values, f32ToBf16Bits).buffer);
          pending = writer.writeBytes(t.name, data);
          bytes += data.byteLength;
          progress(t.name);
        }
      }
      await pending;
      signal?.throwIfAborted();
      await writer.close();
    } catch (err) {
      await writer.abort();
      throw err;
    }
    onProgress?.({ stage: "files", bytes, totalBytes, fraction: 1 });
    await writeFileAtomic(join(tmp, "config.json"), `${JSON.stringify(configJson, null, 2)}\n`);
    for (const { name } of tokenizerFiles) await copyFile(join(options.tokenizerDir!, name), join(tmp, name));
    await writeFileAtomic(join(tmp, SYNTHETIC_STAMP_FILE), stampText);
    signal?.throwIfAborted();
    onProgress?.({ stage: "commit", bytes, totalBytes, fraction: 1 });
    await commitDirectory(tmp, dir, true);
    return {
      dir,
      skipped: false,
      tensors: tensors.length,
      bytes,
      files: writer.plan.map((p) => p.file),
      seconds: (performance.now() - started) / 1000,
    };
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}
