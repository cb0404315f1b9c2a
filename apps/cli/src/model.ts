/**
 * Opening a model for run/chat: a converted chain (coreml or reference backend) or a Qwen3.5
 * checkpoint (mlx backend) — the same opening the server uses.
 */
import type { StepModel, Tokenizer } from "@anemll-qwen35/generate";
import type { ComputeUnits } from "@anemll-qwen35/runtime-ane";
import { type BackendName, openModelPath } from "@anemll-qwen35/server";
import type { Command } from "commander";
import { choice } from "./options.js";

export interface ModelOptions {
  /** Default: mlx for a checkpoint; for a converted chain coreml on macOS, reference elsewhere. */
  backend?: BackendName;
  precision: "fp32" | "fp16";
  computeUnits: ComputeUnits;
  contextOverflow: "error" | "slide";
}

export function addModelOptions(cmd: Command): Command {
  return cmd
    .option(
      "--backend <name>",
      "coreml (Core ML on the ANE, macOS 15+), reference (MIL interpreter, any OS) or mlx (a Hugging Face checkpoint on MLX); default: from the folder",
      choice("--backend", ["reference", "coreml", "mlx"] as const),
    )
    .option(
      "--precision <p>",
      "reference backend: fp32, or fp16 to emulate the ANE's rounding",
      choice("--precision", ["fp32", "fp16"] as const),
      "fp32",
    )
    .option(
      "--compute-units <u>",
      "coreml backend: cpuAndNeuralEngine, cpuOnly, cpuAndGPU or all",
      choice("--compute-units", ["cpuAndNeuralEngine", "cpuOnly", "cpuAndGPU", "all"] as const),
      "cpuAndNeuralEngine",
    )
    .option(
      "--context-overflow <how>",
      "error, or slide the window when the context is full",
      choice("--context-overflow", ["error", "slide"] as const),
      "error",
    );
}

export async function openModel(
  path: string,
  o: ModelOptions,
  notice: (s: string) => void,
): Promise<{
  model: StepModel & { dispose(): void | Promise<void> };
  tokenizer: Tokenizer;
  describe: string;
}> {
  const opened = await openModelPath({
    path,
    backend: o.backend,
    precision: o.precision,
    computeUnits: o.computeUnits,
    contextOverflow: o.contextOverflow,
    onCompile: (e) => {
      if (e.stage === "start")
        notice(`compiling ${e.component} for Core ML (the first ANE compile can take minutes)…`);
    },
  });
  return { model: opened.model, tokenizer: opened.tokenizer, describe: opened.backend };
}
