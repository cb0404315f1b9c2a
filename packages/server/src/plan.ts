/**
 * What both endpoints settle before a request joins its model's queue: the prompt ids, sampling and
 * limits. Everything a request can get wrong is found here, so it is refused (400) at once instead of
 * after waiting its turn.
 */

import { InvalidArgumentError } from "@anemll-qwen35/core";
import { Sampler, type SamplingOptions, UnsupportedSamplingError } from "@anemll-qwen35/generate";
import { ApiError, invalidParam } from "./errors.js";
import type { ServedModel } from "./models.js";

export interface GenerationPlan {
  readonly promptIds: number[];
  readonly sampling: SamplingOptions;
  readonly maxTokens: number | undefined;
  readonly stop: string[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** Prompt positions worth a prompt-cache snapshot (e.g. where the system prompt and tools end). */
  readonly cacheCheckpoints?: readonly number[];
}

/** The sampling fields OpenAI (and vLLM) requests carry. */
export interface SamplingFields {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  seed?: number;
}

/** The request's sampling over the model's defaults; refuses what the model cannot sample. */
export function planSampling(req: SamplingFields, served: ServedModel): SamplingOptions {
  const s: SamplingOptions = { ...served.sampling };
  if (req.temperature !== undefined) s.temperature = req.temperature;
  if (req.top_p !== undefined) s.topP = req.top_p;
  if (req.top_k !== undefined) s.topK = req.top_k === -1 ? 0 : req.top_k; // vLLM: -1 = off
  if (req.min_p !== undefined) s.minP = req.min_p;
  if (req.presence_penalty !== undefined) s.presencePenalty = req.presence_penalty;
  if (req.frequency_penalty !== undefined) s.frequencyPenalty = req.frequency_penalty;
  if (req.repetition_penalty !== undefined) s.repetitionPenalty = req.repetition_penalty;
  if (req.seed !== undefined) s.seed = req.seed;
  try {
    const sampler = new Sampler(s);
    if (served.model.outputKind === "top1") sampler.assertTop1Compatible();
  } catch (err) {
    if (err instanceof UnsupportedSamplingError) {
      throw invalidParam(
        "temperature",
        `model "${served.name}" computes only the most likely token (an arg-max head), so it decodes ` +
          "greedily: use temperature 0 and no penalties",
        "unsupported_sampling",
      );
    }
    if (err instanceof InvalidArgumentError) throw invalidParam(null, err.message);
    throw err;
  }
  return s;
}

/**
 * Refuses, before encoding it, a prompt of `chars` characters that cannot fit: no token stands for
 * more than `maxTokenChars` characters, so it needs at least chars / maxTokenChars tokens. This
 * bounds what a request can make the server tokenize by the model's context.
 */
export function promptCanFit(chars: number, served: ServedModel, param: string): void {
  const ctx = served.model.contextLength;
  const atLeast = Math.ceil(chars / served.tokenizer.maxTokenChars);
  if (atLeast > ctx) {
    throw new ApiError(
      400,
      `This model's maximum context length is ${ctx} tokens, but the prompt is at least ${atLeast} tokens ` +
        `(${chars} characters). Shorten the ${param}, or serve a model converted with a longer context.`,
      { param, code: "context_length_exceeded" },
    );
  }
}

/** A prompt longer than the model's context is the client's to fix: 400, as OpenAI answers. */
export function promptFits(promptTokens: number, served: ServedModel, param: string): void {
  if (promptTokens === 0)
    throw invalidParam(param, "the prompt is empty (Qwen3.5 has no BOS token to start from)");
  const ctx = served.model.contextLength;
  if (promptTokens > ctx) {
    throw new ApiError(
      400,
      `This model's maximum context length is ${ctx} tokens, but the prompt is ${promptTokens} tokens. ` +
        `Shorten the ${param}, or serve a model converted with a longer context.`,
      { param, code: "context_length_exceeded" },
    );
  }
}
