/** Sampling, constraint and prompt options shared by run and chat, and the reply both stream. */
import { readFileSync } from "node:fs";
import {
  type GenerateOptions,
  type GenerationResult,
  type GenerationStats,
  generate,
  type JsonSchema,
  type SamplingOptions,
  type StepModel,
  type Tokenizer,
} from "@anemll-qwen35/generate";
import type { Command } from "commander";
import type { Context } from "./context.js";
import { int, num, UsageError } from "./options.js";
import type { Output } from "./output.js";

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

/** Constrained decoding: the answer held to a JSON Schema or an EBNF grammar read from a file. */
export function addConstraintOptions(cmd: Command): Command {
  return cmd
    .option("--json-schema <file>", "constrain the answer to one JSON value valid against this JSON Schema")
    .option("--grammar <file>", "constrain the answer to this EBNF grammar (xgrammar's dialect: root ::= …)");
}

/** The generate() options of --json-schema / --grammar; a file that cannot be read or parsed is a UsageError. */
export function constraintFrom(o: Record<string, unknown>): { jsonSchema?: JsonSchema; grammar?: string } {
  if (o.jsonSchema !== undefined && o.grammar !== undefined)
    throw new UsageError("give either --json-schema or --grammar, not both");
  const read = (option: string, file: string) => {
    try {
      return readFileSync(file, "utf8");
    } catch (err) {
      throw new UsageError(`${option} ${file}: ${(err as Error).message}`);
    }
  };
  if (typeof o.grammar === "string") return { grammar: read("--grammar", o.grammar) };
  if (typeof o.jsonSchema !== "string") return {};
  const text = read("--json-schema", o.jsonSchema);
  try {
    return { jsonSchema: JSON.parse(text) as JsonSchema };
  } catch (err) {
    throw new UsageError(`--json-schema ${o.jsonSchema}: not JSON (${(err as Error).message})`);
  }
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
  const spec = s.speculative
    ? ` · mtp ${(100 * s.speculative.acceptanceRate).toFixed(0)} % accepted, ${s.speculative.tokensPerCall.toFixed(2)} tok/call`
    : "";
  return (
    `prompt ${s.promptTokens} tok · prefill ${s.prefillTokensPerSecond.toFixed(1)} tok/s · ` +
    `ttft ${s.timeToFirstTokenMs.toFixed(0)} ms · decode ${s.decodeTokensPerSecond.toFixed(2)} tok/s${spec} · ` +
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

/** Prompts this long are announced at once; shorter ones only if no token has come after a while. */
const ANNOUNCE_TOKENS = 64;
const ANNOUNCE_AFTER_MS = 2000;

/**
 * Says "prefilling N prompt tokens…" on a long prompt, or when the first token is slow to come (a
 * big model, the reference interpreter): otherwise nothing shows until the answer starts. `done`
 * ends the wait (call it on the first chunk and when the generation ends).
 */
export function prefillNotice(notice: (s: string) => void): {
  onPrefill: (n: number) => void;
  done: () => void;
} {
  let timer: NodeJS.Timeout | undefined;
  const say = (n: number) => notice(`prefilling ${n.toLocaleString("en-US")} prompt tokens…`);
  return {
    onPrefill: (n) => {
      if (n >= ANNOUNCE_TOKENS) say(n);
      else timer = setTimeout(() => say(n), ANNOUNCE_AFTER_MS).unref();
    },
    done: () => clearTimeout(timer),
  };
}

/** Thinking text, dimmed on a terminal; as it is when piped (no escape codes in files). */
export function thinkingText(text: string, stdout: unknown): string {
  const tty = (stdout as { isTTY?: boolean }).isTTY === true && !process.env.NO_COLOR;
  return tty ? `\x1b[2m${text}\x1b[0m` : text;
}

/**
 * Generates a reply with the command's sampling options (`o`: --max-tokens, --stop, …), streaming
 * its text to stdout (thinking dimmed) and the prefill notice to stderr; ends the line when done.
 */
export async function streamReply(
  ctx: Context,
  out: Output,
  model: StepModel,
  tokenizer: Tokenizer,
  o: Record<string, unknown>,
  request: Pick<
    GenerateOptions,
    "messages" | "prompt" | "enableThinking" | "signal" | "jsonSchema" | "grammar"
  >,
): Promise<GenerationResult> {
  const waiting = prefillNotice(out.notice);
  const gen = generate(model, tokenizer, {
    ...request,
    onPrefill: waiting.onPrefill,
    maxTokens: o.maxTokens as number,
    sampling: samplingFrom(o),
    stop: o.stop as string[] | undefined,
    speculative: o.speculative as "mtp" | undefined,
    gamma: o.gamma as number | undefined,
  });
  for await (const chunk of gen) {
    waiting.done();
    if (chunk.type === "thinking") out.write(thinkingText(chunk.text, ctx.streams.stdout));
    else if (chunk.type === "text") out.write(chunk.text);
  }
  const r = await gen.result.finally(waiting.done);
  out.line();
  return r;
}
