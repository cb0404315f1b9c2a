/**
 * The models a server answers for, by name. A model comes either ready-made (any StepModel and its
 * tokenizer: the library path, and how tests plug in scripted models) or from a folder or `hf:`
 * reference, opened with @anemll-qwen35/models' loadModel (a converted chain on Core ML or the
 * reference interpreter, a checkpoint on MLX).
 */
import { basename, resolve } from "node:path";
import {
  canSnapshot,
  PromptCache,
  type PromptCacheOptions,
  type SamplingOptions,
  type StepModel,
  type Tokenizer,
} from "@anemll-qwen35/generate";
import {
  type LoadModelOptions,
  loadModel,
  speculationDefaults,
  withTop1Default,
} from "@anemll-qwen35/models";
import { ServerConfigError } from "./errors.js";
import { PromptTokenizer, type PromptTokenizerOptions } from "./prompt-tokenizer.js";
import { ModelQueue } from "./queue.js";

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
  /** `"mtp"`: decode speculatively with the model's MTP head (checked when the server opens it). */
  speculative?: "mtp";
  /** With `speculative`: draft tokens per round (default 2). */
  gamma?: number;
}

/** A model the server opens with loadModel (and disposes on close). */
export interface PathModelSource extends LoadModelOptions {
  /** Default: the folder's name. */
  name?: string;
  /** A converted chain folder, a Qwen3.5 checkpoint folder, or `hf:owner/name[@revision]`. */
  path: string;
  /** Overrides the defaults read from the folder's generation_config.json. */
  sampling?: SamplingOptions;
  queue?: number;
}

export type ModelSource = ReadyModelSource | PathModelSource;

/** A model as the server holds it. */
export interface ServedModel {
  readonly name: string;
  readonly model: StepModel;
  readonly tokenizer: Tokenizer;
  /** Encodes this model's prompts (large ones off the event loop); shared by models with one tokenizer. */
  readonly prompts: PromptTokenizer;
  readonly backend: string;
  /** Sampling for fields a request leaves out. */
  readonly sampling: SamplingOptions;
  readonly queue: ModelQueue;
  /**
   * Snapshots of this model's state by prompt prefix (undefined when the cache is off or the
   * model cannot snapshot its state).
   */
  readonly promptCache: PromptCache | undefined;
  /** Unix seconds, for /v1/models. */
  readonly created: number;
  /** `{ speculative: "mtp", gamma }` when the model decodes speculatively, else empty: spread into generate(). */
  readonly speculation: { speculative?: "mtp"; gamma?: number };
  dispose(): Promise<void>;
}

/** The prompt cache of each model: on with this budget (and minimum prefix), or off (false). */
export type PromptCacheSettings = Partial<PromptCacheOptions> | false;

/** Each model's default prompt-cache budget: 1 GB. */
export const DEFAULT_PROMPT_CACHE_BYTES = 1_000_000_000;

/** Opens every source (in order; on failure, what was opened is disposed) and checks the names. */
export async function openModels(
  sources: readonly ModelSource[],
  queue: number,
  tokenize: PromptTokenizerOptions = {},
  promptCache: PromptCacheSettings = {},
): Promise<ServedModel[]> {
  // refuse a bad budget before any model is opened
  if (promptCache) cacheFor(undefined, promptCache);
  if (sources.length === 0) throw new ServerConfigError("no models to serve: give at least one");
  const served: ServedModel[] = [];
  // one tokenizer worker per tokenizer object, whichever models share it
  const prompts = new Map<Tokenizer, PromptTokenizer>();
  const promptsFor = (t: Tokenizer) => {
    const p = prompts.get(t) ?? new PromptTokenizer(t, tokenize);
    prompts.set(t, p);
    return p;
  };
  try {
    for (const s of sources) {
      const m = await openModel(s, queue, promptsFor, promptCache);
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

function cacheFor(model: StepModel | undefined, settings: PromptCacheSettings): PromptCache | undefined {
  if (settings === false || (model && !canSnapshot(model))) return undefined;
  try {
    return new PromptCache({ maxBytes: DEFAULT_PROMPT_CACHE_BYTES, ...settings });
  } catch (err) {
    throw new ServerConfigError((err as Error).message);
  }
}

async function openModel(
  source: ModelSource,
  defaultQueue: number,
  promptsFor: (t: Tokenizer) => PromptTokenizer,
  promptCache: PromptCacheSettings,
): Promise<ServedModel> {
  const queueSize = source.queue ?? defaultQueue;
  if (!Number.isInteger(queueSize) || queueSize < 0) {
    throw new ServerConfigError(`queue must be an integer ≥ 0, got ${queueSize}`);
  }
  const created = Math.floor(Date.now() / 1000);
  if ("model" in source) {
    if (!source.name) throw new ServerConfigError("a ready model needs a name");
    const { model, tokenizer } = source;
    const prompts = promptsFor(tokenizer);
    const cache = cacheFor(model, promptCache);
    return {
      name: source.name,
      model,
      tokenizer,
      prompts,
      backend: source.backend ?? "custom",
      sampling: withTop1Default(model, source.sampling ?? {}),
      queue: new ModelQueue(source.name, queueSize),
      promptCache: cache,
      created,
      speculation: speculationDefaults(source.name, model, source),
      dispose: async () => {
        await prompts.close();
        cache?.clear();
        if (source.dispose) await model.dispose();
      },
    };
  }

  const name = source.name ?? defaultName(source.path);
  const { path, name: _name, sampling, queue, ...options } = source;
  const loaded = await loadModel(path, options);
  const prompts = promptsFor(loaded.tokenizer);
  const cache = cacheFor(loaded.model, promptCache);
  return {
    name,
    model: loaded.model,
    tokenizer: loaded.tokenizer,
    prompts,
    backend: loaded.backend.detail,
    sampling: withTop1Default(loaded.model, { ...loaded.sampling, ...sampling }),
    queue: new ModelQueue(name, queueSize),
    promptCache: cache,
    created,
    speculation: loaded.speculation ?? {},
    dispose: async () => {
      await prompts.close();
      cache?.clear();
      await loaded.dispose();
    },
  };
}

/** `/models/Qwen3.5-0.8B-ane/` → `Qwen3.5-0.8B-ane`; `hf:Qwen/Qwen3.5-0.8B@main` → `Qwen/Qwen3.5-0.8B`. */
export function defaultName(path: string): string {
  if (path.startsWith("hf:")) return path.slice(3).split("@")[0];
  return basename(resolve(path));
}
