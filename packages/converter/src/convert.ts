/**
 * convert(): a Qwen3.5 checkpoint (folder or hf: reference) → a folder that runtime-ane runs:
 * embed.mlpackage, sb_*.mlpackage (super-blocks, fused per the plan), lm_head.mlpackage, the
 * tokenizer files and model.json.
 *
 *   options (options.ts) → the model's quantization plan (quant/plan.ts) → the packages to write
 *   (plan.ts) → each package: graph (graph/component.ts) with its weights encoded as planned →
 *   model.json (manifest.ts)
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
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { numel } from "@anemll-qwen35/core";
import type { ChainManifest, ChainManifestComponent } from "@anemll-qwen35/ir/chain";
import {
  checkMtpWeights,
  Qwen35Checkpoint,
  resolveModelRef,
  writeFileAtomic,
} from "@anemll-qwen35/ir/checkpoint";
import { digestMlPackage, MlPackageWriter } from "@anemll-qwen35/ir/mil";
import { ConvertInterruptedError } from "./errors.js";
import { assertConvertible, buildComponent } from "./graph/component.js";
import type { WeightEncodingReport } from "./graph/weights.js";
import { tuneLmHeadSplit } from "./lmhead-split.js";
import { CONVERTER_VERSION, chainManifest, copyChainFiles, eosTokenIds } from "./manifest.js";
import {
  type ConvertOptions,
  type ConvertProgress,
  checkConvertForModel,
  fitConvertToModel,
  type ResolvedConvert,
  resolveConvertOptions,
} from "./options.js";
import { checkOutputTarget, OutputError, PARTIAL_MARKER, swapIntoPlace } from "./output.js";
import { type PlannedComponent, planComponents, planWarnings } from "./plan.js";
import { KmeansPool } from "./quant/kmeans-pool.js";
import { planQuant, type QuantPlan, type TensorEncoding } from "./quant/plan.js";
import { removeResumeFolder, TensorJournal } from "./resume.js";
import { checkTokenizerFiles } from "./tokenizer-check.js";

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

const PARTIAL_RECORD = "components.partial.json";
/** Bytes of weights queued for writing while the next tensor is clustered (one 9B lm_head piece fits). */
const WRITE_BEHIND_BYTES = 64 << 20;

/**
 * Rough cost per weight element of each encoding relative to a plain copy, measured on the
 * synthetic 0.8B (bench/convert-synthetic.ts): progress and its ETA follow the work, not bytes.
 */
function workPerElement(e: TensorEncoding): number {
  if (e.kind === "lut") return e.bits <= 4 ? 60 : 25;
  return e.kind === "int8" ? 4 : 1;
}

/** Estimated work of a component: its weights' elements times their encodings' cost. */
function componentWork(quant: QuantPlan, c: PlannedComponent): number {
  const work = (canonical: string) => {
    const t = quant.tensor(canonical);
    return numel(t.shape) * workPerElement(t.encoding);
  };
  if (c.kind === "mtp")
    return quant.tensors.reduce((n, t) => (t.canonical.startsWith("mtp.") ? n + work(t.canonical) : n), 0);
  if (c.kind !== "superblocks") return work(c.kind);
  const [start, end] = c.layers;
  return quant.tensors.reduce((n, t) => (t.layer >= start && t.layer < end ? n + work(t.canonical) : n), 0);
}

/** What the progress events report: bytes and work done of the planned totals. */
class Progress {
  private totalBytes = 0;
  private bytesDone = 0;
  private totalWork = 0;
  workDone = 0;

  constructor(
    private readonly onProgress: ConvertOptions["onProgress"],
    private readonly started: number,
  ) {}

  planned(totalBytes: number, totalWork: number): void {
    this.totalBytes = totalBytes;
    this.totalWork = totalWork;
  }

  /** A package finished (or reused): its bytes, and its work in full. */
  packageDone(c: PlannedComponent, workBefore: number, work: number): void {
    this.workDone = workBefore + work;
    this.bytesDone += c.estimatedBytes;
  }

  emit(e: Pick<ConvertProgress, "stage" | "component" | "tensor" | "reused">): void {
    const { totalWork, workDone } = this;
    this.onProgress?.({
      ...e,
      bytes: this.bytesDone,
      totalBytes: this.totalBytes,
      fraction: e.stage === "finish" ? 1 : totalWork > 0 ? Math.min(1, workDone / totalWork) : 0,
      elapsedSeconds: (performance.now() - this.started) / 1000,
    });
  }
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

/** What building one package needs from the conversion around it. */
interface Conversion {
  readonly ck: Qwen35Checkpoint;
  readonly r: ResolvedConvert;
  readonly quant: QuantPlan;
  readonly partial: string;
  readonly options: ConvertOptions;
  readonly pool: KmeansPool | undefined;
  readonly progress: Progress;
  readonly log: (line: string) => void;
  /** Drafts per verify call of the MTP head's chain (0: converted without the head). */
  readonly verifyTokens: number;
  /** Every encoded weight so far. */
  readonly weights: WeightEncodingReport[];
  /** Finished packages, and finished weights of the one being built when interrupted. */
  readonly finished: { components: number; weights: number };
}

/**
 * Builds and writes the package of `c` (build key `key`) through its tensor journal, and returns
 * its model.json entry and the weights it reused. Interrupted, it keeps the journal for resume.
 */
async function buildPackage(
  run: Conversion,
  c: PlannedComponent,
  key: string,
): Promise<{ entry: ChainManifestComponent; reused: readonly string[] }> {
  const { r, options } = run;
  const file = join(run.partial, c.file);
  const writer = await MlPackageWriter.create(file, { writeBehindBytes: WRITE_BEHIND_BYTES });
  const journal = await TensorJournal.open(run.partial, c.name, key, writer, options.resume ?? false);
  try {
    const spec =
      c.kind === "superblocks" ? { kind: c.kind, first: c.first, count: c.count } : { kind: c.kind };
    const built = await buildComponent(run.ck, spec, {
      ctx: r.ctx,
      ...(c.kind === "superblocks" ? { buckets: r.buckets } : {}),
      dtype: r.dtype,
      state: r.state,
      attention: r.attention,
      prefillBatch: c.kind === "superblocks" ? r.prefillBatch : 0,
      verifyTokens: c.kind === "superblocks" || c.kind === "lm_head" ? run.verifyTokens : 0,
      gdnPrefill: r.gdnPrefill,
      quant: run.quant,
      argmax: r.argmax,
      lmHeadMaxRows: r.lmHeadMaxRows,
      blobSink: journal.sink(writer.blobs),
      workers: options.workers,
      pool: run.pool,
      store: journal,
      signal: options.signal,
      onWeight: (w) => {
        run.weights.push(w);
        const t = run.quant.tensor(w.tensor);
        run.progress.workDone += w.shape.reduce((a, b) => a * b, 1) * workPerElement(t.encoding);
        run.log(
          `${c.name}: ${w.name} ${w.encoding} [${w.shape.join("x")}] mse=${w.mse.toExponential(3)} rel=${w.relative.toExponential(3)}${w.reused ? " (reused)" : ""}`,
        );
        run.progress.emit({ stage: "tensor", component: c.name, tensor: w.name, reused: w.reused });
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
      ...(built.functions ? { functions: built.functions } : {}),
      ...(built.verify ? { verify: built.verify } : {}),
    };
    const reused = [...journal.reused];
    await journal.discard();
    return { entry, reused };
  } catch (err) {
    if (options.signal?.aborted) {
      run.finished.weights = journal.recorded;
      await journal.keep(writer).catch(() => {});
    } else {
      await journal.discard();
    }
    await writer.abort();
    throw err;
  }
}

/**
 * Every package of the plan in order: reused whole where an interrupted conversion finished it
 * (resume: same build key, same digest), else built; each finished one is recorded for resume.
 */
async function writePackages(
  run: Conversion,
  plan: readonly PlannedComponent[],
  work: ReadonlyMap<string, number>,
  configSha: string,
): Promise<{ components: ChainManifestComponent[]; skipped: string[]; reusedWeights: string[] }> {
  const { partial, progress, finished } = run;
  const record = run.options.resume ? await readPartialRecord(partial) : {};
  const components: ChainManifestComponent[] = [];
  const skipped: string[] = [];
  const reusedWeights: string[] = [];
  for (const c of plan) {
    run.options.signal?.throwIfAborted();
    const key = componentKey(configSha, c, run.r);
    const file = join(partial, c.file);
    const prev = record[c.name];
    const workBefore = progress.workDone;
    if (prev && prev.key === key && existsSync(file) && (await digestMlPackage(file)) === prev.sha256) {
      components.push(prev.component);
      skipped.push(c.name);
      finished.components++;
      progress.packageDone(c, workBefore, work.get(c.name) ?? 0);
      progress.emit({ stage: "skip", component: c.name });
      continue;
    }
    progress.emit({ stage: "component", component: c.name });
    const built = await buildPackage(run, c, key);
    components.push(built.entry);
    record[c.name] = { key, sha256: built.entry.sha256, component: built.entry };
    await writeFileAtomic(join(partial, PARTIAL_RECORD), JSON.stringify(record, null, 2));
    reusedWeights.push(...built.reused);
    finished.components++;
    progress.packageDone(c, workBefore, work.get(c.name) ?? 0);
    progress.emit({ stage: "component", component: c.name });
  }
  return { components, skipped, reusedWeights };
}

/**
 * Whether the conversion keeps the checkpoint's MTP head: when it has `mtp.*` tensors and they are
 * exactly the one-layer head its config implies. A partial or odd head is left out — silently by
 * default (the folder is then what it was before heads were kept), with a log line saying why
 * when `mtp: true` was asked for.
 */
function keepsMtpHead(ck: Qwen35Checkpoint, asked: boolean, log: (line: string) => void): boolean {
  const report = checkMtpWeights(ck.config, ck.tensors, ck.dir);
  if (report.complete && report.layers === 1) return true;
  if (!asked) return false;
  const why = !report.present
    ? "the checkpoint has no mtp.* tensors"
    : (report.problems[0]?.message ??
      (report.unexpected.length ? `unexpected ${report.unexpected[0]}` : `${report.layers} layers`));
  log(
    `warning: no MTP head in this conversion (${why}); speculative decoding needs a complete one-layer head`,
  );
  return false;
}

export async function convert(options: ConvertOptions): Promise<ConvertResult> {
  const started = performance.now();
  let resolved = resolveConvertOptions(options);
  const out = resolve(options.out);
  const partial = `${out}.partial`;
  const log = options.onLog ?? (() => {});
  const signal = options.signal;
  const progress = new Progress(options.onProgress, started);
  const finished = { components: 0, weights: 0 };
  let pool: KmeansPool | undefined;
  try {
    progress.emit({ stage: "resolve" });
    const dir = await resolveModelRef(options.model, { signal });
    await checkOutputTarget(out, dir, options.force ?? false);
    await using ck = await Qwen35Checkpoint.open(dir);
    assertConvertible(ck);
    resolved = fitConvertToModel(resolved, ck.config);
    const mtp = resolved.mtp && keepsMtpHead(ck, options.mtp === true, log);
    const quant = planQuant(ck.config, resolved.quant, { mtp });
    checkConvertForModel(resolved, ck.config, quant);
    const eos = await eosTokenIds(dir, ck.config.eosTokenIds);
    await checkTokenizerFiles(dir, ck.config, eos, log);
    const configSha = sha256(await readFile(join(dir, "config.json")));
    const lmHeadSplit = resolved.lmHeadAuto
      ? await tuneLmHeadSplit(ck.config, ck.tiedEmbeddings, {
          build: {
            ctx: resolved.ctx,
            dtype: resolved.dtype,
            state: resolved.state,
            attention: resolved.attention,
            quant,
            argmax: resolved.argmax,
            workers: options.workers,
            signal,
          },
          log,
          signal,
        })
      : undefined;
    const r = lmHeadSplit ? { ...resolved, lmHeadMaxRows: lmHeadSplit.maxRows } : resolved;

    const planOptions = { fuse: r.fuse, budgetBytes: r.budgetBytes, quant, mtp };
    const plan = planComponents(ck.config, planOptions);
    for (const w of planWarnings(plan, planOptions)) log(w);
    const work = new Map(plan.map((c) => [c.name, componentWork(quant, c)]));
    progress.planned(
      plan.reduce((n, c) => n + c.estimatedBytes, 0),
      [...work.values()].reduce((a, b) => a + b, 0),
    );
    progress.emit({ stage: "plan" });

    await prepareOutput(out, options.resume ?? false);
    const weights: WeightEncodingReport[] = [];
    pool = options.workers === 1 ? undefined : new KmeansPool(options.workers ?? availableParallelism());
    const verifyTokens = mtp ? r.verifyTokens : 0;
    const run: Conversion = {
      ck,
      r,
      quant,
      partial,
      options,
      pool,
      progress,
      log,
      verifyTokens,
      weights,
      finished,
    };
    const written = await writePackages(run, plan, work, configSha);
    const { skipped, reusedWeights } = written;
    const components = written.components.filter((c) => c.kind !== "mtp");
    const head = written.components.find((c) => c.kind === "mtp");

    const tokenizerFiles = await copyChainFiles(dir, partial);
    const manifest = chainManifest({
      model: options.model,
      dir,
      config: ck.config,
      configSha256: configSha,
      tiedEmbeddings: ck.tiedEmbeddings,
      options: r,
      plan: quant,
      lmHeadSplit,
      components,
      speculative: head && { draftTokens: verifyTokens, mtp: head },
      tokenizerFiles,
      eosTokenIds: eos,
    });
    await writeFileAtomic(join(partial, "model.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    await rm(join(partial, PARTIAL_RECORD), { force: true });
    await rm(join(partial, PARTIAL_MARKER), { force: true });
    await removeResumeFolder(partial);
    const kept = await swapIntoPlace(partial, out);
    if (kept.length) log(`${out}: kept what the folder held besides the conversion: ${kept.join(", ")}`);
    progress.emit({ stage: "finish" });
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
