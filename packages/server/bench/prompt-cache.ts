/**
 * Prompt-cache benchmark: time to first token of chat requests that share a ~1,000-token system
 * prompt (with a tool schema) and differ in their question, on two servers over the same model in
 * one process — one with the prompt cache, one without — asked in turn, through the openai client
 * (streamed; TTFT = time to the first chunk, which the server sends with the first token).
 *
 *   pnpm --filter @anemll-qwen35/server exec tsx --conditions=source bench/prompt-cache.ts --
 *     [--model synthetic-0.8b | tiny-chain | PATH] [--backend mlx|reference|coreml] [--bits 4]
 *     [--prefix-tokens 1000] [--rounds 3] [--out bench/results/prompt-cache-<model>.json]
 *
 * synthetic-0.8b: the synthetic Qwen3.5-0.8B checkpoint (real shapes, random weights; written if
 * missing) on MLX with the fixture tokenizer. tiny-chain: the tiny fixture converted to a chain
 * (ctx 2048) on the reference interpreter.
 */
import { mkdirSync, mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { convert } from "@anemll-qwen35/converter";
import { loadTokenizer } from "@anemll-qwen35/generate";
import type { PathModelSource } from "@anemll-qwen35/server";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import OpenAI from "openai";
import { createServer } from "../src/index.js";

const here = dirname(new URL(import.meta.url).pathname);
const fixtures = resolve(here, "../../../fixtures");
const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== "--"),
  options: {
    model: { type: "string", default: "synthetic-0.8b" },
    backend: { type: "string" },
    bits: { type: "string" },
    "prefix-tokens": { type: "string", default: "1000" },
    rounds: { type: "string", default: "3" },
    out: { type: "string" },
  },
});
const prefixTokens = Number(args["prefix-tokens"]);
const rounds = Number(args.rounds);

async function source(): Promise<{ src: PathModelSource; label: string; tokenizerDir: string }> {
  if (args.model === "synthetic-0.8b") {
    console.log("synthetic Qwen3.5-0.8B checkpoint (written once, then reused)…");
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    const tokenizerDir = join(fixtures, "tokenizer");
    return {
      src: {
        path: synth.dir,
        backend: "mlx",
        tokenizer: tokenizerDir,
        ...(args.bits ? { bits: Number(args.bits) as 4 | 8 } : {}),
      },
      label: `synthetic Qwen3.5-0.8B on MLX${args.bits ? ` (${args.bits}-bit at load)` : ""}`,
      tokenizerDir,
    };
  }
  if (args.model === "tiny-chain") {
    const dir = join(mkdtempSync(join(tmpdir(), "prompt-cache-bench-")), "tiny");
    await convert({ model: join(fixtures, "tiny-tied"), out: dir, ctx: 2048, fuse: 1 });
    return {
      src: { path: dir, backend: "reference" },
      label: "tiny fixture chain (ctx 2048) on the reference interpreter",
      tokenizerDir: join(fixtures, "tiny-tied"),
    };
  }
  const path = resolve(args.model as string);
  return {
    src: { path, ...(args.backend ? { backend: args.backend as "mlx" } : {}) },
    label: path,
    tokenizerDir: path,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<void> {
  const { src, label, tokenizerDir } = await source();
  const tokenizer = await loadTokenizer(tokenizerDir);
  // a system prompt of about `prefixTokens` tokens once rendered with the tool schema
  const sentence = "Orders ship within two days; refunds go back to the card used, within a week. ";
  let system = "";
  const tool = {
    type: "function" as const,
    function: {
      name: "lookup_order",
      description: "Finds an order by its number",
      parameters: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
    },
  };
  const rendered = (s: string) =>
    tokenizer.encodeChat([{ role: "system", content: s }], { tools: [tool], addGenerationPrompt: false }).ids
      .length;
  while (rendered(system) < prefixTokens) system += sentence;

  const t0 = performance.now();
  const cached = await createServer({ models: [{ ...src, name: "m" }], port: 0 });
  const plain = await createServer({ models: [{ ...src, name: "m" }], port: 0, promptCache: false });
  console.log(`${label}: two servers loaded in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const withCache = new OpenAI({
    baseURL: `${await cached.listen()}/v1`,
    apiKey: "x",
    maxRetries: 0,
    timeout: 3_600_000,
  });
  const without = new OpenAI({
    baseURL: `${await plain.listen()}/v1`,
    apiKey: "x",
    maxRetries: 0,
    timeout: 3_600_000,
  });

  const ttft = async (c: OpenAI, question: string) => {
    const t = performance.now();
    const stream = await c.chat.completions.create({
      model: "m",
      messages: [
        { role: "system", content: system },
        { role: "user", content: question },
      ],
      tools: [tool],
      max_tokens: 2,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let first = Number.NaN;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      if (Number.isNaN(first)) first = performance.now() - t;
      usage = chunk.usage ?? usage;
    }
    return {
      ttftMs: first,
      promptTokens: usage?.prompt_tokens ?? 0,
      cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
    };
  };

  try {
    // the first request of the cached server fills its cache (a miss, like the uncached ones)
    const cold = await ttft(withCache, "Hello, who are you?");
    console.log(`cold (fills the cache): ${cold.ttftMs.toFixed(0)} ms, ${cold.promptTokens} prompt tokens`);
    const runs: {
      round: number;
      cache: boolean;
      ttftMs: number;
      promptTokens: number;
      cachedTokens: number;
    }[] = [];
    for (let round = 0; round < rounds; round++) {
      const question = `Where is my order number ${1000 + round}? It has not arrived yet.`;
      // alternate which server goes first, so that neither always runs on a warmer machine
      const order = round % 2 === 0 ? [false, true] : [true, false];
      for (const cache of order) {
        const r = await ttft(cache ? withCache : without, question);
        runs.push({ round, cache, ...r });
        console.log(
          `round ${round + 1}: ${cache ? "cache   " : "no cache"} TTFT ${r.ttftMs.toFixed(0).padStart(7)} ms  ` +
            `(${r.promptTokens} prompt tokens, ${r.cachedTokens} cached)`,
        );
      }
    }
    const med = (cache: boolean) => median(runs.filter((r) => r.cache === cache).map((r) => r.ttftMs));
    const result = {
      benchmark: "server TTFT, repeated system prompt + tools, prompt cache on vs off",
      model: label,
      prefixTokens: rendered(system),
      promptTokens: runs[0].promptTokens,
      rounds,
      coldMs: cold.ttftMs,
      medianTtftMs: { withoutCache: med(false), withCache: med(true) },
      ratio: med(false) / med(true),
      runs,
      machine: { cpus: cpus().length, cpu: cpus()[0]?.model, loadavg: loadavg(), platform: process.platform },
      command:
        `pnpm --filter @anemll-qwen35/server exec tsx --conditions=source bench/prompt-cache.ts -- ${process.argv
          .slice(2)
          .filter((a) => a !== "--")
          .join(" ")}`.trim(),
      date: new Date().toISOString(),
    };
    console.log(
      `median TTFT: ${result.medianTtftMs.withoutCache.toFixed(0)} ms without the cache, ` +
        `${result.medianTtftMs.withCache.toFixed(0)} ms with it: ${result.ratio.toFixed(1)}×`,
    );
    const out = resolve(
      args.out ?? join(here, "results", `prompt-cache-${String(args.model).replace(/[^\w.-]+/g, "_")}.json`),
    );
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(`${out}.tmp`, `${JSON.stringify(result, null, 2)}\n`);
    renameSync(`${out}.tmp`, out);
    console.log(`→ ${out}`);
  } finally {
    await cached.close();
    await plain.close();
  }
}

await main();
