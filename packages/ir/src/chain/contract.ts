/**
 * The contract between a converted chain and whoever runs it (runtime-ane, the converter's tests,
 * costplan): model.json's schema, and every component input, output and state with its shape,
 * dtype and role, so that a runner binds buffers without guessing from names.
 *
 * The per-step protocol for one decode token at position p (0 ≤ p < ctx):
 *   embed:        input_ids = [[token]]                              → hidden
 *   superblocks:  hidden, rope_cos / rope_sin (the host's RoPE angles for p: rope.ts), mask (see
 *                 MaskRule), position = [p] (mlstate KV only: where the state row is written; packages
 *                 of earlier converters take it in every placement and gather RoPE by it), and per layer
 *                   gdn{L}_conv / gdn{L}_rec  (zeros at sequence start) → gdn{L}_conv_out / gdn{L}_rec_out,
 *                   which replace them for the next step;
 *                 io KV:      kv{L}_k / kv{L}_v [1, Hkv, ctx, hd] (rows < p valid) → kv{L}_k_new / kv{L}_v_new
 *                             [1, Hkv, 1, hd], which the host writes into its cache at row p;
 *                 mlstate KV: the package's state `kv` (zeros at sequence start), updated in place;
 *                                                                       → hidden_out (the next package's hidden)
 *   superblocks, prefill function (model.json's component.prefill, T tokens a call): the same
 *                 with hidden [1, D, 1, T] for tokens at p … p+T-1 (after a short chunk's n tokens,
 *                 copies of row n − 1: finite, so fp16 norms stay finite; see hiddenRows), rope rows for those positions, mask by the "prefill" rule, valid and
 *                 conv_pick (prefillInputs) → hidden_out [1, D, 1, T], the states after the chunk's
 *                 last real token, and kv{L}_*_new [1, Hkv, T, hd] (all T rows; p + T ≤ ctx). It
 *                 shares the decode function's weights and kept buffers.
 *   lm_head:      hidden → logits_0..k-1 (piece i covers vocab rows [rowOffset_i, rowOffset_i + rows_i)),
 *                 or argmax_idx / argmax_val [k]: per-piece top-1 index (within the piece) and value;
 *                 the token is rowOffset_i + argmax_idx[i] for the i with the largest argmax_val
 *                 (the first such i on ties).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { AnemllError, InvalidArgumentError } from "@anemll-qwen35/core";
import { z } from "zod";

export type ComponentKind = "embed" | "superblocks" | "lm_head" | "mtp";
export type GraphDType = "fp16" | "fp32";
export type KvPlacement = "io" | "mlstate";
export type IoDType = "fp16" | "fp32" | "int32";

/** fp16's lowest finite value: the additive mask for keys a query must not see. */
export const MASK_NEG = -65504;

/**
 * How the host fills `mask` at position p (additive; MASK_NEG for hidden keys):
 *   "io":      keys = ctx + 1 (the cached rows — the host's cache, or the KV state as read before
 *              this step writes its row — then this token's own row):
 *              mask[j] = 0 for j < p and for j = ctx, MASK_NEG otherwise. The converter writes it
 *              for both KV placements.
 *   "mlstate": keys = ctx (the state rows, this token's row already written at p):
 *              mask[j] = 0 for j ≤ p, MASK_NEG otherwise. Written by earlier converter builds for
 *              mlstate packages; still run.
 *   "prefill": T query rows, keys = ctx + T (the cached rows, then the chunk's T rows):
 *              mask[i][j] = 0 for j < p and for j = ctx + i' with i' ≤ i, MASK_NEG otherwise.
 */
export type MaskRule = "io" | "mlstate" | "prefill";

export type IoRole =
  | { readonly kind: "input_ids" }
  | { readonly kind: "hidden_in" }
  | { readonly kind: "hidden_out" }
  | { readonly kind: "position" }
  /** RoPE cos or sin of this step's positions, [1, 1, T, rotaryDim / 2] (ir/chain's ropeCosSin). */
  | {
      readonly kind: "rope";
      readonly part: "cos" | "sin";
      readonly rotaryDim: number;
      readonly theta: number;
    }
  | { readonly kind: "mask"; readonly rule: MaskRule; readonly keys: number; readonly maskValue: number }
  /**
   * mlstate KV: the bounds [4] of the step's one write into the state `kv`, fed by the host so the
   * function holds no int32 arithmetic: begin = [0, 0, row, 0], end = [rows[0], rows[1], row +
   * rows[2], rows[3]], `rows` the shape of the rows written ([2n, Hkv, T, hd]).
   */
  | { readonly kind: "kv_write"; readonly bound: "begin" | "end"; readonly rows: readonly number[] }
  /** Prefill: [1, 1, T, 1], 1 for the chunk's real tokens, 0 for the rows after them. */
  | { readonly kind: "valid" }
  /** Prefill: [1, T + K − 1, K − 1] one-hot, picks the GDN conv window after the last real token. */
  | { readonly kind: "conv_pick" }
  /**
   * Verify function: [T + 1] one-hot, which state the step starts from — 0: the kept state
   * (gdn{L}_conv / gdn{L}_rec), j + 1: row j of the last verify's per-row states (its accepted end).
   */
  | { readonly kind: "row_select" }
  /**
   * Verify function: every row's GDN state after that row, [T, …] (`part` conv window or recurrent
   * state, the latter holding `scale`·S); the `_out` replaces the `_in` of the next verify.
   */
  | { readonly kind: "gdn_rows_in"; readonly layer: number; readonly part: "conv" | "rec" }
  | {
      readonly kind: "gdn_rows_out";
      readonly layer: number;
      readonly part: "conv" | "rec";
      readonly next: string;
    }
  /** MTP head: [1, D, 1, 1] the embedding of the token after the hidden state's position. */
  | { readonly kind: "embedding" }
  /**
   * [1, 1, 1, T] per row, 1 when the hidden row is already normed (the MTP head's own output),
   * 0 when it is the trunk's pre-norm state (the component applies the final norm).
   */
  | { readonly kind: "normed" }
  /** GDN conv window: the last 3 pre-conv in_proj_qkv columns. `next` is the input an output replaces. */
  | { readonly kind: "gdn_conv_in"; readonly layer: number }
  | { readonly kind: "gdn_conv_out"; readonly layer: number; readonly next: string }
  /** GDN recurrent state [1, Hv, dk, dv]; it holds `scale`·S (S of the reference model). */
  | { readonly kind: "gdn_rec_in"; readonly layer: number; readonly scale: number }
  | { readonly kind: "gdn_rec_out"; readonly layer: number; readonly scale: number; readonly next: string }
  /** io KV: the host's cache for one attention layer (rows < position valid). */
  | { readonly kind: "kv_cache"; readonly layer: number; readonly part: "k" | "v" }
  /** io KV: this token's row (post-norm, post-RoPE k; raw v); write it into `cache` at row `position`. */
  | {
      readonly kind: "kv_new";
      readonly layer: number;
      readonly part: "k" | "v";
      readonly cache: string;
      readonly writeRow: "position";
    }
  /** mlstate KV: `kv` [2·n, Hkv, ctx, hd]; row r holds one layer's K or V. */
  | {
      readonly kind: "kv_state";
      readonly rows: readonly { readonly row: number; readonly layer: number; readonly part: "k" | "v" }[];
    }
  | { readonly kind: "logits"; readonly piece: number; readonly rowOffset: number; readonly rows: number }
  | { readonly kind: "argmax_idx"; readonly rowOffsets: readonly number[] }
  | { readonly kind: "argmax_val"; readonly rowOffsets: readonly number[] };

export interface IoTensor {
  readonly name: string;
  readonly dtype: IoDType;
  readonly shape: readonly number[];
  readonly role: IoRole;
}

export interface LmHeadPiece {
  readonly rowOffset: number;
  readonly rows: number;
}

export interface ComponentIO {
  readonly component: ComponentKind;
  readonly dtype: GraphDType;
  readonly ctx: number;
  readonly state: KvPlacement;
  /** Decoder layers inside (superblocks only; global indices). */
  readonly layers: readonly number[];
  /** Super-block indices inside (superblocks only). */
  readonly superBlocks: readonly number[];
  readonly inputs: readonly IoTensor[];
  readonly outputs: readonly IoTensor[];
  /** Core ML states (mlstate KV only). */
  readonly states: readonly IoTensor[];
  /** lm_head only: the vocabulary split and whether the outputs are the argmax pair. */
  readonly lmHead?: {
    readonly vocab: number;
    readonly pieces: readonly LmHeadPiece[];
    readonly argmax: boolean;
    /** The verify-rows function: hidden rows scored a call (logits [T, rows_i], argmax pairs [T, k]). */
    readonly rows?: number;
  };
  /** Facts a runtime or a reader of model.json must know (e.g. the GDN state scaling). */
  readonly notes: readonly string[];
}

/** The mask for one step at `position`, as float values (cast to the mask dtype by the host). */
export function decodeMask(rule: MaskRule, ctx: number, position: number): Float32Array {
  if (!Number.isInteger(position) || position < 0 || position >= ctx) {
    throw new InvalidArgumentError(`position ${position} is outside the context [0, ${ctx})`);
  }
  if (rule === "io") {
    const m = new Float32Array(ctx + 1).fill(MASK_NEG);
    m.fill(0, 0, position);
    m[ctx] = 0;
    return m;
  }
  const m = new Float32Array(ctx).fill(MASK_NEG);
  m.fill(0, 0, position + 1);
  return m;
}

/**
 * Ring-buffer KV (a runner's context overflow "ring"): the KV row of the token at `position`.
 * Rows [0, sinks) keep the first `sinks` tokens for good (attention sinks); from `ctx` on, the
 * other rows are reused in turn, so the cache holds the sinks and the most recent ctx − sinks
 * tokens. Below ctx it is the position itself.
 */
export function ringRow(ctx: number, sinks: number, position: number): number {
  checkRing(ctx, sinks, position);
  return position < ctx ? position : sinks + ((position - sinks) % (ctx - sinks));
}

/**
 * The mask for the token at `position` with ring-buffer KV (see ringRow): below ctx, decodeMask;
 * from ctx on every cache row holds a token of the window, except (io) the row this token's K/V
 * will replace — its token has just left the window — so each query sees the sinks and the most
 * recent ctx − sinks tokens, itself included.
 */
export function ringMask(rule: MaskRule, ctx: number, sinks: number, position: number): Float32Array {
  checkRing(ctx, sinks, position);
  if (position < ctx) return decodeMask(rule, ctx, position);
  if (rule === "mlstate") return new Float32Array(ctx);
  const m = new Float32Array(ctx + 1);
  m[ringRow(ctx, sinks, position)] = MASK_NEG;
  return m;
}

function checkRing(ctx: number, sinks: number, position: number): void {
  if (!Number.isInteger(sinks) || sinks < 0 || sinks >= ctx)
    throw new InvalidArgumentError(`ring KV: sinks must be an integer in [0, ${ctx}), got ${sinks}`);
  if (!Number.isInteger(position) || position < 0)
    throw new InvalidArgumentError(`position ${position} is not a non-negative integer`);
}

/**
 * The prefill mask [T, ctx + T] for a chunk of `n` ≤ T real tokens at `position` (row i: cache
 * rows < position, chunk keys ≤ i). The chunk's real rows must fit: position + n ≤ ctx.
 */
export function prefillMask(ctx: number, tokens: number, position: number, n = tokens): Float32Array {
  if (!Number.isInteger(position) || position < 0 || position + n > ctx) {
    throw new InvalidArgumentError(
      `a prefill chunk of ${n} at position ${position} does not fit the context of ${ctx}`,
    );
  }
  const keys = ctx + tokens;
  const m = new Float32Array(tokens * keys).fill(MASK_NEG);
  for (let i = 0; i < tokens; i++) {
    m.fill(0, i * keys, i * keys + position);
    m.fill(0, i * keys + ctx, i * keys + ctx + i + 1);
  }
  return m;
}

/**
 * The prefill mask of a chunk at `position` ≥ ctx with ring-buffer KV (see ringRow; the chunk's n
 * rows do not wrap): query i sees the sinks, the cached tokens still in its window and the chunk's
 * keys ≤ i. The cache rows ringRow(position + j), j ≤ i, hold the tokens that left query i's
 * window (each row is the one token position + j replaces), so they are hidden.
 */
export function ringPrefillMask(ctx: number, sinks: number, tokens: number, position: number): Float32Array {
  if (position < ctx) return prefillMask(ctx, tokens, position, Math.min(tokens, ctx - position));
  const row = ringRow(ctx, sinks, position);
  const keys = ctx + tokens;
  const m = new Float32Array(tokens * keys);
  for (let i = 0; i < tokens; i++) {
    m.fill(MASK_NEG, i * keys + row, i * keys + Math.min(ctx, row + i + 1));
    m.fill(MASK_NEG, i * keys + ctx + i + 1, (i + 1) * keys);
  }
  return m;
}

/** The bounds of an mlstate KV write at `row` (role kv_write: [0, 0, row, 0] or the end). */
export function kvWriteBound(
  role: { bound: "begin" | "end"; rows: readonly number[] },
  row: number,
): Int32Array {
  return Int32Array.from(role.rows, (d, i) =>
    i === 2 ? row + (role.bound === "end" ? d : 0) : role.bound === "end" ? d : 0,
  );
}

/**
 * The valid [T] and conv_pick [(T + K − 1) × (K − 1)] inputs of a prefill chunk holding `n`
 * real tokens (1 ≤ n ≤ T), K the GDN conv kernel width.
 */
export function prefillChunkInputs(
  tokens: number,
  n: number,
  kernel: number,
): { valid: Float32Array; convPick: Float32Array } {
  if (!Number.isInteger(n) || n < 1 || n > tokens)
    throw new InvalidArgumentError(`a prefill chunk of ${tokens} holds 1 … ${tokens} tokens, not ${n}`);
  const valid = new Float32Array(tokens).fill(1, 0, n);
  const k1 = kernel - 1;
  const convPick = new Float32Array((tokens + k1) * k1);
  for (let c = 0; c < k1; c++) convPick[(n + c) * k1 + c] = 1;
  return { valid, convPick };
}

/** The vocabulary id picked by an argmax-mode lm_head (largest value; first piece on ties). */
export function argmaxToken(
  rowOffsets: readonly number[],
  idx: ArrayLike<number>,
  val: ArrayLike<number>,
): number {
  let best = 0;
  for (let i = 1; i < rowOffsets.length; i++) if (val[i] > val[best]) best = i;
  return rowOffsets[best] + idx[best];
}

// ---------------------------------------------------------------------------------------------
// model.json

export const CHAIN_FORMAT = "anemll-qwen35.chain";
export const CHAIN_FORMAT_VERSION = 1;
export const CHAIN_MANIFEST_FILE = "model.json";

const ioTensorSchema = z.object({
  name: z.string().min(1),
  dtype: z.enum(["fp16", "fp32", "int32"]),
  shape: z.array(z.number().int().nonnegative()),
  role: z.object({ kind: z.string() }).passthrough(),
});

const componentIoSchema = z.object({
  component: z.enum(["embed", "superblocks", "lm_head", "mtp"]),
  dtype: z.enum(["fp16", "fp32"]),
  ctx: z.number().int().positive(),
  state: z.enum(["io", "mlstate"]),
  layers: z.array(z.number().int().nonnegative()),
  superBlocks: z.array(z.number().int().nonnegative()),
  inputs: z.array(ioTensorSchema),
  outputs: z.array(ioTensorSchema),
  states: z.array(ioTensorSchema),
  lmHead: z
    .object({
      vocab: z.number().int().positive(),
      pieces: z.array(
        z.object({ rowOffset: z.number().int().nonnegative(), rows: z.number().int().positive() }),
      ),
      argmax: z.boolean(),
      rows: z.number().int().positive().optional(),
    })
    .optional(),
  notes: z.array(z.string()),
});

const chainFunctionSchema = z.object({
  family: z.string().min(1),
  ctx: z.number().int().positive(),
  function: z.string().min(1),
  tokens: z.number().int().positive(),
  io: componentIoSchema,
});

const componentSchema = z.object({
  name: z.string().min(1),
  kind: z.enum(["embed", "superblocks", "lm_head", "mtp"]),
  file: z.string().regex(/^[^/\\]+\.mlpackage$/, "a .mlpackage file name inside the model folder"),
  function: z.string().min(1),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  io: componentIoSchema,
  prefill: z
    .object({ function: z.string().min(1), tokens: z.number().int().positive(), io: componentIoSchema })
    .optional(),
  /**
   * Every function of the package (super-blocks): its family ("decode", "prefill", "verify", or
   * another a newer converter adds), its context bucket and tokens per call. Absent in folders written before
   * context buckets: `function` and `prefill` at ctx are the whole table.
   */
  functions: z.array(chainFunctionSchema).optional(),
  /** Super-blocks and lm_head of a chain with an MTP head: the verify function (k + 1 rows a call). */
  verify: z
    .object({ function: z.string().min(1), tokens: z.number().int().positive(), io: componentIoSchema })
    .optional(),
});

export const chainManifestSchema = z.object({
  format: z.literal(CHAIN_FORMAT),
  formatVersion: z.literal(CHAIN_FORMAT_VERSION),
  converter: z.object({ name: z.string(), version: z.string() }),
  source: z.object({ model: z.string(), revision: z.string().optional(), configSha256: z.string() }),
  model: z.object({
    modelType: z.string(),
    hiddenSize: z.number().int().positive(),
    numLayers: z.number().int().positive(),
    vocabSize: z.number().int().positive(),
    superBlocks: z.number().int().positive(),
    tiedEmbeddings: z.boolean(),
  }),
  ctx: z.number().int().positive(),
  /**
   * The context buckets, ascending, the last one ctx: every super-block package carries its
   * functions at each of these KV lengths over one KV store sized for ctx (absent: [ctx]).
   */
  buckets: z.array(z.number().int().positive()).min(1).optional(),
  fuse: z.union([z.number().int().positive(), z.literal("all")]),
  state: z.enum(["io", "mlstate"]),
  dtype: z.enum(["fp16", "fp32"]),
  /** The super-blocks' attention core (absent in folders written before it was a choice: sdpa). */
  attention: z.enum(["matmul", "sdpa"]).optional(),
  /**
   * Every super-block package's prefill function: tokens per call and its GDN form (absent:
   * decode only). Each component's `prefill` says how to call it.
   */
  prefill: z.object({ tokens: z.number().int().positive(), gdn: z.enum(["chunked", "scan"]) }).optional(),
  /**
   * Speculative decoding with the checkpoint's MTP head (absent: converted without it): the head's
   * package (`mtp`; the lm_head's verify function scores its output) and k, the most drafts one
   * verify call takes (every super-block and lm_head package's verify function has k + 1 rows).
   */
  speculative: z.object({ draftTokens: z.number().int().min(1).max(4), mtp: componentSchema }).optional(),
  quantization: z.object({
    /** One encoding for every super-block projection, or "mixed" (see `encodings`). */
    body: z.string(),
    lmHead: z.string(),
    embed: z.string(),
    groupSize: z.number().int(),
    /** The quantization policy as the converter took it: preset, then pattern=encoding rules. */
    policy: z.string().optional(),
    /** What the policy gave each tensor role (or canonical tensor, where a role's tensors differ). */
    encodings: z.record(z.string(), z.string()).optional(),
  }),
  argmax: z.boolean(),
  /** How the lm_head's vocabulary split was chosen (absent: a fixed row limit). */
  lmHeadSplit: z
    .object({
      maxRows: z.number().int().positive(),
      pieces: z.number().int().positive(),
      chosenBy: z.enum(["coreml-measured", "costplan-estimate"]),
      /** Every candidate of the sweep: its row limit, pieces, prediction ms, ops placed off the ANE. */
      candidates: z.array(
        z.object({
          maxRows: z.number().int().positive(),
          pieces: z.number().int().positive(),
          ms: z.number().finite().nonnegative(),
          offAne: z.number().int().nonnegative(),
        }),
      ),
    })
    .optional(),
  components: z.array(componentSchema).min(3),
  tokenizer: z.object({
    files: z.array(z.string()),
    eosTokenIds: z.array(z.number().int().nonnegative()),
    chatTemplate: z.string().optional(),
  }),
});

/** model.json's `lmHeadSplit`: the auto-tuned lm_head split and its sweep. */
export type LmHeadSplit = NonNullable<z.infer<typeof chainManifestSchema>["lmHeadSplit"]>;

export interface ChainManifestComponent {
  readonly name: string;
  readonly kind: ComponentKind;
  readonly file: string;
  /** The function a token-by-token step calls (the package's default function). */
  readonly function: string;
  readonly sha256: string;
  readonly io: ComponentIO;
  /** A super-block package's prefill function (T tokens a call, same weights and kept buffers). */
  readonly prefill?: PrefillFunction;
  /** Every function of the package by family and bucket (see chainFunctions). */
  readonly functions?: readonly ChainFunction[];
  /** The verify function of a chain with an MTP head (k + 1 rows a call, same weights). */
  readonly verify?: PrefillFunction;
}

/**
 * The function families a runner calls: one token a call, T tokens a call, and (chains with an MTP
 * head) the verify's k + 1 rows a call.
 */
export const DECODE_FAMILY = "decode";
export const PREFILL_FAMILY = "prefill";
export const VERIFY_FAMILY = "verify";

/** One function of a package: a family at one context bucket (ctx KV rows read), `tokens` a call. */
export interface ChainFunction {
  readonly family: string;
  readonly ctx: number;
  readonly function: string;
  readonly tokens: number;
  readonly io: ComponentIO;
}

/** The context buckets of a chain, ascending (model.json's `buckets`; [ctx] before buckets). */
export function chainBuckets(m: Pick<ChainManifest, "ctx" | "buckets">): readonly number[] {
  return m.buckets ?? [m.ctx];
}

/**
 * A component's function table: model.json's `functions`, or (folders written before context
 * buckets, and embed / lm_head) its `function`, `prefill` and `verify` at the chain's ctx. A table
 * written before verify functions were made per bucket has `verify` at its largest bucket only.
 */
export function chainFunctions(c: ChainManifestComponent, ctx: number): readonly ChainFunction[] {
  const table: ChainFunction[] = c.functions
    ? [...c.functions]
    : [{ family: DECODE_FAMILY, ctx, function: c.function, tokens: 1, io: c.io }];
  if (!c.functions && c.prefill) table.push({ family: PREFILL_FAMILY, ctx, ...c.prefill });
  if (c.verify && !table.some((f) => f.family === VERIFY_FAMILY)) {
    const top = Math.max(...table.map((f) => f.ctx));
    table.push({ family: VERIFY_FAMILY, ctx: top, ...c.verify });
  }
  return table;
}

/** A package's batched function: `tokens` positions a call (see the protocol above). */
export interface PrefillFunction {
  readonly function: string;
  readonly tokens: number;
  readonly io: ComponentIO;
}

export type ChainManifest = Omit<z.infer<typeof chainManifestSchema>, "components" | "speculative"> & {
  readonly components: readonly ChainManifestComponent[];
  readonly speculative?: { readonly draftTokens: number; readonly mtp: ChainManifestComponent };
};

/** A component broke the contract (an output it promised is missing, an input has no buffer). */
export class ChainProtocolError extends AnemllError {
  readonly component: string;
  constructor(component: string, message: string) {
    super("E_CHAIN_PROTOCOL", `${component}: ${message}`);
    this.component = component;
  }
}

/** model.json is missing, not JSON, or does not match the schema; `field` names the first problem. */
export class ChainManifestError extends AnemllError {
  readonly file: string;
  readonly field: string | undefined;
  constructor(file: string, message: string, field?: string, options?: { cause?: unknown }) {
    super("E_CHAIN_MANIFEST", `${file}: ${message}`, options);
    this.file = file;
    this.field = field;
  }
}

export function parseChainManifest(json: unknown, file = CHAIN_MANIFEST_FILE): ChainManifest {
  // A newer converter's output may differ anywhere: say so before judging the rest.
  const head = json as {
    format?: unknown;
    formatVersion?: unknown;
    converter?: { version?: unknown };
  } | null;
  if (
    head?.format === CHAIN_FORMAT &&
    typeof head.formatVersion === "number" &&
    head.formatVersion > CHAIN_FORMAT_VERSION
  ) {
    const by =
      typeof head.converter?.version === "string" ? ` (written by converter ${head.converter.version})` : "";
    throw new ChainManifestError(
      file,
      `format version ${head.formatVersion}${by} is newer than this runtime understands (up to ${CHAIN_FORMAT_VERSION}); ` +
        "update @anemll-qwen35 (runtime-ane / the CLI), or convert the model again with this version",
      "formatVersion",
    );
  }
  const r = chainManifestSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0];
    const field = issue.path.join(".");
    throw new ChainManifestError(file, `${field || "(root)"}: ${issue.message}`, field);
  }
  const m = r.data as unknown as ChainManifest;
  const kinds = m.components.map((c) => c.kind);
  if (
    kinds[0] !== "embed" ||
    kinds.at(-1) !== "lm_head" ||
    kinds.slice(1, -1).some((k) => k !== "superblocks")
  ) {
    throw new ChainManifestError(
      file,
      "components must be embed, then super-blocks, then lm_head",
      "components",
    );
  }
  // the top-level ctx is what runtimes advertise; the packages were built for their io's
  for (const [i, c] of m.components.entries()) {
    if (c.io.ctx !== m.ctx) {
      throw new ChainManifestError(
        file,
        `ctx ${m.ctx} disagrees with component ${c.name}, built for ${c.io.ctx} tokens (was model.json edited? ` +
          "convert again for another context length)",
        `components.${i}.io.ctx`,
      );
    }
  }
  const buckets = chainBuckets(m);
  if (buckets.some((b, i) => i > 0 && b <= buckets[i - 1]) || buckets.at(-1) !== m.ctx)
    throw new ChainManifestError(
      file,
      `buckets [${buckets.join(", ")}] must ascend and end at ctx ${m.ctx}`,
      "buckets",
    );
  for (const [i, c] of m.components.entries()) {
    for (const [j, f] of (c.functions ?? []).entries()) {
      if (!buckets.includes(f.ctx) || f.io.ctx !== f.ctx)
        throw new ChainManifestError(
          file,
          `function ${f.function} is built for ${f.io.ctx} tokens, not one of the buckets [${buckets.join(", ")}]`,
          `components.${i}.functions.${j}.ctx`,
        );
    }
  }
  const badEos = m.tokenizer.eosTokenIds.find((id) => id >= m.model.vocabSize);
  if (badEos !== undefined) {
    throw new ChainManifestError(
      file,
      `tokenizer.eosTokenIds: ${badEos} is outside the vocabulary (0..${m.model.vocabSize - 1})`,
      "tokenizer.eosTokenIds",
    );
  }
  const vocab = m.components.at(-1)?.io.lmHead?.vocab;
  if (vocab !== undefined && vocab !== m.model.vocabSize) {
    throw new ChainManifestError(
      file,
      `model.vocabSize ${m.model.vocabSize} disagrees with the lm_head's ${vocab} rows`,
      "model.vocabSize",
    );
  }
  return m;
}

/** Reads and validates `<dir>/model.json`. */
export async function readChainManifest(dir: string): Promise<ChainManifest> {
  const file = join(dir, CHAIN_MANIFEST_FILE);
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new ChainManifestError(
      file,
      "not found — is this a folder written by `anemll-qwen35 convert`?",
      undefined,
      {
        cause: err,
      },
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ChainManifestError(file, `not valid JSON (${(err as Error).message})`, undefined, {
      cause: err,
    });
  }
  return parseChainManifest(json, file);
}
