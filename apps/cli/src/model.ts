/** Opening a model for run/chat/verify/serve: a converted chain (reference or Core ML backend). */
import type { StepModel, Tokenizer } from "@anemll-qwen35/generate";
import { type ComputeUnits, openChain } from "@anemll-qwen35/runtime-ane";
import type { Command } from "commander";
import { choice } from "./options.js";

export type BackendChoice = "reference" | "coreml";

export interface ModelOptions {
  backend: BackendChoice;
  precision: "fp32" | "fp16";
  computeUnits: ComputeUnits;
  contextOverflow: "error" | "slide";
}

export function addModelOptions(cmd: Command): Command {
  return cmd
    .option(
      "--backend <name>",
      "coreml (Core ML on the ANE, macOS 15+) or reference (MIL interpreter, any OS)",
      choice("--backend", ["reference", "coreml"] as const),
      process.platform === "darwin" ? "coreml" : "reference",
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
  dir: string,
  o: ModelOptions,
  notice: (s: string) => void,
): Promise<{ model: StepModel & { dispose(): void }; tokenizer: Tokenizer; describe: string }> {
  const { model, tokenizer } = await openChain(dir, {
    backend: o.backend,
    precision: o.precision,
    computeUnits: o.computeUnits,
    contextOverflow: o.contextOverflow,
    onCompile: (e) => {
      if (e.stage === "start")
        notice(`compiling ${e.component} for Core ML (the first ANE compile can take minutes)…`);
    },
  });
  const describe =
    o.backend === "reference" ? `reference backend (${o.precision})` : `Core ML (${o.computeUnits})`;
  return { model, tokenizer, describe };
}
