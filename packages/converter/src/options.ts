/**
 * The converter's options, in one place: what `convert()` takes (ConvertOptions) and what one
 * component build takes (BuildOptions), their defaults, and one check per option. Both
 * resolutions run the same checks; a conversion narrows two ranges to what converted chains
 * support (ctx 128 … 16,384, prefill batch ≤ 128) and names each option by its CLI flag
 * (ConvertOptionError: "--prefill-batch must be …"), a build by its field (GraphOptionError:
 * "prefillBatch: must be …").
 */
import type { GraphDType, KvPlacement } from "@anemll-qwen35/ir/chain";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { BlobSink } from "@anemll-qwen35/ir/mil";
import { ConvertOptionError, GraphOptionError } from "./errors.js";
import { ANE_MAX_DIM } from "./graph/ane.js";
import {
  ATTENTION_CORES,
  ATTENTION_FORMS,
  type AttentionCore,
  type AttentionForm,
} from "./graph/attention.js";
import { DEFAULT_WY_CHUNK, GDN_PREFILL_FORMS, type GdnPrefillForm } from "./graph/gdn-chunked.js";
import type { EncodedWeightStore, WeightEncodingReport } from "./graph/weights.js";
import type { KmeansPool } from "./quant/kmeans-pool.js";
import { asQuantPlan, type QuantPlan } from "./quant/plan.js";
import {
  DEFAULT_LUT_GROUP_SIZE,
  parseQuantSpec,
  type QuantPolicy,
  type QuantRule,
  type QuantSpec,
  specRules,
  unmatchedPatterns,
  type WeightQuant,
} from "./quant/policy.js";

/** The shortest context a converted chain supports … */
export const MIN_CTX = 128;
/**
 * … and the longest: the ANE's per-dimension limit (ANE_MAX_DIM), which the attention's score
 * matmuls over the cache rows reach at ctx (limits.ts checks every built function).
 */
export const MAX_CTX = ANE_MAX_DIM;
/**
 * The context a conversion gets when none is asked for (an agent's system prompt, tools and a few
 * tool results), or the model's max_position_embeddings where that is less.
 */
export const DEFAULT_CTX = 4096;
/** The smallest default context bucket; each next one is BUCKET_STEP times longer, up to ctx. */
export const FIRST_BUCKET = 256;
export const BUCKET_STEP = 4;

/**
 * The default context buckets up to `ctx`: 256, 1,024, 4,096, 16,384 (×4 each, the documented
 * rule: a decode step's attention cost grows with the bucket, so each bucket about quarters the
 * one above while the runner is there; see bench's bucket-cost script), below ctx, then ctx.
 */
export function defaultBuckets(ctx: number): number[] {
  const out: number[] = [];
  for (let b = FIRST_BUCKET; b < ctx; b *= BUCKET_STEP) out.push(b);
  out.push(ctx);
  return out;
}
/** Tokens per prefill call (ANEMLL's batch; costplan: notes/prefill-gdn-forms.md). */
export const DEFAULT_PREFILL_BATCH = 64;
/** Drafts one verify call takes by default, and at most (the head's acceptance falls with depth). */
export const DEFAULT_VERIFY_TOKENS = 2;
export const MAX_VERIFY_TOKENS = 4;
/** Largest package (single ANE blobs of ~2 GB fell back to the CPU in the reference study). */
export const DEFAULT_BUDGET_BYTES = 1.5e9;
/** Vocabulary rows per lm_head piece: the ANE's per-dimension limit. */
export const DEFAULT_LM_HEAD_MAX_ROWS = ANE_MAX_DIM;

export interface ConvertOptions {
  /** Local checkpoint folder or `hf:owner/name[@revision]`. */
  model: string;
  /** Output folder (created; replaced only when the new conversion is complete). */
  out: string;
  /**
   * Context length, 128 … 16,384 (default 4,096, or the model's max_position_embeddings where less;
   * given alone, a single bucket of that size).
   */
  ctx?: number;
  /**
   * Context buckets, ascending, 128 … 16,384, the last one the context (default: defaultBuckets of
   * the default context; [ctx] when only ctx is given). Every super-block package carries its
   * functions at each, over one KV store sized for the last.
   */
  buckets?: readonly number[];
  /** Super-blocks per package or "all" (default "all": as many as the size budget allows). */
  fuse?: number | "all";
  /** Largest package in bytes (default 1.5 GB). */
  budgetBytes?: number;
  /** KV placement (default "io"; see README for why). */
  state?: KvPlacement;
  /** "fp16" (default, the ANE program) or "fp32" (same graph in fp32, for exact parity checks). */
  dtype?: GraphDType;
  /** The attention core: "matmul" (default) or "sdpa" (see graph/attention.ts). */
  attention?: AttentionForm;
  /**
   * Tokens per call of each super-block package's `prefill` function, beside its one-token
   * `decode` function over the same weights (default 64; 0 = decode only).
   */
  prefillBatch?: number;
  /** The prefill function's Gated DeltaNet form: "chunked" (default, WY) or "scan" (graph/gdn-chunked.ts). */
  gdnPrefill?: GdnPrefillForm;
  /**
   * Keep the checkpoint's multi-token-prediction head (default true: when it has `mtp.*` tensors):
   * an `mtp` package and a verify function of `verifyTokens` + 1 rows in every super-block and
   * lm_head package, for speculative decoding (model.json's `speculative`). false leaves it out.
   */
  mtp?: boolean;
  /** Most draft tokens one verify call takes, 1 … 4 (default 2; graph/superblock-io.ts). */
  verifyTokens?: number;
  /**
   * How each weight is stored: a preset and rules (quant/policy.ts), as text
   * ("default,gdn.in_proj_qkv=lut8") or parsed. Default: the preset "default" (DEFAULT_QUANT_RULES).
   */
  quant?: string | QuantSpec;
  /** Shorthand for the rule body=…: every super-block projection (applied after quant's preset, before its rules). */
  body?: WeightQuant;
  /** Shorthand for the rule lm_head=… (likewise). */
  lmHead?: WeightQuant;
  /** Shorthand for the rule embed=… (likewise). */
  embed?: WeightQuant;
  /** Output channels per LUT for LUT encodings that name none (default 8). */
  groupSize?: number;
  /** lm_head emits per-piece top-1 instead of logits. */
  argmax?: boolean;
  /**
   * Most vocabulary rows per lm_head piece (default 16,384), or "auto": chosen by a sweep (timed
   * through Core ML on a Mac, costplan's estimate elsewhere) and recorded in model.json.
   */
  lmHeadMaxRows?: number | "auto";
  /** Reuse components and finished weights of an interrupted conversion of the same model and options. */
  resume?: boolean;
  /** Replace whatever is at `out` (and `<out>.partial`), even if it is not a previous conversion. */
  force?: boolean;
  /** Worker threads for k-means (default: available parallelism; 1 = the main thread only). */
  workers?: number;
  /** Called per stage and per encoded weight. */
  onProgress?: (event: ConvertProgress) => void;
  /** One line per encoded weight (name, encoding, reconstruction error) and other log lines. */
  onLog?: (line: string) => void;
  signal?: AbortSignal;
}

export interface ConvertProgress {
  /** "component": a package starts (or is done); "tensor": one weight is encoded; "skip": a package is reused. */
  readonly stage: "resolve" | "plan" | "component" | "tensor" | "skip" | "finish";
  readonly component?: string;
  /** The weight just encoded (stage "tensor"), and whether it came from an interrupted run. */
  readonly tensor?: string;
  readonly reused?: boolean;
  /** Estimated bytes of packages finished so far, and in all. */
  readonly bytes: number;
  readonly totalBytes: number;
  /** Of the estimated work (k-means dominates it), 0 … 1. */
  readonly fraction: number;
  readonly elapsedSeconds: number;
}

/**
 * One package's worth of the decode chain:
 *   embed        token id → hidden
 *   superblocks  `count` consecutive DDDA super-blocks starting at super-block `first`
 *                (super-block s = layers 4s..4s+3), fused into one function
 *   lm_head      final RMSNorm → vocabulary logits (split in pieces) or their argmax
 */
export type ComponentSpec =
  | { readonly kind: "embed" }
  | { readonly kind: "superblocks"; readonly first: number; readonly count: number }
  | { readonly kind: "lm_head" }
  /** The MTP head (graph/mtp.ts). */
  | { readonly kind: "mtp" };

export interface BuildOptions {
  /** Context length: KV rows per attention layer and RoPE table rows (positions 0..ctx-1). Required. */
  readonly ctx: number;
  /**
   * Super-blocks: the KV lengths the package has functions for, ascending, the last one ctx
   * (default [ctx]); with more than one, functions are named decode_<n> / prefill_<n> / verify_<n>.
   */
  readonly buckets?: readonly number[];
  /** "fp16" (default): the ANE program. "fp32": the same graph in fp32, for exact parity checks. */
  readonly dtype?: GraphDType;
  /** KV cache placement (default "io"); GDN states are inputs/outputs either way. */
  readonly state?: KvPlacement;
  /** The attention core (default "matmul"; see attention.ts — "matmul-joined" is for benchmarks). */
  readonly attention?: AttentionCore;
  /**
   * How each weight is stored: a policy (default: all plain; the converter's default is
   * DEFAULT_QUANT_RULES), or the plan a conversion made of its policy once (planQuant).
   */
  readonly quant?: QuantPolicy | QuantPlan;
  /** lm_head: emit argmax_idx / argmax_val instead of logits (default false). */
  readonly argmax?: boolean;
  /** lm_head: most vocabulary rows per piece (default 16384, the ANE's per-dimension limit). */
  readonly lmHeadMaxRows?: number;
  /** Most intermediate channels per MLP projection; wider MLPs are split (default 16384, the ANE's limit). */
  readonly mlpMaxChannels?: number;
  /**
   * Super-blocks: tokens per call of a `prefill` function beside the one-token `decode` function,
   * over the same weights (a multifunction package); 0 (default) = decode only ("main").
   */
  readonly prefillBatch?: number;
  /** The prefill function's delta rule: "chunked" (default, the WY form) or "scan" (gdn-chunked.ts). */
  readonly gdnPrefill?: GdnPrefillForm;
  /** Tokens per WY sub-chunk of the chunked form (default 16; a divisor of the batch is used). */
  readonly wyChunk?: number;
  /**
   * Super-blocks and lm_head: a `verify` function of verifyTokens + 1 rows beside the others (the
   * MTP head's drafts and the token before them, scored in one call); 0 (default): none.
   */
  readonly verifyTokens?: number;
  /** Receives large constants as they are made (an MlPackageWriter's `blobs`). */
  readonly blobSink?: BlobSink;
  /** Called once per encoded weight with its reconstruction error. */
  readonly onWeight?: (report: WeightEncodingReport) => void;
  /** Checked before every tensor read. */
  readonly signal?: AbortSignal;
  /** 1 = LUT k-means on the main thread only (default: the pool's workers). */
  readonly workers?: number;
  /** Worker pool for LUT k-means (default: palettize's process-wide pool). */
  readonly pool?: KmeansPool;
  /** Keeps finished k-means weights for a resumed conversion. */
  readonly store?: EncodedWeightStore;
}

/** What the graph builders read: every build option checked, every default filled. */
export interface ResolvedOptions {
  /** The KV rows this function reads (its bucket; the largest bucket until a bucket is built). */
  readonly ctx: number;
  readonly buckets: readonly number[];
  /** mlstate: rows of the one KV state every function shares (ctx, + T − 1 spare rows beside prefill). */
  readonly kvRows: number;
  readonly dtype: GraphDType;
  readonly state: KvPlacement;
  readonly attention: AttentionCore;
  readonly quant: QuantPlan;
  readonly argmax: boolean;
  readonly lmHeadMaxRows: number;
  readonly mlpMaxChannels: number;
  readonly prefillBatch: number;
  readonly gdnPrefill: GdnPrefillForm;
  readonly wyChunk: number;
  readonly verifyTokens: number;
}

/** A conversion's options, checked and filled in (checkConvertForModel checks them against the model). */
export interface ResolvedConvert {
  readonly ctx: number;
  readonly buckets: readonly number[];
  /** Neither ctx nor buckets were given: both follow the model's max_position_embeddings. */
  readonly ctxDefault: boolean;
  readonly fuse: number | "all";
  readonly budgetBytes: number;
  readonly state: KvPlacement;
  readonly dtype: GraphDType;
  readonly attention: AttentionForm;
  readonly prefillBatch: number;
  readonly gdnPrefill: GdnPrefillForm;
  /** Keep the MTP head if the checkpoint has one (checkConvertForModel; convert decides with the checkpoint). */
  readonly mtp: boolean;
  /** Drafts per verify call (the verify functions have verifyTokens + 1 rows). */
  readonly verifyTokens: number;
  /** The policy as written down (preset, shorthands, rules) and the rules it resolves to. */
  readonly quantSpec: QuantSpec;
  readonly quant: QuantPolicy;
  readonly argmax: boolean;
  /** The lm_head's rows per piece: as given, or (lmHeadAuto) the default until the sweep chooses. */
  readonly lmHeadMaxRows: number;
  /** lmHeadMaxRows is to be chosen by tuneLmHeadSplit. */
  readonly lmHeadAuto: boolean;
}

// ---- the checks: each returns what is wrong with a value (without the option's name), or undefined

function integerProblem(
  v: unknown,
  min: number,
  max = Number.POSITIVE_INFINITY,
  note = "",
): string | undefined {
  if (typeof v === "number" && Number.isInteger(v) && v >= min && v <= max) return undefined;
  const range = Number.isFinite(max)
    ? `an integer from ${min}${note} to ${max}`
    : min === 1
      ? "a positive integer"
      : `an integer ≥ ${min}`;
  return `must be ${range}, got ${String(v)}`;
}

function oneOfProblem(v: unknown, allowed: readonly string[]): string | undefined {
  if (allowed.includes(v as string)) return undefined;
  const list = allowed.length > 1 ? `${allowed.slice(0, -1).join(", ")} or ${allowed.at(-1)}` : allowed[0];
  return `must be ${list}, got ${String(v)}`;
}

const fuseProblem = (v: unknown) =>
  v === "all" || (typeof v === "number" && Number.isInteger(v) && v >= 1)
    ? undefined
    : `must be a positive integer or "all", got ${String(v)}`;

const budgetProblem = (v: unknown) =>
  typeof v === "number" && v > 0 ? undefined : `must be positive, got ${String(v)}`;

/** Why a bucket list is not ascending integers in [min, ctx] ending at ctx, or undefined. */
function bucketsProblem(v: readonly unknown[], min: number, ctx: number): string | undefined {
  if (!Array.isArray(v) || v.length === 0) return `must list at least one context length, got ${String(v)}`;
  if (v.some((b, i) => i > 0 && (b as number) <= (v[i - 1] as number)))
    return `must ascend, got ${v.join(",")}`;
  for (const b of v) {
    const p = integerProblem(b, min, ctx);
    if (p) return `${p} (each bucket from ${min} to the context ${ctx})`;
  }
  if (v.at(-1) !== ctx) return `must end at the context ${ctx}, got ${v.join(",")}`;
  return undefined;
}

const prefillProblem = (v: unknown, max: number) => integerProblem(v, 0, max, " (decode only)");

/** Why `ctx` is past the model's own RoPE range (max_position_embeddings), or undefined. */
function modelCtxProblem(ctx: number, config: Qwen35Config): string | undefined {
  if (config.maxPositionEmbeddings !== undefined && ctx > config.maxPositionEmbeddings) {
    return `${ctx} exceeds the model's max_position_embeddings (${config.maxPositionEmbeddings})`;
  }
  return undefined;
}

/** Throws the option's error when a check found a problem. */
function check(problem: string | undefined, error: (message: string) => Error): void {
  if (problem !== undefined) throw error(problem);
}

// ---- a component build

const graphError = (field: string) => (message: string) => new GraphOptionError(field, message);

/** Checks a build's options against the model and fills the defaults (GraphOptionError names the field). */
export function resolveBuildOptions(
  config: Qwen35Config,
  spec: ComponentSpec,
  options: BuildOptions,
): ResolvedOptions {
  const { ctx } = options;
  check(integerProblem(ctx, 1) ?? modelCtxProblem(ctx, config), graphError("ctx"));
  const o = {
    dtype: options.dtype ?? "fp16",
    state: options.state ?? "io",
    attention: options.attention ?? "matmul",
    lmHeadMaxRows: options.lmHeadMaxRows ?? DEFAULT_LM_HEAD_MAX_ROWS,
    mlpMaxChannels: options.mlpMaxChannels ?? ANE_MAX_DIM,
    prefillBatch: options.prefillBatch ?? 0,
    gdnPrefill: options.gdnPrefill ?? "chunked",
    wyChunk: options.wyChunk ?? DEFAULT_WY_CHUNK,
    verifyTokens: options.verifyTokens ?? 0,
  };
  check(oneOfProblem(o.dtype, ["fp16", "fp32"]), graphError("dtype"));
  check(oneOfProblem(o.state, ["io", "mlstate"]), graphError("state"));
  check(oneOfProblem(o.attention, ATTENTION_CORES), graphError("attention"));
  check(integerProblem(o.lmHeadMaxRows, 1), graphError("lmHeadMaxRows"));
  check(integerProblem(o.mlpMaxChannels, 1), graphError("mlpMaxChannels"));
  const quant = asQuantPlan(config, options.quant, { mtp: spec.kind === "mtp" });
  const { groupSize } = quant.policy;
  if (groupSize !== undefined) check(integerProblem(groupSize, 1), graphError("quant.groupSize"));
  const buckets = options.buckets ?? [ctx];
  check(bucketsProblem(buckets, 1, ctx), graphError("buckets"));
  check(prefillProblem(o.prefillBatch, buckets[0]), graphError("prefillBatch"));
  check(oneOfProblem(o.gdnPrefill, GDN_PREFILL_FORMS), graphError("gdnPrefill"));
  check(integerProblem(o.wyChunk, 1), graphError("wyChunk"));
  check(integerProblem(o.verifyTokens, 0, MAX_VERIFY_TOKENS, " (none)"), graphError("verifyTokens"));
  checkSpec(config, spec);
  // a prefill chunk writes all T rows from its position: T − 1 spare rows let one start at ctx − 1
  const kvRows = ctx + (o.prefillBatch > 0 ? o.prefillBatch - 1 : 0);
  return { ctx, buckets, kvRows, ...o, argmax: options.argmax ?? false, quant };
}

function checkSpec(config: Qwen35Config, spec: ComponentSpec): void {
  if (spec.kind === "superblocks") {
    const n = config.superBlocks.length;
    check(integerProblem(spec.count, 1), graphError("spec.count"));
    if (!Number.isInteger(spec.first) || spec.first < 0 || spec.first + spec.count > n) {
      throw new GraphOptionError(
        "spec.first",
        `super-blocks ${spec.first}..${spec.first + spec.count - 1} are outside the model's ${n} (0..${n - 1})`,
      );
    }
  } else if (spec.kind !== "embed" && spec.kind !== "lm_head" && spec.kind !== "mtp") {
    check(
      oneOfProblem((spec as { kind: unknown }).kind, ["embed", "superblocks", "lm_head", "mtp"]),
      graphError("spec.kind"),
    );
  }
}

// ---- a conversion

const convertError = (flag: string) => (message: string) => new ConvertOptionError(flag, message);

/** Checks the `fuse` and `budgetBytes` of a package plan (convert's and planComponents' one check). */
export function checkPlanOptions(fuse: unknown, budgetBytes: unknown): void {
  check(fuseProblem(fuse), convertError("fuse"));
  check(budgetProblem(budgetBytes), convertError("budget"));
}

/** The policy of a conversion: quant's preset, then the body/lmHead/embed shorthands, then quant's rules. */
export function resolveQuantSpec(o: Pick<ConvertOptions, "quant" | "body" | "lmHead" | "embed">): QuantSpec {
  let spec: QuantSpec;
  try {
    spec = typeof o.quant === "string" ? parseQuantSpec(o.quant) : (o.quant ?? parseQuantSpec(""));
  } catch (err) {
    if (err instanceof GraphOptionError) throw new ConvertOptionError("quant", err.detail);
    throw err;
  }
  const shorthands: QuantRule[] = [];
  if (o.body) shorthands.push({ pattern: "body", quant: o.body });
  if (o.lmHead) shorthands.push({ pattern: "lm_head", quant: o.lmHead });
  if (o.embed) shorthands.push({ pattern: "embed", quant: o.embed });
  return { preset: spec.preset, rules: [...shorthands, ...spec.rules] };
}

/**
 * Checks a conversion's options and fills the defaults, before anything is read or downloaded
 * (ConvertOptionError names the CLI flag); checkConvertForModel checks the rest once the model
 * is open.
 */
export function resolveConvertOptions(o: ConvertOptions): ResolvedConvert {
  const ctx = o.ctx ?? o.buckets?.at(-1) ?? DEFAULT_CTX;
  check(integerProblem(ctx, MIN_CTX, MAX_CTX), convertError("ctx"));
  const ctxDefault = o.ctx === undefined && o.buckets === undefined;
  const buckets = o.buckets ? [...o.buckets] : ctxDefault ? defaultBuckets(ctx) : [ctx];
  check(bucketsProblem(buckets, MIN_CTX, ctx), convertError("buckets"));
  const fuse = o.fuse ?? "all";
  const budgetBytes = o.budgetBytes ?? DEFAULT_BUDGET_BYTES;
  checkPlanOptions(fuse, budgetBytes);
  const groupSize = o.groupSize ?? DEFAULT_LUT_GROUP_SIZE;
  check(integerProblem(groupSize, 1), convertError("group-size"));
  const state = o.state ?? "io";
  check(oneOfProblem(state, ["io", "mlstate"]), convertError("state"));
  const dtype = o.dtype ?? "fp16";
  check(oneOfProblem(dtype, ["fp16", "fp32"]), convertError("dtype"));
  const attention = o.attention ?? "matmul";
  check(oneOfProblem(attention, ATTENTION_FORMS), convertError("attention"));
  const prefillBatch = o.prefillBatch ?? DEFAULT_PREFILL_BATCH;
  check(prefillProblem(prefillBatch, MIN_CTX), convertError("prefill-batch"));
  const gdnPrefill = o.gdnPrefill ?? "chunked";
  check(oneOfProblem(gdnPrefill, GDN_PREFILL_FORMS), convertError("gdn-prefill"));
  const lmHeadAuto = o.lmHeadMaxRows === "auto";
  const lmHeadMaxRows =
    o.lmHeadMaxRows === "auto" ? DEFAULT_LM_HEAD_MAX_ROWS : (o.lmHeadMaxRows ?? DEFAULT_LM_HEAD_MAX_ROWS);
  check(integerProblem(lmHeadMaxRows, 1), convertError("lmhead-rows"));
  if (o.workers !== undefined) check(integerProblem(o.workers, 1), convertError("workers"));
  const verifyTokens = o.verifyTokens ?? DEFAULT_VERIFY_TOKENS;
  check(integerProblem(verifyTokens, 1, MAX_VERIFY_TOKENS), convertError("verify-tokens"));
  const quantSpec = resolveQuantSpec(o);
  return {
    ctx,
    buckets,
    ctxDefault,
    fuse,
    budgetBytes,
    state,
    dtype,
    attention,
    prefillBatch,
    gdnPrefill,
    mtp: o.mtp ?? true,
    verifyTokens,
    quantSpec,
    quant: { rules: specRules(quantSpec), groupSize },
    argmax: o.argmax ?? false,
    lmHeadMaxRows,
    lmHeadAuto,
  };
}

/**
 * A conversion's context fitted to its model: the default context is cut to the model's
 * max_position_embeddings (its buckets with it); a context the user asked for is kept (and checked
 * by checkConvertForModel).
 */
export function fitConvertToModel(r: ResolvedConvert, config: Qwen35Config): ResolvedConvert {
  const max = config.maxPositionEmbeddings;
  if (!r.ctxDefault || max === undefined || max >= r.ctx) return r;
  const ctx = Math.max(MIN_CTX, max);
  return { ...r, ctx, buckets: defaultBuckets(ctx) };
}

/**
 * A conversion's options against its model, once it is open: ctx within the model's RoPE range,
 * and every rule the user wrote selecting some tensor (a typo must not pass silently).
 */
export function checkConvertForModel(r: ResolvedConvert, config: Qwen35Config, plan: QuantPlan): void {
  check(modelCtxProblem(r.ctx, config), convertError("ctx"));
  const targets = plan.tensors.filter((t) => t.byPolicy);
  const unmatched = unmatchedPatterns({ rules: r.quantSpec.rules }, targets);
  if (unmatched.length) {
    throw new ConvertOptionError(
      "quant",
      `${unmatched.map((p) => `"${p}"`).join(", ")} matches no tensor of this model (patterns: body, gdn, attn, mlp, lm_head, embed, a role such as gdn.in_proj_qkv, or a canonical name such as layers.3.mlp.down_proj; * and ? glob)`,
    );
  }
}
