/**
 * Opening a model on "the ANE" or "the GPU", whatever that means on this machine: the ANE is Core
 * ML on macOS 15+ with the addon built, otherwise the reference MIL interpreter (fp16-emulated, the
 * same program); the GPU is MLX on Metal, or MLX's CPU backend on Linux. Every open reports its
 * load time (and Core ML compile time) separately from the steps that follow.
 */
import type { StepModel } from "@anemll-qwen35/generate";
import { type BackendChoice, chooseBackend, type LoadModelOptions, loadModel } from "@anemll-qwen35/models";
import { type Backend, coreMLBackend, referenceBackend } from "@anemll-qwen35/runtime-ane";
import { mlxAvailable, mx } from "@anemll-qwen35/runtime-mlx";
import type { BackendId } from "./schema.js";
import { type ComponentTimer, timedBackend } from "./timed-backend.js";

export interface Opened<M extends StepModel = StepModel> {
  readonly model: M;
  readonly backend: BackendId;
  /** Wall time of the open call (Core ML: compile + load; reference: read + check; MLX: weights). */
  readonly loadMs: number;
  /** Core ML compile seconds per component (first use of a package only). */
  readonly compileSeconds: Record<string, number>;
}

/** The ANE side's backend choice: auto, coreml or reference. */
export type AneBackendChoice = Exclude<BackendChoice, "mlx">;

/** Which ANE backend "auto" picks here. */
export function aneBackendHere(choice: AneBackendChoice = "auto"): "coreml" | "reference" {
  return chooseBackend("chain", choice, "the ANE side") as "coreml" | "reference";
}

/** The raw ANE backend for `choice`, for scenarios that drive packages themselves (hand-off). */
export function aneBackend(choice: AneBackendChoice = "auto"): { backend: Backend; id: BackendId } {
  if (aneBackendHere(choice) === "reference") {
    return { backend: referenceBackend({ precision: "fp16" }), id: "ane-reference" };
  }
  return { backend: coreMLBackend(), id: "ane-coreml" };
}

export interface OpenAneOptions {
  readonly backend?: AneBackendChoice;
  /** Reference backend arithmetic (default fp16: rounds like the ANE). */
  readonly precision?: "fp16" | "fp32";
  /** Times every component's predict (ms per super-block). */
  readonly timer?: ComponentTimer;
  /** Prompts through the packages' prefill function when they have one (default true). */
  readonly prefillFunction?: boolean;
}

/** Opens with loadModel, timing the open and collecting Core ML compile seconds. */
async function timedLoad(dir: string, o: LoadModelOptions, backend: BackendId): Promise<Opened> {
  const compileSeconds: Record<string, number> = {};
  const t0 = performance.now();
  // token ids only: the scenarios feed ids, and synthetic checkpoints carry no tokenizer
  const loaded = await loadModel(dir, {
    ...o,
    tokenizer: false,
    onProgress: (e) => {
      if (e.stage === "compile" && e.state === "done" && e.seconds !== undefined)
        compileSeconds[e.component] = e.seconds;
    },
  });
  return { model: loaded.model, backend, loadMs: performance.now() - t0, compileSeconds };
}

export function openAne(dir: string, o: OpenAneOptions = {}): Promise<Opened> {
  const which = aneBackendHere(o.backend);
  const timer = o.timer;
  return timedLoad(
    dir,
    {
      backend: which,
      precision: o.precision ?? "fp16",
      prefillFunction: o.prefillFunction,
      wrapBackend: timer ? (b) => timedBackend(b, timer) : undefined,
    },
    which === "coreml" ? "ane-coreml" : "ane-reference",
  );
}

export interface MlxStatus {
  readonly available: boolean;
  readonly reason?: string;
  readonly version?: string;
}

/** Whether MLX (the addon and its model loader) can run here, with the reason when not. */
export function mlxStatus(): MlxStatus {
  return mlxAvailable();
}

/** "mlx-gpu" when MLX runs on Metal, else "mlx-cpu". */
export function mlxBackendHere(): BackendId {
  try {
    return mx.metalAvailable() && mx.defaultDevice() === "gpu" ? "mlx-gpu" : "mlx-cpu";
  } catch {
    return "mlx-cpu";
  }
}

export interface OpenMlxOptions {
  /** Load-time affine quantization (mlx-lm style), or none. */
  readonly bits?: 4 | 8;
  /** Weight / activation dtype (default float32 for fixtures, the config's for real checkpoints). */
  readonly dtype?: "float32" | "bfloat16" | "float16";
  readonly contextLength?: number;
  /** Allocate the KV cache for `contextLength` at once (the "pre-expanded KV cache" variant). */
  readonly preallocate?: boolean;
}

export function openMlx(checkpoint: string, o: OpenMlxOptions = {}): Promise<Opened> {
  return timedLoad(
    checkpoint,
    {
      backend: "mlx",
      bits: o.bits,
      dtype: o.dtype,
      contextLength: o.contextLength,
      preallocateKv: o.preallocate,
    },
    mlxBackendHere(),
  );
}
