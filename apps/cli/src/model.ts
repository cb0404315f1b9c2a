/**
 * The model options run, chat, serve and demo share, and opening a model with them through
 * @anemll-qwen35/models' loadModel (a converted chain on Core ML or the reference interpreter, a
 * checkpoint on MLX).
 */

import type { ComputeUnits } from "@anemll-qwen35/coreml";
import {
  type BackendChoice,
  type LoadedModel,
  type LoadModelOptions,
  loadModel,
} from "@anemll-qwen35/models";
import type { Command } from "commander";
import { COMPUTE_UNITS, choice, int } from "./options.js";

export interface ModelOptions {
  backend: BackendChoice;
  precision: "fp32" | "fp16";
  computeUnits: ComputeUnits;
  contextOverflow: "error" | "slide" | "ring";
  ringSinks?: number;
  dropPrefill?: boolean;
  tokenizer?: string;
  ctx?: number;
  dtype?: "float32" | "bfloat16" | "float16";
  bits?: 4 | 8;
  recheck?: boolean;
  speculative?: "mtp";
  gamma?: number;
}

export function addModelOptions(cmd: Command): Command {
  return cmd
    .option(
      "--backend <name>",
      "auto, coreml (Core ML on the ANE, macOS 15+), reference (MIL interpreter, any OS) or mlx (a Qwen3.5 checkpoint on MLX); auto: coreml where available for a converted chain, else reference; mlx for a checkpoint",
      choice("--backend", ["auto", "coreml", "reference", "mlx"] as const),
      "auto",
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
      choice("--compute-units", COMPUTE_UNITS),
      "cpuAndNeuralEngine",
    )
    .option(
      "--context-overflow <how>",
      "converted chains, when the context is full: error; slide the window (prefills the kept tokens again); or ring (KV row p mod ctx: attention sees the sinks and the latest tokens, the GatedDeltaNet state the whole history)",
      choice("--context-overflow", ["error", "slide", "ring"] as const),
      "error",
    )
    .option(
      "--ring-sinks <n>",
      "--context-overflow ring: KV rows that keep the first tokens (attention sinks; default 4)",
      int("--ring-sinks", 0),
    )
    .option(
      "--drop-prefill",
      "converted chains: unload the prefill functions once a prompt is in (less memory while generating; each next prompt loads them again)",
    )
    .option(
      "--recheck",
      "converted chains on Core ML: check the prefill function again (placement by MLComputePlan, one call timed against T decode steps) instead of using the verdict recorded beside the model",
    )
    .option("--tokenizer <dir>", "folder with tokenizer.json, if not the model's own (relative to here)")
    .option("--ctx <n>", "mlx backend: most tokens per sequence (default: the checkpoint's)", int("--ctx", 1))
    .option(
      "--dtype <t>",
      "mlx backend: float32, bfloat16 or float16 (default: the checkpoint's)",
      choice("--dtype", ["float32", "bfloat16", "float16"] as const),
    )
    .option(
      "--bits <n>",
      "mlx backend: quantize the weights to 4 or 8 bits at load (a 9B needs ~18 GB in bfloat16, ~5 GB at 4 bits)",
      (v: string) => (choice("--bits", ["4", "8"] as const)(v) === "4" ? 4 : 8),
    )
    .option(
      "--speculative <draft>",
      "speculative decoding: mtp drafts with the model's own multi-token-prediction head and verifies the drafts in one call (greedy output unchanged, sampling keeps the distribution)",
      choice("--speculative", ["mtp"] as const),
    )
    .option("--gamma <n>", "--speculative: draft tokens per round (default 2)", int("--gamma", 1));
}

/** The command line's model options as loadModel options. */
export function loadOptions(o: ModelOptions, notice: (s: string) => void): LoadModelOptions {
  return {
    backend: o.backend,
    precision: o.precision,
    computeUnits: o.computeUnits,
    contextOverflow: o.contextOverflow,
    ringSinks: o.ringSinks,
    dropPrefill: o.dropPrefill,
    tokenizer: o.tokenizer,
    contextLength: o.ctx,
    dtype: o.dtype,
    bits: o.bits,
    ...(o.recheck ? { prefillCheck: "recheck" as const } : {}),
    speculative: o.speculative,
    gamma: o.gamma,
    onProgress: (e) => {
      if (e.stage === "notice") notice(e.message);
      if (e.stage === "prefill-check") {
        const r = e.result;
        if (r.source === "checked") {
          notice(`prefill check: ${r.reason}`);
          for (const w of r.warnings) notice(`prefill check: ${w}`);
        } else if (!r.keep) {
          notice(`prefill check (recorded ${r.checkedAt}, --recheck to measure again): ${r.reason}`);
        }
      }
      if (e.stage === "compile" && e.state === "start")
        notice(`compiling ${e.component} for Core ML (the first ANE compile can take minutes)…`);
      if (e.stage === "verify") notice(`checking ${e.component} against model.json's sha256 (once)…`);
    },
  };
}

export async function openModel(
  path: string,
  o: ModelOptions,
  notice: (s: string) => void,
): Promise<LoadedModel> {
  const loaded = await loadModel(path, loadOptions(o, notice));
  const mlxOnly = [
    o.bits !== undefined && "--bits",
    o.dtype !== undefined && "--dtype",
    o.ctx !== undefined && "--ctx",
  ].filter(Boolean);
  if (loaded.backend.name !== "mlx" && mlxOnly.length > 0) {
    notice(
      `${mlxOnly.join(", ")}: mlx backend only, not used for a converted chain (convert fixed its weights and context)`,
    );
  }
  return loaded;
}
