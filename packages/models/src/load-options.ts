/**
 * What loadModel() takes (LoadModelOptions, the progress it reports) and what each runtime's loader
 * hands back to it (OpenedRuntime): load.ts and mlx.ts both use them.
 */
import type { ComputeUnits } from "@anemll-qwen35/coreml";
import type { StepModel } from "@anemll-qwen35/generate";
import type { ResolveProgress } from "@anemll-qwen35/ir/checkpoint";
import type { Backend, PrefillCheckMode, PrefillCheckResult } from "@anemll-qwen35/runtime-ane";
import type { BackendChoice } from "./backend.js";

type DistributedOptions = import("@anemll-qwen35/runtime-mlx").DistributedOptions;

export type LoadProgress =
  | ResolveProgress
  | {
      readonly stage: "compile";
      readonly component: string;
      readonly state: "start" | "done";
      readonly seconds?: number;
    }
  | { readonly stage: "load"; readonly component: string; readonly index: number; readonly total: number }
  /** Hashing a package to check it against model.json (once; later loads use the cached digest). */
  | { readonly stage: "verify"; readonly component: string }
  | { readonly stage: "weights"; readonly done: number; readonly total: number }
  /** Chains on Core ML: whether the prefill function is kept, and why (once per load). */
  | { readonly stage: "prefill-check"; readonly result: PrefillCheckResult }
  /** Something to tell the user that does not stop the load (e.g. a Mac with no Neural Engine). */
  | { readonly stage: "notice"; readonly message: string };

export interface LoadModelOptions {
  /** Default "auto": coreml for a chain where Core ML is available, else reference; mlx for a checkpoint. */
  backend?: BackendChoice;
  /**
   * The folder with tokenizer.json (+ tokenizer_config.json, chat template); default: the model's own
   * folder. `false` loads no tokenizer (token ids only, e.g. synthetic checkpoints in benchmarks).
   */
  tokenizer?: string | false;
  /** reference backend: "fp32" (exact, default) or "fp16" (rounds every fp16 op result as the ANE does). */
  precision?: "fp32" | "fp16";
  /** coreml backend: default "cpuAndNeuralEngine". */
  computeUnits?: ComputeUnits;
  /**
   * Chains: "error" (default) when the context is full, "slide" the window (re-prefills the kept
   * tokens), or "ring" (ring-buffer KV: attention sees the sinks and the most recent tokens, the
   * GatedDeltaNet state keeps the whole history; see runtime-ane's README).
   */
  contextOverflow?: "error" | "slide" | "ring";
  /** Chains, "ring": KV rows that keep the first tokens (attention sinks; default 4). */
  ringSinks?: number;
  /** Chains: prompts through the packages' prefill function when they have one (default true). */
  prefillFunction?: boolean;
  /** Chains: unload the prefill functions once a prompt is in (runtime-ane's LoadChainOptions.dropPrefill). */
  dropPrefill?: boolean;
  /**
   * Chains on Core ML: check the prefill function before trusting it (placement by MLComputePlan,
   * one call timed against T decode steps) — "recorded" (default: the verdict recorded beside the
   * model, else check and record), "recheck", or "off" (see runtime-ane's README).
   */
  prefillCheck?: PrefillCheckMode;
  /** Wraps the chain backend (timing, tracing); chains only. */
  wrapBackend?: (backend: Backend) => Backend;
  /** mlx: most tokens per sequence (default: the config's max_position_embeddings). */
  contextLength?: number;
  /** mlx: weight and activation dtype (default: the checkpoint's, bfloat16 for official ones). */
  dtype?: "float32" | "bfloat16" | "float16";
  /** mlx: quantize projections, embedding and head at load (affine, as mlx-lm does). */
  bits?: 4 | 8;
  /** mlx: allocate the KV cache for the whole context at once instead of growing it. */
  preallocateKv?: boolean;
  /** mlx: load the checkpoint's multi-token-prediction head when it has one (default true; false saves its memory). */
  mtp?: boolean;
  /**
   * `"mtp"`: every `generate()` of the loaded model decodes speculatively with the model's own MTP
   * head (a call's own `speculative` / `gamma` win). Checked at load: SpeculativeUnsupportedError
   * when the model has no head, InvalidArgumentError for a `gamma` past its maxDraftTokens.
   */
  speculative?: "mtp";
  /** With `speculative`: draft tokens per round (default 2, at most the model's maxDraftTokens). */
  gamma?: number;
  /**
   * mlx: split the model across the ranks this process was launched with (`anemll-qwen35 launch`,
   * MLX's ring backend); this process is rank 0 and the others run runModelRank. Resolves once every
   * rank has loaded its layers.
   */
  distributed?: DistributedOptions;
  onProgress?: (event: LoadProgress) => void;
  signal?: AbortSignal;
}

/** A runtime's model before the tokenizer: what loadChain (load.ts) and loadMlx (mlx.ts) return. */
export interface OpenedRuntime {
  readonly model: StepModel;
  readonly detail: string;
  readonly eosTokenIds: readonly number[];
}
