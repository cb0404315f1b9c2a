/**
 * Opening a model on "the ANE" or "the GPU", whatever that means on this machine: the ANE is Core
 * ML on macOS 15+ with the addon built, otherwise the reference MIL interpreter (fp16-emulated, the
 * same program); the GPU is MLX on Metal, or MLX's CPU backend on Linux. Every open reports its
 * load time (and Core ML compile time) separately from the steps that follow.
 */
import type { StepModel } from "@anemll-qwen35/generate";
import {
  type Backend,
  ChainRunner,
  coreMLAvailability,
  coreMLBackend,
  referenceBackend,
} from "@anemll-qwen35/runtime-ane";
import { loadMlxModel, type MlxQwen35, mlxAvailable, mx } from "@anemll-qwen35/runtime-mlx";
import type { BackendId } from "./schema.js";
import { type ComponentTimer, timedBackend } from "./timed-backend.js";

export interface Opened<M extends StepModel> {
  readonly model: M;
  readonly backend: BackendId;
  /** Wall time of the open call (Core ML: compile + load; reference: read + check; MLX: weights). */
  readonly loadMs: number;
  /** Core ML compile seconds per component (first use of a package only). */
  readonly compileSeconds: Record<string, number>;
}

export type AneBackendChoice = "auto" | "coreml" | "reference";

/** Which ANE backend "auto" picks here. */
export function aneBackendHere(choice: AneBackendChoice = "auto"): "coreml" | "reference" {
  if (choice !== "auto") return choice;
  return coreMLAvailability().available ? "coreml" : "reference";
}

export interface OpenAneOptions {
  readonly backend?: AneBackendChoice;
  /** Reference backend arithmetic (default fp16: rounds like the ANE). */
  readonly precision?: "fp16" | "fp32";
  /** Times every component's predict (ms per super-block). */
  readonly timer?: ComponentTimer;
}

/** The raw ANE backend for `choice` (records Core ML compile seconds into `compileSeconds`). */
export function aneBackend(
  choice: AneBackendChoice = "auto",
  o: { precision?: "fp16" | "fp32"; compileSeconds?: Record<string, number> } = {},
): { backend: Backend; id: BackendId } {
  const which = aneBackendHere(choice);
  if (which === "reference") {
    return { backend: referenceBackend({ precision: o.precision ?? "fp16" }), id: "ane-reference" };
  }
  const backend = coreMLBackend({
    onCompile: (e) => {
      if (e.stage === "done" && e.seconds !== undefined && o.compileSeconds)
        o.compileSeconds[e.component] = e.seconds;
    },
  });
  return { backend, id: "ane-coreml" };
}

export async function openAne(dir: string, o: OpenAneOptions = {}): Promise<Opened<ChainRunner>> {
  const compileSeconds: Record<string, number> = {};
  const { backend, id } = aneBackend(o.backend, { precision: o.precision, compileSeconds });
  const t0 = performance.now();
  // ChainRunner.load rather than openChain: the scenarios feed token ids, and synthetic
  // checkpoints carry no tokenizer
  const model = await ChainRunner.load(dir, { backend: o.timer ? timedBackend(backend, o.timer) : backend });
  return {
    model,
    backend: id,
    loadMs: performance.now() - t0,
    compileSeconds,
  };
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

export async function openMlx(checkpoint: string, o: OpenMlxOptions = {}): Promise<Opened<MlxQwen35>> {
  const t0 = performance.now();
  const model = await loadMlxModel(checkpoint, {
    bits: o.bits,
    dtype: o.dtype,
    contextLength: o.contextLength,
    kvCache: o.preallocate ? { preallocate: true } : undefined,
  });
  return { model, backend: mlxBackendHere(), loadMs: performance.now() - t0, compileSeconds: {} };
}
