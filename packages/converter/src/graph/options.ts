/** What to build (ComponentSpec) and how (BuildOptions), with defaults and range checks. */

import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { BlobSink } from "@anemll-qwen35/ir/mil";
import type { KmeansPool } from "../kmeans-pool.js";
import { ANE_MAX_DIM } from "./ane.js";
import { ATTENTION_CORES, type AttentionCore } from "./attention.js";
import { GraphOptionError } from "./errors.js";
import { DEFAULT_WY_CHUNK, GDN_PREFILL_FORMS, type GdnPrefillForm } from "./gdn-chunked.js";
import type { GraphDType, KvPlacement } from "./io.js";
import { PLAIN_POLICY, type QuantPolicy } from "./quant.js";
import type { EncodedWeightStore, WeightEncodingReport } from "./weights.js";

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
  | { readonly kind: "lm_head" };

export interface BuildOptions {
  /** Context length: KV rows per attention layer and RoPE table rows (positions 0..ctx-1). Required. */
  readonly ctx: number;
  /** "fp16" (default): the ANE program. "fp32": the same graph in fp32, for exact parity checks. */
  readonly dtype?: GraphDType;
  /** KV cache placement (default "io"); GDN states are inputs/outputs either way. */
  readonly state?: KvPlacement;
  /** The attention core (default "matmul"; see attention.ts — "matmul-joined" is for benchmarks). */
  readonly attention?: AttentionCore;
  /** How each weight is stored (default: all plain; the converter's default is DEFAULT_QUANT_RULES). */
  readonly quant?: QuantPolicy;
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

export const DEFAULT_LM_HEAD_MAX_ROWS = ANE_MAX_DIM;

export interface ResolvedOptions {
  readonly ctx: number;
  readonly dtype: GraphDType;
  readonly state: KvPlacement;
  readonly attention: AttentionCore;
  readonly quant: QuantPolicy;
  readonly argmax: boolean;
  readonly lmHeadMaxRows: number;
  readonly mlpMaxChannels: number;
  readonly prefillBatch: number;
  readonly gdnPrefill: GdnPrefillForm;
  readonly wyChunk: number;
}

function positiveInt(field: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1)
    throw new GraphOptionError(field, `expected a positive integer, got ${String(v)}`);
  return v;
}

/** Why `ctx` cannot be this model's context length (a positive integer within its RoPE range), or undefined. */
export function ctxProblem(ctx: unknown, config: Qwen35Config): string | undefined {
  if (typeof ctx !== "number" || !Number.isInteger(ctx) || ctx < 1)
    return `expected a positive integer, got ${String(ctx)}`;
  if (config.maxPositionEmbeddings !== undefined && ctx > config.maxPositionEmbeddings) {
    return `${ctx} exceeds the model's max_position_embeddings (${config.maxPositionEmbeddings})`;
  }
  return undefined;
}

/** Fills defaults and checks ranges against the model. */
export function resolveOptions(
  config: Qwen35Config,
  spec: ComponentSpec,
  options: BuildOptions,
): ResolvedOptions {
  const ctx = options.ctx;
  const problem = ctxProblem(ctx, config);
  if (problem) throw new GraphOptionError("ctx", problem);
  const dtype = options.dtype ?? "fp16";
  if (dtype !== "fp16" && dtype !== "fp32")
    throw new GraphOptionError("dtype", `expected "fp16" or "fp32", got ${String(dtype)}`);
  const state = options.state ?? "io";
  if (state !== "io" && state !== "mlstate")
    throw new GraphOptionError("state", `expected "io" or "mlstate", got ${String(state)}`);
  const attention = options.attention ?? "matmul";
  if (!ATTENTION_CORES.includes(attention))
    throw new GraphOptionError(
      "attention",
      `expected ${ATTENTION_CORES.join(", ")}, got ${String(attention)}`,
    );
  const lmHeadMaxRows = positiveInt("lmHeadMaxRows", options.lmHeadMaxRows ?? DEFAULT_LM_HEAD_MAX_ROWS);
  const mlpMaxChannels = positiveInt("mlpMaxChannels", options.mlpMaxChannels ?? ANE_MAX_DIM);
  if (options.quant?.groupSize !== undefined) positiveInt("quant.groupSize", options.quant.groupSize);
  const prefillBatch = options.prefillBatch ?? 0;
  if (prefillBatch !== 0) positiveInt("prefillBatch", prefillBatch);
  if (prefillBatch > ctx)
    throw new GraphOptionError("prefillBatch", `${prefillBatch} tokens a call exceed the context of ${ctx}`);
  const gdnPrefill = options.gdnPrefill ?? "chunked";
  if (!GDN_PREFILL_FORMS.includes(gdnPrefill))
    throw new GraphOptionError("gdnPrefill", `expected "chunked" or "scan", got ${String(gdnPrefill)}`);
  const wyChunk = positiveInt("wyChunk", options.wyChunk ?? DEFAULT_WY_CHUNK);
  if (spec.kind === "superblocks") {
    const n = config.superBlocks.length;
    positiveInt("spec.count", spec.count);
    if (!Number.isInteger(spec.first) || spec.first < 0 || spec.first + spec.count > n) {
      throw new GraphOptionError(
        "spec.first",
        `super-blocks ${spec.first}..${spec.first + spec.count - 1} are outside the model's ${n} (0..${n - 1})`,
      );
    }
  } else if (spec.kind !== "embed" && spec.kind !== "lm_head") {
    throw new GraphOptionError(
      "spec.kind",
      `expected "embed", "superblocks" or "lm_head", got ${String((spec as { kind: unknown }).kind)}`,
    );
  }
  return {
    ctx,
    dtype,
    state,
    attention,
    quant: options.quant ?? PLAIN_POLICY,
    argmax: options.argmax ?? false,
    lmHeadMaxRows,
    mlpMaxChannels,
    prefillBatch,
    gdnPrefill,
    wyChunk,
  };
}
