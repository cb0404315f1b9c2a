/** Sampling and prompt options shared by run and chat. */
import type { GenerationStats, SamplingOptions } from "@anemll-qwen35/generate";
import type { Command } from "commander";
import { int, num } from "./options.js";

export function addSamplingOptions(cmd: Command): Command {
  return cmd
    .option("--max-tokens <n>", "most tokens to generate", int("--max-tokens", 1), 256)
    .option("--temperature <t>", "0 = greedy", num("--temperature", 0), 0)
    .option("--top-k <k>", "keep the k most likely tokens (0 = off)", int("--top-k", 0), 0)
    .option("--top-p <p>", "nucleus sampling (1 = off)", num("--top-p", 0), 1)
    .option("--min-p <p>", "drop tokens below p × the top probability (0 = off)", num("--min-p", 0), 0)
    .option("--repetition-penalty <r>", "1 = off", num("--repetition-penalty", 0), 1)
    .option("--presence-penalty <p>", "0 = off", num("--presence-penalty"), 0)
    .option("--seed <n>", "sampling seed", int("--seed", 0))
    .option("--stop <text...>", "stop strings")
    .option("--think", "let the model think first (Qwen3.5 enable_thinking)");
}

export function samplingFrom(o: Record<string, unknown>): SamplingOptions {
  return {
    temperature: o.temperature as number,
    topK: o.topK as number,
    topP: o.topP as number,
    minP: o.minP as number,
    repetitionPenalty: o.repetitionPenalty as number,
    presencePenalty: o.presencePenalty as number,
    seed: o.seed as number | undefined,
  };
}

export function statsLine(s: GenerationStats, finish: string): string {
  return (
    `prompt ${s.promptTokens} tok · prefill ${s.prefillTokensPerSecond.toFixed(1)} tok/s · ` +
    `ttft ${s.timeToFirstTokenMs.toFixed(0)} ms · decode ${s.decodeTokensPerSecond.toFixed(2)} tok/s · ` +
    `${s.generatedTokens} tokens · ${finish} · ${memoryLine()}`
  );
}

/** Resident memory of this process now and its peak so far (getrusage's max RSS, in KiB on every OS). */
export function memoryStats(): { rssBytes: number; peakRssBytes: number } {
  return { rssBytes: process.memoryUsage().rss, peakRssBytes: process.resourceUsage().maxRSS * 1024 };
}

export function memoryLine(m = memoryStats()): string {
  const mb = (b: number) => `${(b / 2 ** 20).toFixed(0)} MB`;
  return `RSS ${mb(m.rssBytes)} (peak ${mb(m.peakRssBytes)})`;
}
