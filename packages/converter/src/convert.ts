/**
 * convert(): a Qwen3.5 checkpoint (folder or hf: reference) → a folder that runtime-ane runs:
 * embed.mlpackage, sb_*.mlpackage (super-blocks, fused per the plan), lm_head.mlpackage, the
 * tokenizer files and model.json.
 *
 * Atomicity: everything is written into `<out>.partial/` (each package itself atomically), and the
 * folder is renamed to `<out>` only once model.json is complete — an interrupted conversion never
 * leaves a folder that looks finished. `resume` keeps `<out>.partial/`, skips every component
 * whose recorded build key and package digest still match, and takes the finished k-means
 * weights of the package that was being built from its journal (resume.ts).
 *
 * Speed: one k-means worker pool for the whole conversion; weights are written behind, while the
 * next tensor is clustered; progress is reported per tensor.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { AnemllError, numel } from "@anemll-qwen35/core";
import {
  CHAIN_FORMAT,
  CHAIN_FORMAT_VERSION,
  type ChainManifest,
  type ChainManifestComponent,
} from "@anemll-qwen35/ir/chain";
import {
  Qwen35Checkpoint,
  type Qwen35Config,
  qwen35Parameters,
  resolveModelRef,
  writeFileAtomic,
} from "@anemll-qwen35/ir/checkpoint";
import { digestMlPackage, MlPackageWriter } from "@anemll-qwen35/ir/mil";
import { ATTENTION_FORMS, type AttentionForm } from "./graph/attention.js";
import { assertConvertible, buildComponent } from "./graph/component.js";
import { GraphOptionError } from "./graph/errors.js";
import { GDN_PREFILL_FORMS, type GdnPrefillForm } from "./graph/gdn-chunked.js";
import type { GraphDType, KvPlacement } from "./graph/io.js";
import { ctxProblem, DEFAULT_LM_HEAD_MAX_ROWS } from "./graph/options.js";
import {
  DEFAULT_LUT_GROUP_SIZE,
  describePolicy,
  formatQuantSpec,
  formatWeightQuant,
  lutGroupSize,
  parseQuantSpec,
  patternMatches,
  type QuantPolicy,
  type QuantRule,
  type QuantSpec,
  quantFor,
  specRules,
  unmatchedPatterns,
  type WeightQuant,
  type WeightTarget,
} from "./graph/quant.js";
import type { WeightEncodingReport } from "./graph/weights.js";
import { KmeansPool } from "./kmeans-pool.js";
import { type LmHeadSplit, tuneLmHeadSplit } from "./lmhead-split.js";
import { checkOutputTarget, OutputError, PARTIAL_MARKER, swapIntoPlace } from "./output.js";
import { DEFAULT_BUDGET_BYTES, type PlannedComponent, planComponents, planWarnings } from "./plan.js";
import { removeResumeFolder, TensorJournal } from "./resume.js";
import { checkTokenizerFiles } from "./tokenizer-check.js";

export { OutputError } from "./output.js";

export const CONVERTER_VERSION = "0.1.0";
export const MIN_CTX = 128;
export const MAX_CTX = 4096;
export const DEFAULT_CTX = 256;
/** Tokens per prefill call (ANEMLL's batch; costplan: notes/prefill-gdn-forms.md). */
export const DEFAULT_PREFILL_BATCH = 64;

export interface ConvertOptions {
  /** Local checkpoint folder or `hf:owner/name[@revision]`. */
  model: string;
  /** Output folder (created; replaced only when the new conversion is complete). */
  out: string;
  /** Context length, 128 … 4096 (default 256). */
  ctx?: number;
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
   * How each weight is stored: a preset and rules (graph/quant.ts), as text
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

export interface ConvertResult {
  readonly out: string;
  readonly manifest: ChainManifest;
  /** Components reused whole from an interrupted conversion. */
  readonly skipped: readonly string[];
  /** Weights reused from the package an interrupted conversion was building. */
  readonly reusedWeights: readonly string[];
  readonly weights: readonly WeightEncodingReport[];
  readonly seconds: number;
}

/** The conversion was stopped (its signal aborted); what was finished is kept for `resume`. */
export class ConvertInterruptedError extends AnemllError {
  /** The folder holding the finished packages and weights. */
  readonly partial: string;
  constructor(partial: string, finished: { components: number; weights: number }) {
    const kept =
      finished.components + finished.weights > 0
        ? `${finished.components} finished package(s) and ${finished.weights} finished weight(s) of the next are kept in ${partial}`
        : `the work so far is kept in ${partial}`;
    super(
      "E_INTERRUPTED",
      `conversion interrupted; ${kept} — run the same command with --resume to continue`,
    );
    this.partial = partial;
  }
}

export class ConvertOptionError extends AnemllError {
  readonly option: string;
  constructor(option: string, message: string) {
    super("E_CONVERT_OPTION", `--${option} ${message}`);
    this.option = option;
  }
}

const TOKENIZER_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "chat_template.jinja",
  "generation_config.json",
];
const PARTIAL_RECORD = "components.partial.json";
/** Bytes of weights queued for writing while the next tensor is clustered (one 9B lm_head piece fits). */
const WRITE_BEHIND_BYTES = 64 << 20;

/**
 * Rough cost per weight element of each encoding relative to a plain copy, measured on the
 * synthetic 0.8B (bench/convert-synthetic.ts): progress and its ETA follow the work, not bytes.
 */
function workPerElement(q: WeightQuant): number {
  if (q.kind === "lut") return q.bits <= 4 ? 60 : 25;
  return q.kind === "int8" ? 4 : 1;
}

/** Estimated work of a component: its weights' elements times their encodings' cost. */
function componentWork(config: Qwen35Config, c: PlannedComponent, r: ResolvedConvert): number {
  const vocab = config.vocabSize * config.hiddenSize;
  if (c.kind === "embed")
    return vocab * workPerElement(quantFor(r.quant, { canonical: "embed", role: "embed" }));
  if (c.kind === "lm_head")
    return vocab * workPerElement(quantFor(r.quant, { canonical: "lm_head", role: "lm_head" }));
  let work = 0;
  for (const p of qwen35Parameters(config, { tied: true })) {
    if (p.layer < c.layers[0] || p.layer >= c.layers[1]) continue;
    work += numel(p.shape) * (p.kind === "projection" ? workPerElement(quantFor(r.quant, p)) : 1);
  }
  return work;
}

interface ResolvedConvert {
  ctx: number;
  fuse: number | "all";
  budgetBytes: number;
  state: KvPlacement;
  dtype: GraphDType;
  attention: AttentionForm;
  prefillBatch: number;
  gdnPrefill: GdnPrefillForm;
  /** The policy as written down (preset, shorthands, rules) and the rules it resolves to. */
  quantSpec: QuantSpec;
  quant: QuantPolicy;
  argmax: boolean;
  lmHeadMaxRows: number;
  /** lmHeadMaxRows is to be chosen by tuneLmHeadSplit (then replaced by its choice). */
  lmHeadAuto: boolean;
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

function resolveOptions(o: ConvertOptions): ResolvedConvert {
  const ctx = o.ctx ?? DEFAULT_CTX;
  const fuse = o.fuse ?? "all";
  if (fuse !== "all" && (!Number.isInteger(fuse) || fuse < 1)) {
    throw new ConvertOptionError("fuse", `must be a positive integer or "all", got ${fuse}`);
  }
  const budgetBytes = o.budgetBytes ?? DEFAULT_BUDGET_BYTES;
  if (!(budgetBytes > 0)) throw new ConvertOptionError("budget", `must be positive, got ${budgetBytes}`);
  const groupSize = o.groupSize ?? DEFAULT_LUT_GROUP_SIZE;
  if (!Number.isInteger(groupSize) || groupSize < 1) {
    throw new ConvertOptionError("group-size", `must be a positive integer, got ${groupSize}`);
  }
  const attention = o.attention ?? "matmul";
  if (!ATTENTION_FORMS.includes(attention)) {
    throw new ConvertOptionError("attention", `must be ${ATTENTION_FORMS.join(" or ")}, got ${attention}`);
  }
  const prefillBatch = o.prefillBatch ?? DEFAULT_PREFILL_BATCH;
  if (!Number.isInteger(prefillBatch) || prefillBatch < 0 || prefillBatch > MIN_CTX) {
    throw new ConvertOptionError(
      "prefill-batch",
      `must be an integer from 0 (decode only) to ${MIN_CTX}, got ${prefillBatch}`,
    );
  }
  const gdnPrefill = o.gdnPrefill ?? "chunked";
  if (!GDN_PREFILL_FORMS.includes(gdnPrefill)) {
    throw new ConvertOptionError(
      "gdn-prefill",
      `must be ${GDN_PREFILL_FORMS.join(" or ")}, got ${gdnPrefill}`,
    );
  }
  const quantSpec = resolveQuantSpec(o);
  return {
    ctx,
    fuse,
    budgetBytes,
    state: o.state ?? "io",
    dtype: o.dtype ?? "fp16",
    attention,
    prefillBatch,
    gdnPrefill,
    quantSpec,
    quant: { rules: specRules(quantSpec), groupSize },
    argmax: o.argmax ?? false,
    lmHeadMaxRows:
      o.lmHeadMaxRows === "auto" ? DEFAULT_LM_HEAD_MAX_ROWS : (o.lmHeadMaxRows ?? DEFAULT_LM_HEAD_MAX_ROWS),
    lmHeadAuto: o.lmHeadMaxRows === "auto",
  };
}

/** Every tensor a policy can encode: the projections, the embedding and the head (the embedding when tied). */
function quantTargets(config: Qwen35Config): WeightTarget[] {
  const all: WeightTarget[] = qwen35Parameters(config, { tied: true }).filter(
    (p) => p.kind === "projection" || p.kind === "embedding",
  );
  return [...all, { canonical: "lm_head", role: "lm_head" }];
}

/**
 * model.json's `quantization`: the policy as written, the encoding it gives each role (or tensor,
 * where a role's tensors differ), and the one-word summaries `body` (one encoding, or "mixed"),
 * `lmHead` and `embed`.
 */
function quantizationRecord(config: Qwen35Config, r: ResolvedConvert): ChainManifest["quantization"] {
  const targets = quantTargets(config);
  const withGroup = (q: WeightQuant) =>
    formatWeightQuant(q.kind === "lut" && !q.perTensor ? { ...q, groupSize: lutGroupSize(r.quant, q) } : q);
  const of = (t: WeightTarget) => formatWeightQuant(quantFor(r.quant, t));
  const body = new Set(targets.filter((t) => patternMatches("body", t)).map(of));
  return {
    body: body.size === 1 ? [...body][0] : "mixed",
    lmHead: of({ canonical: "lm_head", role: "lm_head" }),
    embed: of({ canonical: "embed", role: "embed" }),
    groupSize: r.quant.groupSize ?? DEFAULT_LUT_GROUP_SIZE,
    policy: formatQuantSpec(r.quantSpec),
    encodings: describePolicy(r.quant, targets, withGroup),
  };
}

/** The one check of the context length on the convert path: the range converted chains support, and the model's. */
function checkCtx(ctx: number, config: Qwen35Config): void {
  if (!Number.isInteger(ctx) || ctx < MIN_CTX || ctx > MAX_CTX) {
    throw new ConvertOptionError("ctx", `must be an integer from ${MIN_CTX} to ${MAX_CTX}, got ${ctx}`);
  }
  const problem = ctxProblem(ctx, config);
  if (problem) throw new ConvertOptionError("ctx", problem);
}

const sha256 = (data: string | Uint8Array) => createHash("sha256").update(data).digest("hex");

/** What makes a built component reusable: the model's config and every option that shapes it. */
function componentKey(configSha: string, c: PlannedComponent, r: ResolvedConvert): string {
  const spec = c.kind === "superblocks" ? { kind: c.kind, first: c.first, count: c.count } : { kind: c.kind };
  const { fuse: _f, budgetBytes: _b, ...shaping } = r;
  return sha256(JSON.stringify({ configSha, spec, shaping, converter: CONVERTER_VERSION }));
}

type PartialRecord = Record<string, { key: string; sha256: string; component: ChainManifestComponent }>;

async function readPartialRecord(dir: string): Promise<PartialRecord> {
  try {
    return JSON.parse(await readFile(join(dir, PARTIAL_RECORD), "utf8")) as PartialRecord;
  } catch {
    return {};
  }
}

async function prepareOutput(out: string, resume: boolean): Promise<string> {
  const partial = `${out}.partial`;
  try {
    await mkdir(dirname(out), { recursive: true });
    if (!resume) await rm(partial, { recursive: true, force: true });
    await mkdir(partial, { recursive: true });
    await writeFile(join(partial, PARTIAL_MARKER), "");
    const probe = join(partial, ".write-test");
    await writeFile(probe, "");
    await rm(probe);
  } catch (err) {
    throw new OutputError(out, `the output folder is not writable (${(err as Error).message})`, {
      cause: err,
    });
  }
  return partial;
}

/** EOS ids: the config's, generation_config's and the tokenizer's eos_token (Qwen3.5: 248046, 248044). */
async function eosTokenIds(dir: string, fromConfig: readonly number[]): Promise<number[]> {
  const ids = new Set(fromConfig);
  const readJson = async (f: string) => {
    try {
      return JSON.parse(await readFile(join(dir, f), "utf8")) as Record<string, unknown>;
    } catch {
      return undefined;
    }
  };
  const gen = await readJson("generation_config.json");
  const genEos = gen?.eos_token_id;
  for (const id of Array.isArray(genEos) ? genEos : genEos === undefined ? [] : [genEos]) ids.add(Number(id));
  const tc = await readJson("tokenizer_config.json");
  const tok = await readJson("tokenizer.json");
  const eos =
    typeof tc?.eos_token === "string" ? tc.eos_token : (tc?.eos_token as { content?: string })?.content;
  const added = (Array.isArray(tok?.added_tokens) ? tok.added_tokens : []) as {
    id: number;
    content: string;
  }[];
  const hit = added.find((t) => t.content === eos);
  if (hit) ids.add(hit.id);
  return [...ids].filter((n) => Number.isInteger(n)).sort((a, b) => a - b);
}

export async function convert(options: ConvertOptions): Promise<ConvertResult> {
  const started = performance.now();
  const r = resolveOptions(options);
  const out = resolve(options.out);
  const partial = `${out}.partial`;
  const log = options.onLog ?? (() => {});
  const signal = options.signal;
  let totalBytes = 0;
  let bytesDone = 0;
  let totalWork = 0;
  let workDone = 0;
  const progress = (e: Pick<ConvertProgress, "stage" | "component" | "tensor" | "reused">) =>
    options.onProgress?.({
      ...e,
      bytes: bytesDone,
      totalBytes,
      fraction: e.stage === "finish" ? 1 : totalWork > 0 ? Math.min(1, workDone / totalWork) : 0,
      elapsedSeconds: (performance.now() - started) / 1000,
    });
  const finished = { components: 0, weights: 0 };
  let pool: KmeansPool | undefined;
  try {
    progress({ stage: "resolve" });
    const dir = await resolveModelRef(options.model, { signal });
    await checkOutputTarget(out, dir, options.force ?? false);
    await using ck = await Qwen35Checkpoint.open(dir);
    assertConvertible(ck);
    checkCtx(r.ctx, ck.config);
    await checkTokenizerFiles(dir, ck.config, await eosTokenIds(dir, ck.config.eosTokenIds), log);
    const configBytes = await readFile(join(dir, "config.json"));
    const configSha = sha256(configBytes);
    let lmHeadSplit: LmHeadSplit | undefined;
    if (r.lmHeadAuto) {
      lmHeadSplit = await tuneLmHeadSplit(ck.config, ck.tiedEmbeddings, {
        build: {
          ctx: r.ctx,
          dtype: r.dtype,
          state: r.state,
          attention: r.attention,
          quant: r.quant,
          argmax: r.argmax,
          workers: options.workers,
          signal,
        },
        log,
        signal,
      });
      r.lmHeadMaxRows = lmHeadSplit.maxRows;
    }

    const unmatched = unmatchedPatterns({ rules: r.quantSpec.rules }, quantTargets(ck.config));
    if (unmatched.length) {
      throw new ConvertOptionError(
        "quant",
        `${unmatched.map((p) => `"${p}"`).join(", ")} matches no tensor of this model (patterns: body, gdn, attn, mlp, lm_head, embed, a role such as gdn.in_proj_qkv, or a canonical name such as layers.3.mlp.down_proj; * and ? glob)`,
      );
    }
    const planOptions = { fuse: r.fuse, budgetBytes: r.budgetBytes, quant: r.quant };
    const plan = planComponents(ck.config, planOptions);
    for (const w of planWarnings(plan, planOptions)) log(w);
    totalBytes = plan.reduce((n, c) => n + c.estimatedBytes, 0);
    const work = new Map(plan.map((c) => [c.name, componentWork(ck.config, c, r)]));
    totalWork = [...work.values()].reduce((a, b) => a + b, 0);
    progress({ stage: "plan" });

    await prepareOutput(out, options.resume ?? false);
    const record = options.resume ? await readPartialRecord(partial) : {};
    const components: ChainManifestComponent[] = [];
    const skipped: string[] = [];
    const reusedWeights: string[] = [];
    const weights: WeightEncodingReport[] = [];
    pool = options.workers === 1 ? undefined : new KmeansPool(options.workers ?? availableParallelism());
    for (const c of plan) {
      signal?.throwIfAborted();
      const key = componentKey(configSha, c, r);
      const file = join(partial, c.file);
      const prev = record[c.name];
      const workBefore = workDone;
      if (prev && prev.key === key && existsSync(file) && (await digestMlPackage(file)) === prev.sha256) {
        components.push(prev.component);
        skipped.push(c.name);
        finished.components++;
        workDone += work.get(c.name) ?? 0;
        bytesDone += c.estimatedBytes;
        progress({ stage: "skip", component: c.name });
        continue;
      }
      progress({ stage: "component", component: c.name });
      const writer = await MlPackageWriter.create(file, { writeBehindBytes: WRITE_BEHIND_BYTES });
      const journal = await TensorJournal.open(partial, c.name, key, writer, options.resume ?? false);
      try {
        const spec =
          c.kind === "superblocks" ? { kind: c.kind, first: c.first, count: c.count } : { kind: c.kind };
        const built = await buildComponent(ck, spec, {
          ctx: r.ctx,
          dtype: r.dtype,
          state: r.state,
          attention: r.attention,
          prefillBatch: c.kind === "superblocks" ? r.prefillBatch : 0,
          gdnPrefill: r.gdnPrefill,
          quant: r.quant,
          argmax: r.argmax,
          lmHeadMaxRows: r.lmHeadMaxRows,
          blobSink: journal.sink(writer.blobs),
          workers: options.workers,
          pool,
          store: journal,
          signal,
          onWeight: (w) => {
            weights.push(w);
            const q = quantFor(r.quant, { canonical: w.tensor, role: w.role });
            workDone += w.shape.reduce((a, b) => a * b, 1) * workPerElement(q);
            log(
              `${c.name}: ${w.name} ${w.encoding} [${w.shape.join("x")}] mse=${w.mse.toExponential(3)} rel=${w.relative.toExponential(3)}${w.reused ? " (reused)" : ""}`,
            );
            progress({ stage: "tensor", component: c.name, tensor: w.name, reused: w.reused });
          },
        });
        await writer.finish(built.model);
        const entry: ChainManifestComponent = {
          name: c.name,
          kind: c.kind,
          file: c.file,
          function: built.function,
          sha256: await digestMlPackage(file),
          io: built.io,
          ...(built.prefill ? { prefill: built.prefill } : {}),
        };
        components.push(entry);
        record[c.name] = { key, sha256: entry.sha256, component: entry };
        await writeFileAtomic(join(partial, PARTIAL_RECORD), JSON.stringify(record, null, 2));
        reusedWeights.push(...journal.reused);
        await journal.discard();
      } catch (err) {
        if (signal?.aborted) {
          finished.weights = journal.recorded;
          await journal.keep(writer).catch(() => {});
        } else {
          await journal.discard();
        }
        await writer.abort();
        throw err;
      }
      finished.components++;
      workDone = workBefore + (work.get(c.name) ?? 0);
      bytesDone += c.estimatedBytes;
      progress({ stage: "component", component: c.name });
    }

    const tokenizerFiles: string[] = [];
    for (const f of TOKENIZER_FILES) {
      if (existsSync(join(dir, f))) {
        await copyFile(join(dir, f), join(partial, f));
        tokenizerFiles.push(f);
      }
    }
    await copyFile(join(dir, "config.json"), join(partial, "config.json"));
    const ref = options.model.startsWith("hf:") ? options.model : resolve(options.model);
    const manifest: ChainManifest = {
      format: CHAIN_FORMAT,
      formatVersion: CHAIN_FORMAT_VERSION,
      converter: { name: "@anemll-qwen35/converter", version: CONVERTER_VERSION },
      source: {
        model: ref,
        revision: ref.startsWith("hf:") ? basename(dir) : undefined,
        configSha256: configSha,
      },
      model: {
        modelType: ck.config.modelType,
        hiddenSize: ck.config.hiddenSize,
        numLayers: ck.config.numHiddenLayers,
        vocabSize: ck.config.vocabSize,
        superBlocks: ck.config.superBlocks.length,
        tiedEmbeddings: ck.tiedEmbeddings,
      },
      ctx: r.ctx,
      fuse: r.fuse,
      state: r.state,
      dtype: r.dtype,
      attention: r.attention,
      ...(r.prefillBatch > 0 ? { prefill: { tokens: r.prefillBatch, gdn: r.gdnPrefill } } : {}),
      quantization: quantizationRecord(ck.config, r),
      argmax: r.argmax,
      lmHeadSplit,
      components,
      tokenizer: {
        files: tokenizerFiles,
        eosTokenIds: await eosTokenIds(dir, ck.config.eosTokenIds),
        chatTemplate: tokenizerFiles.includes("chat_template.jinja") ? "chat_template.jinja" : undefined,
      },
    };
    await writeFileAtomic(join(partial, "model.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    await rm(join(partial, PARTIAL_RECORD), { force: true });
    await rm(join(partial, PARTIAL_MARKER), { force: true });
    await removeResumeFolder(partial);
    const kept = await swapIntoPlace(partial, out);
    if (kept.length) log(`${out}: kept what the folder held besides the conversion: ${kept.join(", ")}`);
    progress({ stage: "finish" });
    return {
      out,
      manifest,
      skipped,
      reusedWeights,
      weights,
      seconds: (performance.now() - started) / 1000,
    };
  } catch (err) {
    // stopped on purpose: whatever was in flight, say so and how to continue
    if (signal?.aborted) throw new ConvertInterruptedError(partial, finished);
    throw err;
  } finally {
    await pool?.close();
  }
}
