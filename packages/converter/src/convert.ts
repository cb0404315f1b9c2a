/**
 * convert(): a Qwen3.5 checkpoint (folder or hf: reference) → a folder that runtime-ane runs:
 * embed.mlpackage, sb_*.mlpackage (super-blocks, fused per the plan), lm_head.mlpackage, the
 * tokenizer files and model.json.
 *
 * Atomicity: everything is written into `<out>.partial/` (each package itself atomically), and the
 * folder is renamed to `<out>` only once model.json is complete — an interrupted conversion never
 * leaves a folder that looks finished. `resume` keeps `<out>.partial/` and skips every component
 * whose recorded build key and package digest still match.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import {
  CHAIN_FORMAT,
  CHAIN_FORMAT_VERSION,
  type ChainManifest,
  type ChainManifestComponent,
} from "@anemll-qwen35/ir/chain";
import {
  Qwen35Checkpoint,
  type Qwen35Config,
  resolveModelRef,
  writeFileAtomic,
} from "@anemll-qwen35/ir/checkpoint";
import { digestMlPackage, MlPackageWriter } from "@anemll-qwen35/ir/mil";
import { assertConvertible, buildComponent } from "./graph/component.js";
import type { GraphDType, KvPlacement } from "./graph/io.js";
import { ctxProblem, DEFAULT_LM_HEAD_MAX_ROWS } from "./graph/options.js";
import { DEFAULT_LUT_GROUP_SIZE, formatWeightQuant, type WeightQuant } from "./graph/quant.js";
import type { WeightEncodingReport } from "./graph/weights.js";
import { checkOutputTarget, OutputError, PARTIAL_MARKER } from "./output.js";
import { DEFAULT_BUDGET_BYTES, type PlannedComponent, planComponents } from "./plan.js";
import { checkTokenizerFiles } from "./tokenizer-check.js";

export { OutputError } from "./output.js";

export const CONVERTER_VERSION = "0.1.0";
export const MIN_CTX = 128;
export const MAX_CTX = 4096;
export const DEFAULT_CTX = 256;
/**
 * Default super-block encoding: LUT6. On learned weights (notes/quantization.md) a LUT4 body had
 * 10x the KL of LUT6 (0.0050 vs 0.0005 nats) and lost 4.7% top-1 agreement against 2.1%.
 */
export const DEFAULT_BODY_QUANT: WeightQuant = { kind: "lut", bits: 6 };
/** Default lm_head encoding: LUT6 (KL 0.0007 vs 0.0046 for LUT4, and no extra greedy loops). */
export const DEFAULT_LM_HEAD_QUANT: WeightQuant = { kind: "lut", bits: 6 };

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
  /** Super-block weights (default DEFAULT_BODY_QUANT). */
  body?: WeightQuant;
  /** lm_head weights (default DEFAULT_LM_HEAD_QUANT). */
  lmHead?: WeightQuant;
  /** Embedding table (default none). */
  embed?: WeightQuant;
  /** Output channels per LUT (default DEFAULT_LUT_GROUP_SIZE). */
  groupSize?: number;
  /** lm_head emits per-piece top-1 instead of logits. */
  argmax?: boolean;
  /** Most vocabulary rows per lm_head piece (default 16,384). */
  lmHeadMaxRows?: number;
  /** Reuse components of an interrupted conversion of the same model and options. */
  resume?: boolean;
  /** Replace whatever is at `out` (and `<out>.partial`), even if it is not a previous conversion. */
  force?: boolean;
  /** Worker threads for k-means. */
  workers?: number;
  onProgress?: (event: ConvertProgress) => void;
  /** One line per encoded weight (name, encoding, reconstruction error) and other log lines. */
  onLog?: (line: string) => void;
  signal?: AbortSignal;
}

export interface ConvertProgress {
  readonly stage: "resolve" | "plan" | "component" | "skip" | "finish";
  readonly component?: string;
  /** Estimated bytes of packages finished so far, and in all. */
  readonly bytes: number;
  readonly totalBytes: number;
  readonly fraction: number;
}

export interface ConvertResult {
  readonly out: string;
  readonly manifest: ChainManifest;
  readonly skipped: readonly string[];
  readonly weights: readonly WeightEncodingReport[];
  readonly seconds: number;
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

interface ResolvedConvert {
  ctx: number;
  fuse: number | "all";
  budgetBytes: number;
  state: KvPlacement;
  dtype: GraphDType;
  body: WeightQuant;
  lmHead: WeightQuant;
  embed: WeightQuant;
  groupSize: number;
  argmax: boolean;
  lmHeadMaxRows: number;
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
  return {
    ctx,
    fuse,
    budgetBytes,
    state: o.state ?? "io",
    dtype: o.dtype ?? "fp16",
    body: o.body ?? DEFAULT_BODY_QUANT,
    lmHead: o.lmHead ?? DEFAULT_LM_HEAD_QUANT,
    embed: o.embed ?? { kind: "none" },
    groupSize,
    argmax: o.argmax ?? false,
    lmHeadMaxRows: o.lmHeadMaxRows ?? DEFAULT_LM_HEAD_MAX_ROWS,
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
  const log = options.onLog ?? (() => {});
  const progress = (e: Omit<ConvertProgress, "fraction">) =>
    options.onProgress?.({ ...e, fraction: e.totalBytes > 0 ? Math.min(1, e.bytes / e.totalBytes) : 0 });

  progress({ stage: "resolve", bytes: 0, totalBytes: 0 });
  const dir = await resolveModelRef(options.model, { signal: options.signal });
  await checkOutputTarget(out, dir, options.force ?? false);
  await using ck = await Qwen35Checkpoint.open(dir);
  assertConvertible(ck);
  checkCtx(r.ctx, ck.config);
  await checkTokenizerFiles(dir, ck.config, await eosTokenIds(dir, ck.config.eosTokenIds));
  const configBytes = await readFile(join(dir, "config.json"));
  const configSha = sha256(configBytes);

  const plan = planComponents(ck.config, {
    fuse: r.fuse,
    budgetBytes: r.budgetBytes,
    body: r.body,
    groupSize: r.groupSize,
  });
  for (const c of plan) {
    if (c.kind === "superblocks" && c.estimatedBytes > r.budgetBytes) {
      log(
        `warning: ${c.name} is ~${(c.estimatedBytes / 1e9).toFixed(2)} GB, over the ${(r.budgetBytes / 1e9).toFixed(2)} GB budget (one super-block cannot be split)`,
      );
    }
  }
  const weightOf = (c: PlannedComponent) => (c.kind === "superblocks" ? c.estimatedBytes : 1e6);
  const totalBytes = plan.reduce((s, c) => s + weightOf(c), 0);
  progress({ stage: "plan", bytes: 0, totalBytes });

  const partial = await prepareOutput(out, options.resume ?? false);
  const record = options.resume ? await readPartialRecord(partial) : {};
  const components: ChainManifestComponent[] = [];
  const skipped: string[] = [];
  const weights: WeightEncodingReport[] = [];
  let done = 0;
  for (const c of plan) {
    options.signal?.throwIfAborted();
    const key = componentKey(configSha, c, r);
    const file = join(partial, c.file);
    const prev = record[c.name];
    if (prev && prev.key === key && existsSync(file) && (await digestMlPackage(file)) === prev.sha256) {
      components.push(prev.component);
      skipped.push(c.name);
      done += weightOf(c);
      progress({ stage: "skip", component: c.name, bytes: done, totalBytes });
      continue;
    }
    progress({ stage: "component", component: c.name, bytes: done, totalBytes });
    const writer = await MlPackageWriter.create(file);
    try {
      const spec =
        c.kind === "superblocks" ? { kind: c.kind, first: c.first, count: c.count } : { kind: c.kind };
      const built = await buildComponent(ck, spec, {
        ctx: r.ctx,
        dtype: r.dtype,
        state: r.state,
        quant: { body: r.body, lmHead: r.lmHead, embed: r.embed, groupSize: r.groupSize },
        argmax: r.argmax,
        lmHeadMaxRows: r.lmHeadMaxRows,
        blobSink: writer.blobs,
        workers: options.workers,
        signal: options.signal,
        onWeight: (w) => {
          weights.push(w);
          log(
            `${c.name}: ${w.name} ${w.encoding} [${w.shape.join("x")}] mse=${w.mse.toExponential(3)} rel=${w.relative.toExponential(3)}`,
          );
        },
      });
      await writer.finish(built.model);
      const entry: ChainManifestComponent = {
        name: c.name,
        kind: c.kind,
        file: c.file,
        function: "main",
        sha256: await digestMlPackage(file),
        io: built.io,
      };
      components.push(entry);
      record[c.name] = { key, sha256: entry.sha256, component: entry };
      await writeFileAtomic(join(partial, PARTIAL_RECORD), JSON.stringify(record, null, 2));
    } catch (err) {
      await writer.abort();
      throw err;
    }
    done += weightOf(c);
    progress({ stage: "component", component: c.name, bytes: done, totalBytes });
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
    quantization: {
      body: formatWeightQuant(r.body),
      lmHead: formatWeightQuant(r.lmHead),
      embed: formatWeightQuant(r.embed),
      groupSize: r.groupSize,
    },
    argmax: r.argmax,
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
  await swapIntoPlace(partial, out);
  progress({ stage: "finish", bytes: totalBytes, totalBytes });
  return { out, manifest, skipped, weights, seconds: (performance.now() - started) / 1000 };
}

/** Replaces `out` with the finished `partial` folder (the old one is removed only afterwards). */
async function swapIntoPlace(partial: string, out: string): Promise<void> {
  const old = existsSync(out) ? `${out}.old-${process.pid}-${Date.now()}` : undefined;
  try {
    if (old) await rename(out, old);
    await rename(partial, out);
  } catch (err) {
    throw new OutputError(
      out,
      `could not move the finished conversion into place (${(err as Error).message})`,
      {
        cause: err,
      },
    );
  }
  if (old) await rm(old, { recursive: true, force: true });
}
