/**
 * loadModel(): the one way to open a model — a converted chain on the ANE (Core ML) or the reference
 * interpreter, or a Qwen3.5 checkpoint on MLX — with its tokenizer, chat template and sampling
 * defaults, ready to generate. The shape follows the Node LLM libraries (node-llama-cpp's
 * `loadModel`, transformers.js' `from_pretrained`): one async call, an object to dispose.
 */
import { existsSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import {
  type ChatTemplate,
  canSpeculate,
  type GenerateOptions,
  type Generation,
  generate,
  loadTokenizer,
  MissingTokenizerFileError,
  type SamplingOptions,
  SpeculativeUnsupportedError,
  type StepModel,
  type Tokenizer,
} from "@anemll-qwen35/generate";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { resolveModelRef } from "@anemll-qwen35/ir/checkpoint";
import { ChainRunner, coreMLBackend, referenceBackend } from "@anemll-qwen35/runtime-ane";
import { type BackendName, chooseBackend, modelKind } from "./backend.js";
import { ModelLoadError } from "./errors.js";
import { generationDefaults, withTop1Default } from "./generation.js";
import type { LoadModelOptions, OpenedRuntime } from "./load-options.js";
import { loadMlx } from "./mlx.js";

export interface BackendInfo {
  readonly name: BackendName;
  /** e.g. "reference (fp32)", "coreml (cpuAndNeuralEngine)", "mlx (bfloat16, 4-bit)". */
  readonly detail: string;
}

/** An open model. `T` is `undefined` when it was loaded with `tokenizer: false`. */
export interface LoadedModel<T extends Tokenizer | undefined = Tokenizer> extends AsyncDisposable {
  /** The stateful model generate() drives (ChainRunner for chains, MlxQwen35 for checkpoints). */
  readonly model: StepModel;
  readonly tokenizer: T;
  /** The tokenizer folder's chat template, when it has one. */
  readonly chatTemplate: ChatTemplate | undefined;
  /** Sampling defaults (generation_config.json, else OpenAI's); greedy for an argmax-only head. */
  readonly sampling: SamplingOptions;
  readonly backend: BackendInfo;
  /** The local folder the model was read from (an `hf:` reference resolves into the HF cache). */
  readonly dir: string;
  readonly contextLength: number;
  /** Set when loaded with `speculative`: what every generate() of it uses unless the call says otherwise. */
  readonly speculation?: { readonly speculative: "mtp"; readonly gamma?: number };
  /** generate() over this model and tokenizer, with `sampling` (and `speculation`) under the caller's options. */
  generate(options: GenerateOptions): Generation;
  dispose(): Promise<void>;
}

/** Opens `ref` (a folder or `hf:owner/name[@revision]`); see LoadModelOptions. */
export async function loadModel(
  ref: string,
  options: LoadModelOptions & { tokenizer: false },
): Promise<LoadedModel<undefined>>;
export async function loadModel(ref: string, options?: LoadModelOptions): Promise<LoadedModel>;
export async function loadModel(
  ref: string,
  options: LoadModelOptions = {},
): Promise<LoadedModel<Tokenizer | undefined>> {
  if (!ref.startsWith("hf:") && !existsSync(ref)) throw new ModelLoadError(ref, "no such folder");
  let dir: string;
  try {
    dir = await resolveModelRef(ref, { onProgress: options.onProgress, signal: options.signal });
  } catch (err) {
    throw new ModelLoadError(ref, (err as Error).message, { cause: err });
  }
  const kind = modelKind(dir, ref);
  const backend = chooseBackend(kind, options.backend ?? "auto", ref);
  if (options.distributed && backend !== "mlx") {
    throw new ModelLoadError(ref, `only the mlx backend splits a model across ranks, not ${backend}`);
  }
  const opened =
    backend === "mlx" ? await loadMlx(ref, dir, options) : await loadChain(dir, backend, options);
  try {
    const tokenizer =
      options.tokenizer === false
        ? undefined
        : await openTokenizer(ref, options.tokenizer ?? dir, opened.eosTokenIds);
    const sampling = withTop1Default(opened.model, await generationDefaults(dir));
    const model = opened.model;
    const speculation = speculationDefaults(ref, model, options);
    let disposed = false;
    const dispose = async () => {
      if (disposed) return;
      disposed = true;
      await model.dispose();
    };
    return {
      model,
      tokenizer,
      ...(speculation.speculative ? { speculation: { ...speculation, speculative: "mtp" as const } } : {}),
      chatTemplate: tokenizer?.chatTemplateSource === undefined ? undefined : tokenizer.chatTemplate,
      sampling,
      backend: { name: backend, detail: opened.detail },
      dir,
      contextLength: model.contextLength,
      generate(o: GenerateOptions): Generation {
        if (!tokenizer) {
          throw new ModelLoadError(
            ref,
            "this model was loaded with tokenizer: false and cannot generate text",
          );
        }
        return generate(model, tokenizer, {
          ...speculation,
          ...o,
          sampling: { ...sampling, ...o.sampling },
        });
      },
      dispose,
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await opened.model.dispose();
    throw err;
  }
}

async function loadChain(
  dir: string,
  name: "coreml" | "reference",
  o: LoadModelOptions,
): Promise<OpenedRuntime> {
  const onCompile = (e: { component: string; stage: "start" | "done"; seconds?: number }) =>
    o.onProgress?.({ stage: "compile", component: e.component, state: e.stage, seconds: e.seconds });
  const raw =
    name === "coreml"
      ? coreMLBackend({
          computeUnits: o.computeUnits,
          onCompile,
          onNotice: (message) => o.onProgress?.({ stage: "notice", message }),
        })
      : referenceBackend({ precision: o.precision ?? "fp32" });
  const backend = o.wrapBackend ? o.wrapBackend(raw) : raw;
  const manifest = await readChainManifest(dir);
  const model = await ChainRunner.load(dir, {
    backend,
    contextOverflow: o.contextOverflow ?? "error",
    ringSinks: o.ringSinks,
    prefillFunction: o.prefillFunction,
    dropPrefill: o.dropPrefill,
    prefillCheck: o.prefillCheck,
    // the MTP head and the verify functions, when asked to speculate (chains converted with the head)
    speculative: o.speculative === "mtp",
    onProgress: (e) => o.onProgress?.(e),
    signal: o.signal,
  });
  const detail =
    name === "coreml"
      ? `coreml (${o.computeUnits ?? "cpuAndNeuralEngine"})`
      : `reference (${o.precision ?? "fp32"})`;
  return { model, detail, eosTokenIds: manifest.tokenizer.eosTokenIds };
}

async function openTokenizer(
  ref: string,
  folder: string,
  eosTokenIds: readonly number[],
): Promise<Tokenizer> {
  const dir = resolvePath(folder);
  try {
    return await loadTokenizer(dir, { eosTokenIds: [...eosTokenIds] });
  } catch (err) {
    if (err instanceof MissingTokenizerFileError && err.file.endsWith("tokenizer.json")) {
      throw new ModelLoadError(
        ref,
        `no tokenizer in ${dir} (${(err as Error).message}); give the folder that has tokenizer.json ` +
          "(the `tokenizer` option, --tokenizer on the command line), or tokenizer: false for token ids only",
        { cause: err },
      );
    }
    throw err;
  }
}

/** LoadModelOptions' speculative / gamma, checked against the model now rather than at the first request. */
export function speculationDefaults(
  ref: string,
  model: StepModel,
  o: { speculative?: "mtp"; gamma?: number },
): { speculative?: "mtp"; gamma?: number } {
  if (o.speculative === undefined) return {};
  if (o.speculative !== "mtp")
    throw new InvalidArgumentError(`speculative must be "mtp", got ${JSON.stringify(o.speculative)}`);
  if (!canSpeculate(model)) {
    throw new SpeculativeUnsupportedError(
      `${ref}: speculative "mtp" needs the model's multi-token-prediction head, and this one has none ` +
        "(a checkpoint without mtp.* tensors or loaded with mtp: false, or a chain converted without the head)",
    );
  }
  const k = model.maxDraftTokens;
  if (o.gamma !== undefined && (!Number.isInteger(o.gamma) || o.gamma < 1 || o.gamma > k))
    throw new InvalidArgumentError(
      `${ref}: gamma must be an integer from 1 to ${k} (the model's maxDraftTokens), got ${o.gamma}`,
    );
  return { speculative: "mtp", ...(o.gamma !== undefined ? { gamma: o.gamma } : {}) };
}
