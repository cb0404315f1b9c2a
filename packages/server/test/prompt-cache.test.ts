/**
 * The prompt cache end to end, through the openai client against the real converted tiny chain on
 * the reference backend: requests sharing a system prompt and tools restore that state instead of
 * prefilling it, say exactly what a server without a cache says, and report the restored tokens
 * in usage.prompt_tokens_details.cached_tokens.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type OpenAIServer, type RequestLog, ServerConfigError } from "../src/index.js";
import { FIXTURE } from "./helpers.js";

const TOOL = {
  type: "function" as const,
  function: {
    name: "lookup_order",
    description: "Finds an order by its number and returns its status and items",
    parameters: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
  },
};
const SYSTEM = "You are the support agent of a small shop. Be short and polite. Use the tools.";

// MLX runs on the CPU on Linux; without its addon its half of the tests cannot run.
const mlx = await import("@anemll-qwen35/runtime-mlx")
  .then((m) => m.mlxAvailable())
  .catch((e: Error) => ({ available: false, reason: e.message }));

let cached: OpenAIServer;
let plain: OpenAIServer;
let withCache: OpenAI;
let without: OpenAI;
const logs: RequestLog[] = [];

const client = (url: string) =>
  new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", maxRetries: 0, timeout: timeLimit(60_000) });
const ask = (model: string, question: string, tools = false) => ({
  model,
  messages: [
    { role: "system" as const, content: SYSTEM },
    { role: "user" as const, content: question },
  ],
  ...(tools ? { tools: [TOOL] } : {}),
  max_tokens: 4,
  temperature: 0,
});

beforeAll(async () => {
  const dir = join(mkdtempSync(join(tmpdir(), "server-cache-")), "tiny");
  await convert({ model: FIXTURE, out: dir, ctx: 128, fuse: 1 });
  // the same models twice: with the default prompt cache, and with none
  const models = [
    { name: "chain", path: dir, backend: "reference" as const },
    ...(mlx.available ? [{ name: "mlx", path: FIXTURE, dtype: "float32" as const }] : []),
  ];
  cached = await createServer({ models, port: 0, onRequestEnd: (l) => logs.push(l) });
  plain = await createServer({ models, port: 0, promptCache: false });
  withCache = client(await cached.listen());
  without = client(await plain.listen());
}, timeLimit(120_000));

afterAll(async () => {
  await cached?.close();
  await plain?.close();
});

describe("the prompt cache through the openai client", () => {
  // The chain on the reference interpreter is slow (tens of ms a token): it gets the system prompt
  // alone; MLX also gets the tool schemas (the template's tool instructions are ~250 tokens).
  for (const [model, tools] of [
    ["chain", false],
    ["mlx", true],
  ] as const) {
    it.skipIf(model === "mlx" && !mlx.available)(
      `${model}: restores the shared system turn${tools ? " and tools" : ""}, answers as without a cache${model === "mlx" && !mlx.available ? ` — skipped: MLX unavailable (${mlx.reason})` : ""}`,
      async () => {
        const first = await withCache.chat.completions.create(ask(model, "Where is my order 1234?", tools));
        expect(first.usage?.prompt_tokens_details?.cached_tokens).toBe(0);

        const question = "Can I return the blue mug?";
        const second = await withCache.chat.completions.create(ask(model, question, tools));
        const reference = await without.chat.completions.create(ask(model, question, tools));
        const restored = second.usage?.prompt_tokens_details?.cached_tokens ?? 0;
        // the system turn: most of the prompt, but not the question
        expect(restored).toBeGreaterThan(tools ? 200 : 15);
        expect(restored).toBeLessThan((second.usage?.prompt_tokens ?? 0) - 5);
        expect(second.usage?.prompt_tokens).toBe(reference.usage?.prompt_tokens);
        expect(second.choices[0].message).toEqual(reference.choices[0].message);
        expect(reference.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
        expect(logs.at(-1)?.cachedTokens).toBe(restored);

        // the very same request again, streamed: all but the last prompt token come from the cache
        const again = await withCache.chat.completions.create({
          ...ask(model, question, tools),
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = "";
        let usage: OpenAI.CompletionUsage | null | undefined;
        for await (const c of again) {
          text += c.choices[0]?.delta.content ?? "";
          usage = c.usage ?? usage;
        }
        expect(usage?.prompt_tokens_details?.cached_tokens).toBe((usage?.prompt_tokens ?? 0) - 1);
        expect(text).toBe(reference.choices[0].message.content ?? "");
        const served = cached.models.find((m) => m.name === model);
        expect(served?.promptCache?.stats()).toMatchObject({ hits: 2, misses: 1 });
      },
      timeLimit(120_000),
    );
  }

  it(
    "serves raw completions that repeat a prompt",
    async () => {
      const prompt = "The shop opens at nine and closes at six; on Sundays it stays closed.";
      // MLX when it is here (fast); the chain otherwise
      const body = { model: mlx.available ? "mlx" : "chain", prompt, max_tokens: 3, temperature: 0 };
      const a = await withCache.completions.create(body);
      const b = await withCache.completions.create(body);
      const c = await without.completions.create(body);
      expect(a.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
      expect(b.usage?.prompt_tokens_details?.cached_tokens).toBe((b.usage?.prompt_tokens ?? 0) - 1);
      expect(b.choices[0].text).toBe(a.choices[0].text);
      expect(b.choices[0].text).toBe(c.choices[0].text);
    },
    timeLimit(60_000),
  );

  it("refuses a bad cache budget before opening any model", async () => {
    await expect(
      createServer({ models: [{ name: "x", path: "/nonexistent" }], promptCache: { maxBytes: -1 } }),
    ).rejects.toThrow(ServerConfigError);
  });
});
