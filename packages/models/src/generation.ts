/**
 * Sampling defaults: a checkpoint's generation_config.json holds its authors' (Qwen3.5: temperature,
 * top_p, top_k); like vLLM, they fill in what a request leaves out. Without one, OpenAI's defaults.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { SamplingOptions, StepModel } from "@anemll-qwen35/generate";

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
export function withTop1Default(model: StepModel, sampling: SamplingOptions): SamplingOptions {
  if (model.outputKind !== "top1") return sampling;
  return { ...sampling, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 };
}
