/**
 * The models a server answers for, by name. A model comes either ready-made (any StepModel and its
 * tokenizer: the library path, and how tests plug in scripted models) or from a folder:
 * - a converted chain (has model.json) → runtime-ane, on Core ML (the ANE) or the reference interpreter;
 * - a Hugging Face / MLX Qwen3.5 checkpoint (config.json, no model.json) or `hf:owner/name` → runtime-mlx.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { loadTokenizer, type SamplingOptions, type StepModel, type Tokenizer } from "@anemll-qwen35/generate";
import { type ComputeUnits, openChain } from "@anemll-qwen35/runtime-ane";
import { ModelLoadError, ServerConfigError } from "./errors.js";
import { ModelQueue } from "./queue.js";

export type BackendName = "coreml" | "reference" | "mlx";

/** A model already loaded by the caller. The server never disposes it unless `dispose` is true. */
export interface ReadyModelSource {
  name: string;
  model: StepModel;
  tokenizer: Tokenizer;
  /** Shown in /v1/models and /health (default "custom"). */
  backend?: string;
  /** Sampling used for fields a request leaves out (default: temperature 1, as OpenAI). */
  sampling?: SamplingOptions;
  /** Dispose the model when the server closes. Default false. */
  dispose?: boolean;
  /** Overrides the server's `queue` for this model. */
  queue?: number;
}

/** A model the server opens (and disposes on close). */
export interface PathModelSource {
  /** Default: the folder's name. */
  name?: string;
  /** A converted chain folder, a Qwen3.5 checkpoint folder, or `hf:owner/name[@revision]` (mlx). */
  path: string;
  /** Default: "mlx" for checkpoints; for chains "coreml" on macOS, "reference" elsewhere. */
  backend?: BackendName;
  /** reference backend: "fp32" (default) or "fp16" (ANE-like rounding). */
  precision?: "fp32" | "fp16";
  /** coreml backend (default "cpuAndNeuralEngine"). */
  computeUnits?: ComputeUnits;
  /** mlx backend: most tokens per request (default: the config's max_position_embeddings). */
  contextLength?: number;
  /** Chains: "error" (default) when the context is full, or "slide" the window. */
  contextOverflow?: "error" | "slide";
  /** Overrides the defaults read from the folder's generation_config.json. */
  sampling?: SamplingOptions;
  queue?: number;
  /** Told when a Core ML package compiles (the first ANE compile can take minutes). */
  onCompile?: (event: { component: string; stage: "start" | "done"; seconds?: number }) => void;
}

export type ModelSource = ReadyModelSource | PathModelSource;

/** A model as the server holds it. */
export interface ServedModel {
  readonly name: string;
  readonly model: StepModel;
  readonly tokenizer: Tokenizer;
  readonly backend: string;
  /** Sampling for fields a request leaves out. */
  readonly sampling: SamplingOptions;
  readonly queue: ModelQueue;
  /** Unix seconds, for /v1/models. */
  readonly created: number;
  dispose(): Promise<void>;
}

/** Opens every source (in order; on failure, what was opened is disposed) and checks the names. */
export async function openModels(sources: readonly ModelSource[], queue: number): Promise<ServedModel[]> {
  if (sources.length === 0) throw new ServerConfigError("no models to serve: give at least one");
  const served: ServedModel[] = [];
  try {
    for (const s of sources) {
      const m = await openModel(s, queue);
      if (served.some((o) => o.name === m.name)) {
        await m.dispose();
        throw new ServerConfigError(
          `two models are named "${m.name}"; give them distinct names (--model NAME=PATH)`,
        );
      }
      served.push(m);
    }
  } catch (err) {
    await Promise.allSettled(served.map((m) => m.dispose()));
    throw err;
  }
  return served;
}

async function openModel(source: ModelSource, defaultQueue: number): Promise<ServedModel> {
  const queueSize = source.queue ?? defaultQueue;
  if (!Number.isInteger(queueSize) || queueSize < 0) {
    throw new ServerConfigError(`queue must be an integer ≥ 0, got ${queueSize}`);
  }
  const created = Math.floor(Date.now() / 1000);
  if ("model" in source) {
    if (!source.name) throw new ServerConfigError("a ready model needs a name");
    const { model, tokenizer } = source;
    return {
      name: source.name,
      model,
      tokenizer,
      backend: source.backend ?? "custom",
      sampling: withTop1Default(model, source.sampling ?? {}),
      queue: new ModelQueue(source.name, queueSize),
      created,
      dispose: async () => {
        if (source.dispose) await model.dispose();
      },
    };
  }

  const name = source.name ?? defaultName(source.path);
  const opened = await openModelPath(source);
  const sampling = { ...(await generationDefaults(opened.dir)), ...source.sampling };
  return {
    name,
    model: opened.model,
    tokenizer: opened.tokenizer,
    backend: opened.backend,
    sampling: withTop1Default(opened.model, sampling),
    queue: new ModelQueue(name, queueSize),
    created,
    dispose: async () => {
      await opened.model.dispose();
    },
  };
}

/** `/models/Qwen3.5-0.8B-ane/` → `Qwen3.5-0.8B-ane`; `hf:Qwen/Qwen3.5-0.8B@main` → `Qwen/Qwen3.5-0.8B`. */
export function defaultName(path: string): string {
  if (path.startsWith("hf:")) return path.slice(3).split("@")[0];
  return basename(resolve(path));
}

/** Which runtime a folder needs when the caller did not say. */
export function detectBackend(path: string): BackendName {
  if (path.startsWith("hf:")) return "mlx";
  if (existsSync(join(path, "model.json"))) return process.platform === "darwin" ? "coreml" : "reference";
  if (existsSync(join(path, "config.json"))) return "mlx";
  if (!existsSync(path)) throw new ModelLoadError(path, "no such folder");
  throw new ModelLoadError(
    path,
    "neither a converted chain (model.json) nor a Qwen3.5 checkpoint (config.json)",
  );
}

/** A model opened from a path: what the server serves, and what the CLI's run/chat use. */
export interface OpenedModel {
  model: StepModel;
  tokenizer: Tokenizer;
  /** e.g. "reference (fp32)", "coreml (cpuAndNeuralEngine)", "mlx (float32)". */
  backend: string;
  /** The local folder (for generation_config.json). */
  dir: string;
}

/** Opens a converted chain (runtime-ane) or a Qwen3.5 checkpoint (runtime-mlx), per `backend`. */
export async function openModelPath(s: PathModelSource): Promise<OpenedModel> {
  const backend = s.backend ?? detectBackend(s.path);
  if (backend === "mlx") return openMlx(s);
  if (!existsSync(join(s.path, "model.json"))) {
    throw new ModelLoadError(
      s.path,
      `the ${backend} backend runs a converted chain (a folder with model.json, written by \`convert\`), ` +
        "and there is no model.json here; a Hugging Face checkpoint runs with --backend mlx",
    );
  }
  const { model, tokenizer } = await openChain(s.path, {
    backend,
    precision: s.precision,
    computeUnits: s.computeUnits,
    contextOverflow: s.contextOverflow ?? "error",
    onCompile: s.onCompile,
  });
  const describe =
    backend === "reference"
      ? `reference (${s.precision ?? "fp32"})`
      : `coreml (${s.computeUnits ?? "cpuAndNeuralEngine"})`;
  return { model, tokenizer, backend: describe, dir: s.path };
}

/** MLX is optional at run time: it is imported only when a model asks for it. */
async function openMlx(s: PathModelSource): Promise<OpenedModel> {
  let mlx: typeof import("@anemll-qwen35/runtime-mlx");
  try {
    mlx = await import("@anemll-qwen35/runtime-mlx");
  } catch (err) {
    throw new ModelLoadError(
      s.path,
      `the mlx backend needs @anemll-qwen35/runtime-mlx: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const available = mlx.mlxAvailable();
  if (!available.available) {
    throw new ModelLoadError(
      s.path,
      `the mlx backend is unavailable here: ${available.reason ?? "the MLX addon did not load"}`,
    );
  }
  const model = await mlx.loadMlxModel(s.path, { contextLength: s.contextLength });
  try {
    const tokenizer = await loadTokenizer(model.dir, { eosTokenIds: model.config.eosTokenIds });
    return { model, tokenizer, backend: `mlx (${model.dtype})`, dir: model.dir };
  } catch (err) {
    model.dispose();
    throw err instanceof AnemllError
      ? err
      : new ModelLoadError(s.path, (err as Error).message, { cause: err });
  }
}

/**
 * A checkpoint's generation_config.json holds its authors' sampling defaults (Qwen3.5: temperature,
 * top_p, top_k); like vLLM, they fill in what a request leaves out. Without one, OpenAI's defaults.
 */
export async function generationDefaults(dir: string): Promise<SamplingOptions> {
  const openai: SamplingOptions = { temperature: 1, topP: 1 };
  let gen: Record<string, unknown>;
  try {
    gen = JSON.parse(await readFile(join(dir, "generation_config.json"), "utf8"));
  } catch {
    return openai;
  }
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const out: SamplingOptions = { ...openai };
  if (gen.do_sample === false) out.temperature = 0;
  else if (num(gen.temperature) !== undefined) out.temperature = num(gen.temperature);
  if (num(gen.top_p) !== undefined) out.topP = num(gen.top_p);
  if (num(gen.top_k) !== undefined) out.topK = num(gen.top_k);
  if (num(gen.min_p) !== undefined) out.minP = num(gen.min_p);
  if (num(gen.repetition_penalty) !== undefined) out.repetitionPenalty = num(gen.repetition_penalty);
  return out;
}

/** A head that returns only the arg-max can decode greedily, nothing else: make that the default. */
function withTop1Default(model: StepModel, sampling: SamplingOptions): SamplingOptions {
  if (model.outputKind !== "top1") return sampling;
  return { ...sampling, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 };
}
