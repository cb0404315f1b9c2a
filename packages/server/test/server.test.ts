import { resolve } from "node:path";
import { generate, loadTokenizer, type Tokenizer } from "@anemll-qwen35/generate";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type OpenAIServer, type RequestLog, type ServerOptions } from "../src/index.js";
import { convertTiny, FIXTURE, ScriptedModel } from "./helpers.js";

const WEATHER_TOOL = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city"],
    },
  },
};
// MLX runs on the CPU on Linux; without its addon the side-by-side test cannot run.
const mlx = await import("@anemll-qwen35/runtime-mlx")
  .then((m) => m.mlxAvailable())
  .catch((e: Error) => ({ available: false, reason: e.message }));

const CALL_XML =
  "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

let dir: string;
let tokenizer: Tokenizer;
let server: OpenAIServer;
let client: OpenAI;
const logs: RequestLog[] = [];

/** The scripted agent model: calls get_weather, then answers from the tool result. */
let agent: ScriptedModel;
/** Thinks, then answers. */
let thinker: ScriptedModel;
/** Talks for a long time, slowly (abort tests). */
let slow: ScriptedModel;

function openai(url: string, apiKey = "unused"): OpenAI {
  // maxRetries 0: the client would otherwise retry 429s and 5xx on its own.
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: timeLimit(30_000) });
}

/** A server on a free port serving `models` (name → scripted model) with the fixture tokenizer. */
function serveScripted(models: Record<string, ScriptedModel>, options: Omit<ServerOptions, "models"> = {}) {
  return createServer({
    models: Object.entries(models).map(([name, model]) => ({ name, model, tokenizer })),
    port: 0,
    ...options,
  });
}

/** A JSON body read without a schema (the tests check its fields). */
// biome-ignore lint/suspicious/noExplicitAny: response bodies are inspected field by field
type Json = any;
const json = (r: Response): Promise<Json> => r.json();

async function waitFor<T>(what: string, probe: () => T | undefined, ms = timeLimit(5_000)): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

beforeAll(async () => {
  dir = await convertTiny();
  tokenizer = await loadTokenizer(FIXTURE);
  agent = new ScriptedModel(tokenizer, (prompt) =>
    prompt.includes("<tool_response>") ? "It is sunny in Paris." : `Let me check.\n\n${CALL_XML}`,
  );
  thinker = new ScriptedModel(tokenizer, () => "the user says hi\n</think>\n\nHello there!");
  slow = new ScriptedModel(tokenizer, () => " a b c d e f g h".repeat(60), { stepDelayMs: 15 });
  server = await createServer({
    models: [
      { name: "tiny", path: dir, backend: "reference" },
      { name: "agent", model: agent, tokenizer },
      { name: "thinker", model: thinker, tokenizer },
      { name: "slow", model: slow, tokenizer },
    ],
    port: 0,
    maxBodyBytes: 64 * 1024,
    onRequestEnd: (l) => logs.push(l),
  });
  const url = await server.listen();
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  client = openai(url);
}, timeLimit(120_000));

afterAll(async () => {
  await server?.close();
});

describe("the real converted tiny model", () => {
  it("lists the models", async () => {
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(["tiny", "agent", "thinker", "slow"]);
    const tiny = await client.models.retrieve("tiny");
    expect(tiny).toMatchObject({
      id: "tiny",
      object: "model",
      owned_by: "anemll-qwen35",
      context_length: 128,
    });
    const health = await fetch(`${server.url}/health`).then(json);
    expect(health.status).toBe("ok");
    expect(health.models[0]).toMatchObject({ id: "tiny", backend: "reference (fp32)", busy: false });
  });

  it("answers a chat like generate() does, with usage", async () => {
    const messages = [{ role: "user" as const, content: "Hi there!" }];
    const r = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 8,
      temperature: 0,
    });
    // The same conversation through the library directly, on the served model while it is idle.
    const { model, tokenizer: tok } = server.models[0];
    const direct = await generate(model, tok, { messages, maxTokens: 8, sampling: { temperature: 0 } });

    expect(r.object).toBe("chat.completion");
    expect(r.model).toBe("tiny");
    expect(r.id).toMatch(/^chatcmpl-/);
    expect(r.choices).toHaveLength(1);
    expect(r.choices[0].message.role).toBe("assistant");
    expect(r.choices[0].message.content).toBe(direct.text);
    expect(r.choices[0].finish_reason).toBe(direct.finishReason === "length" ? "length" : "stop");
    expect(r.usage).toEqual({
      prompt_tokens: direct.stats.promptTokens,
      completion_tokens: direct.stats.generatedTokens,
      total_tokens: direct.stats.promptTokens + direct.stats.generatedTokens,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  it("streams chunks that join to the non-streaming answer (greedy), usage last", async () => {
    const body = {
      model: "tiny",
      messages: [{ role: "user" as const, content: "Tell me a story." }],
      max_tokens: 10,
      temperature: 0,
    };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const c of stream) {
      chunks.push(c);
      text += c.choices[0]?.delta.content ?? "";
    }
    expect(chunks.length).toBeGreaterThan(3);
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0].id)).toBe(true);
    expect(text).toBe(whole.choices[0].message.content);
    const finish = chunks.at(-2)!;
    expect(finish.choices[0].finish_reason).toBe(whole.choices[0].finish_reason);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    // the repeat may restore part of the prompt from the cache (prompt-cache.test.ts checks how much)
    const { prompt_tokens_details: _, ...counts } = whole.usage ?? {};
    expect(last.usage).toMatchObject(counts);
  });

  it("continues raw text on /v1/completions, streamed or not", async () => {
    const body = { model: "tiny", prompt: "Once upon a time", max_tokens: 8, temperature: 0 };
    const whole = await client.completions.create(body);
    expect(whole.object).toBe("text_completion");
    expect(whole.usage?.prompt_tokens).toBe(tokenizer.encode("Once upon a time").length);
    expect(whole.usage?.completion_tokens).toBeLessThanOrEqual(8);
    let text = "";
    for await (const c of await client.completions.create({ ...body, stream: true }))
      text += c.choices[0].text;
    expect(text).toBe(whole.choices[0].text);
    const echoed = await client.completions.create({ ...body, echo: true });
    expect(echoed.choices[0].text).toBe(`Once upon a time${whole.choices[0].text}`);
    // The default max_tokens of /v1/completions is OpenAI's 16.
    const dflt = await client.completions.create({ model: "tiny", prompt: "x", temperature: 0 });
    expect(dflt.usage?.completion_tokens).toBeLessThanOrEqual(16);
  });

  it("stays responsive while it generates, and stops when the client hangs up", async () => {
    const before = logs.length;
    const stream = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 100,
      temperature: 0,
      stream: true,
    });
    let chunks = 0;
    let busyMidway: boolean | undefined;
    for await (const c of stream) {
      if (!c.choices[0]?.delta.content) continue;
      chunks++;
      if (chunks === 1) {
        // The reference interpreter computes synchronously; the server must still answer meanwhile.
        const health = await fetch(`${server.url}/health`).then(json);
        busyMidway = health.models[0].busy;
      }
      if (chunks === 2) break; // hang up
    }
    expect(busyMidway).toBe(true);
    const log = await waitFor("the aborted request's log", () =>
      logs.slice(before).find((l) => l.url === "/v1/chat/completions"),
    );
    expect(log.finishReason).toBe("abort");
    expect(log.status).toBe(499);
    expect(log.completionTokens).toBeLessThan(30); // of up to 100
    expect(log.runMs).toBeGreaterThan(0);
    expect(log.runMs).toBeLessThanOrEqual(log.totalMs);
  });

  it("refuses a prompt longer than the context with a 400, and keeps serving", async () => {
    const long = "word ".repeat(400);
    const err = await client.chat.completions
      .create({ model: "tiny", messages: [{ role: "user", content: long }] })
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.status).toBe(400);
    expect(err.code).toBe("context_length_exceeded");
    expect(err.param).toBe("messages");
    expect(err.message).toMatch(/maximum context length is 128 tokens/);
    const again = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "ok?" }],
      max_tokens: 2,
    });
    expect(again.choices[0].finish_reason).toBeDefined();
  });
});

describe("several models at once", () => {
  it.skipIf(!mlx.available)(
    `serves the chain and an MLX checkpoint side by side, chosen by \`model\`${mlx.available ? "" : ` — skipped: MLX unavailable (${mlx.reason})`}`,
    async () => {
      await using s = await createServer({
        models: [
          { name: "ane", path: dir, backend: "reference" },
          { name: "gpu", path: FIXTURE }, // a Hugging Face checkpoint: runtime-mlx is picked
        ],
        port: 0,
      });
      const c = openai(await s.listen());
      const health = await fetch(`${s.url}/health`).then(json);
      expect(health.models.map((m: { backend: string }) => m.backend)).toEqual([
        "reference (fp32)",
        "mlx (bfloat16)",
      ]);
      const ask = (model: string) =>
        c.chat.completions.create({
          model,
          messages: [{ role: "user", content: "Hi there!" }],
          max_tokens: 6,
          temperature: 0,
        });
      const [a, g, g2] = await Promise.all([ask("ane"), ask("gpu"), ask("gpu")]);
      expect(a.model).toBe("ane");
      expect(g.model).toBe("gpu");
      expect(a.usage?.completion_tokens).toBe(6);
      expect(g.usage?.completion_tokens).toBe(6);
      // The two gpu requests took turns on one model state and, greedy, agree.
      expect(g2.choices[0].message.content).toBe(g.choices[0].message.content);
    },
  );

  it.skipIf(!mlx.available)(
    `--speculative mtp: the MTP head drafts, usage says how many drafts were accepted, the text is plain greedy's${mlx.available ? "" : ` — skipped: MLX unavailable (${mlx.reason})`}`,
    async () => {
      const trained = resolve(FIXTURE, "../tiny-trained");
      await using s = await createServer({
        models: [
          { name: "spec", path: trained, dtype: "float32", speculative: "mtp", gamma: 3 },
          { name: "plain", path: trained, dtype: "float32" },
        ],
        port: 0,
      });
      const url = await s.listen();
      const ask = async (model: string) =>
        (await fetch(`${url}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model, prompt: "And Ruth said", max_tokens: 24, temperature: 0 }),
        }).then(json)) as { choices: { text: string }[]; usage: Record<string, unknown> };
      const [spec, plain] = [await ask("spec"), await ask("plain")];
      expect(spec.choices[0].text).toBe(plain.choices[0].text);
      expect(plain.usage.speculative).toBeUndefined();
      const u = spec.usage as {
        completion_tokens_details: { accepted_prediction_tokens: number; rejected_prediction_tokens: number };
        speculative: {
          draft_tokens: number;
          accepted_tokens: number;
          verify_calls: number;
          tokens_per_call: number;
        };
      };
      expect(u.speculative.verify_calls).toBeGreaterThan(0);
      expect(u.completion_tokens_details.accepted_prediction_tokens).toBe(u.speculative.accepted_tokens);
      expect(
        u.completion_tokens_details.accepted_prediction_tokens +
          u.completion_tokens_details.rejected_prediction_tokens,
      ).toBe(u.speculative.draft_tokens);
      // a model without a head is refused when the server opens it
      await expect(
        createServer({ models: [{ name: "x", path: FIXTURE, speculative: "mtp" }], port: 0 }),
      ).rejects.toThrow(/multi-token-prediction head/);
    },
  );
});

describe("tools and thinking (scripted models)", () => {
  it("round-trips a tool call: call → tool result → answer", async () => {
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: "user", content: "Weather in Paris?" },
    ];
    const first = await client.chat.completions.create({ model: "agent", messages, tools: [WEATHER_TOOL] });
    const choice = first.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Let me check.");
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message
      .tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(call.type).toBe("function");
    expect(call.function.name).toBe("get_weather");
    // `city` is typed string by the schema and stays one; `days` is an integer.
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris", days: 2 });
    expect(agent.prompts.at(-1)).toContain('"name": "get_weather"');

    messages.push(choice.message, { role: "tool", tool_call_id: call.id, content: '{"sky":"sunny"}' });
    const second = await client.chat.completions.create({ model: "agent", messages, tools: [WEATHER_TOOL] });
    expect(second.choices[0].message.content).toBe("It is sunny in Paris.");
    expect(second.choices[0].finish_reason).toBe("stop");
    // The template got the earlier call back as Qwen3.5 XML and the result wrapped in <tool_response>.
    const prompt = agent.prompts.at(-1)!;
    expect(prompt).toContain("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>");
    expect(prompt).toContain('<tool_response>\n{"sky":"sunny"}\n</tool_response>');
    // Every request starts from a reset state and renders the whole conversation (no prefix cache).
    expect(agent.resets).toBe(agent.prompts.length);
    expect(prompt.startsWith("<|im_start|>system\n")).toBe(true);
  });

  it("streams a tool call as a tool_calls delta", async () => {
    const stream = await client.chat.completions.create({
      model: "agent",
      messages: [{ role: "user", content: "Weather?" }],
      tools: [WEATHER_TOOL],
      stream: true,
    });
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice[] = [];
    for await (const c of stream) deltas.push(...c.choices);
    const calls = deltas.flatMap((d) => d.delta.tool_calls ?? []);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather" } });
    expect(JSON.parse(calls[0].function!.arguments!)).toEqual({ city: "Paris", days: 2 });
    expect(deltas.at(-1)!.finish_reason).toBe("tool_calls");
    expect(deltas.map((d) => d.delta.content ?? "").join("")).toBe("Let me check.");
  });

  it("honours tool_choice: a named function is forced, none hides the tools", async () => {
    const forced = new ScriptedModel(
      tokenizer,
      () => "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
    );
    const noTools = new ScriptedModel(tokenizer, () => `Plain answer.${CALL_XML}`);
    await using s = await serveScripted({ forced, plain: noTools });
    const c = openai(await s.listen());
    const r = await c.chat.completions.create({
      model: "forced",
      messages: [{ role: "user", content: "Oslo?" }],
      tools: [WEATHER_TOOL],
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    expect(forced.prompts[0].endsWith("<tool_call>\n<function=get_weather>\n")).toBe(true);
    expect(r.choices[0].finish_reason).toBe("tool_calls");
    const call = r.choices[0].message
      .tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.function).toEqual({ name: "get_weather", arguments: '{"city":"Oslo"}' });

    const n = await c.chat.completions.create({
      model: "plain",
      messages: [{ role: "user", content: "Hi" }],
      tools: [WEATHER_TOOL],
      tool_choice: "none",
    });
    expect(noTools.prompts[0]).not.toContain("get_weather");
    expect(n.choices[0].message.content).toBe("Plain answer.");
    expect(n.choices[0].message.tool_calls).toBeUndefined();
    expect(n.choices[0].finish_reason).toBe("stop");

    const bad = await c.chat.completions
      .create({
        model: "forced",
        messages: [{ role: "user", content: "x" }],
        tools: [WEATHER_TOOL],
        tool_choice: { type: "function", function: { name: "nope" } },
      })
      .catch((e) => e);
    expect(bad.status).toBe(400);
    expect(bad.param).toBe("tool_choice.function.name");
  });

  it("required forces some call; parallel_tool_calls: false stops at the first; a malformed call stays text", async () => {
    const required = new ScriptedModel(
      tokenizer,
      () => "get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
    );
    const twice = new ScriptedModel(tokenizer, () => `${CALL_XML}\n${CALL_XML}\n${CALL_XML}`);
    const broken = new ScriptedModel(
      tokenizer,
      () => "Hmm.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</tool_call>",
    );
    await using s = await serveScripted({ required, twice, broken });
    const c = openai(await s.listen());
    const ask = (model: string, extra: Record<string, unknown> = {}) =>
      c.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Rome?" }],
        tools: [WEATHER_TOOL],
        ...extra,
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);

    const r = await ask("required", { tool_choice: "required" });
    expect(required.prompts[0].endsWith("<tool_call>\n<function=")).toBe(true);
    expect(r.choices[0].message.tool_calls?.map((t) => (t as { function: unknown }).function)).toEqual([
      { name: "get_weather", arguments: '{"city":"Rome"}' },
    ]);

    const all = await ask("twice");
    expect(all.choices[0].message.tool_calls).toHaveLength(3);
    const stepsForThree = twice.decodeSteps;
    const one = await ask("twice", { parallel_tool_calls: false });
    expect(one.choices[0].message.tool_calls).toHaveLength(1);
    expect(one.choices[0].finish_reason).toBe("tool_calls");
    // It stopped at the first call instead of writing all three.
    expect(twice.decodeSteps - stepsForThree).toBeLessThan(stepsForThree / 2);

    const b = await ask("broken");
    expect(b.choices[0].message.tool_calls).toBeUndefined();
    expect(b.choices[0].finish_reason).toBe("stop");
    expect(b.choices[0].message.content).toContain("Hmm.<tool_call>");
    expect(b.choices[0].message.content).toContain("<parameter=city>\nRome");
  });

  it("keeps thinking out of content, as reasoning_content", async () => {
    const body = {
      model: "thinker",
      messages: [{ role: "user" as const, content: "hi" }],
      chat_template_kwargs: { enable_thinking: true },
    };
    const r = await client.chat.completions.create(
      body as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming,
    );
    expect(thinker.prompts.at(-1)!.endsWith("<|im_start|>assistant\n<think>\n")).toBe(true);
    const msg = r.choices[0].message as OpenAI.Chat.ChatCompletionMessage & { reasoning_content?: string };
    expect(msg.reasoning_content).toBe("the user says hi");
    expect(msg.content).toBe("Hello there!");

    let reasoning = "";
    let content = "";
    const stream = await client.chat.completions.create({
      ...body,
      stream: true,
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    for await (const c of stream) {
      const d = c.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      reasoning += d?.reasoning_content ?? "";
      content += d?.content ?? "";
    }
    expect({ reasoning, content }).toEqual({ reasoning: "the user says hi", content: "Hello there!" });

    // Thinking off: the generation prompt closes an empty think block.
    await client.chat.completions.create({
      ...body,
      chat_template_kwargs: { enable_thinking: false },
    } as never);
    expect(thinker.prompts.at(-1)!.endsWith("<think>\n\n</think>\n\n")).toBe(true);
  });
});

describe("load and faults", () => {
  it("aborts the generation when the client disconnects and serves the next request promptly", async () => {
    const before = logs.length;
    const stream = await client.chat.completions.create({
      model: "slow",
      messages: [{ role: "user", content: "Talk." }],
      stream: true,
    });
    let received = 0;
    for await (const c of stream) {
      if (c.choices[0]?.delta.content) received++;
      if (received === 3) break; // leaving the loop aborts the HTTP request
    }
    const aborted = await waitFor("the aborted request's log", () =>
      logs.slice(before).find((l) => l.model === "slow"),
    );
    expect(aborted.finishReason).toBe("abort");
    // The script is 480+ tokens long; the generation stopped within a few steps of the abort.
    expect(aborted.completionTokens).toBeLessThan(20);
    const steps = slow.decodeSteps;
    await new Promise((r) => setTimeout(r, 100));
    expect(slow.decodeSteps).toBe(steps); // nothing runs for the departed client

    // the model is free again: the next request takes its turn at once and runs only its own steps
    const served = server.models.find((m) => m.name === "slow");
    expect(served?.queue.busy).toBe(false);
    const next = await client.chat.completions.create({
      model: "slow",
      messages: [{ role: "user", content: "Again." }],
      max_tokens: 3,
    });
    expect(next.choices[0].finish_reason).toBe("length");
    expect(slow.decodeSteps - steps).toBe(2); // its 3 tokens: one from the prefill, two decodes
  });

  it("queues requests FIFO and refuses with 429 + Retry-After when the queue is full", async () => {
    const model = new ScriptedModel(tokenizer, () => "one two three four five six", { stepDelayMs: 20 });
    const order: string[] = [];
    await using s = await serveScripted({ m: model }, { queue: 1 });
    const c = openai(await s.listen());
    const ask = (tag: string) =>
      c.chat.completions.create({ model: "m", messages: [{ role: "user", content: tag }] }).then((r) => {
        order.push(tag);
        return r;
      });
    const a = ask("A");
    await waitFor("A to hold the model", () => (s.models[0].queue.busy ? true : undefined));
    const b = ask("B");
    await waitFor("B to wait", () => (s.models[0].queue.waiting === 1 ? true : undefined));
    const res = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "C" }] }),
    });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = await json(res);
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "queue_full" });
    const [ra, rb] = await Promise.all([a, b]);
    expect(order).toEqual(["A", "B"]);
    expect(ra.choices[0].message.content).toBe("one two three four five six");
    expect(rb.choices[0].message.content).toBe("one two three four five six");
  });

  it("drops a queued request whose client leaves before its turn", async () => {
    const model = new ScriptedModel(tokenizer, () => "x y z", { stepDelayMs: 30 });
    const seen: RequestLog[] = [];
    await using s = await serveScripted({ m: model }, { onRequestEnd: (l) => seen.push(l) });
    const c = openai(await s.listen());
    const a = c.chat.completions.create({ model: "m", messages: [{ role: "user", content: "A" }] });
    await waitFor("A to hold the model", () => (s.models[0].queue.busy ? true : undefined));
    const ac = new AbortController();
    const b = c.chat.completions
      .create({ model: "m", messages: [{ role: "user", content: "B" }] }, { signal: ac.signal })
      .catch((e) => e);
    await waitFor("B to wait", () => (s.models[0].queue.waiting === 1 ? true : undefined));
    ac.abort();
    await waitFor("B to leave the line", () => (s.models[0].queue.waiting === 0 ? true : undefined));
    expect(await b).toBeInstanceOf(OpenAI.APIUserAbortError);
    await a;
    await waitFor("both requests to end", () => (seen.length === 2 ? true : undefined));
    expect(seen.map((l) => [l.status, l.finishReason])).toEqual([
      [499, "abort"], // B, gone while queued
      [200, "stop"], // A
    ]);
    await new Promise((r) => setTimeout(r, 100));
    expect(model.prompts).toHaveLength(1); // B never ran
  });

  it("reports a model failure as a 500 (JSON) or an error event (stream), and keeps serving", async () => {
    const model = new ScriptedModel(tokenizer, () => "one two three four five six seven", {
      failAtDecode: 3,
    });
    await using s = await serveScripted({ m: model });
    const c = openai(await s.listen());
    const messages = [{ role: "user" as const, content: "hi" }];
    const stream = await c.chat.completions.create({ model: "m", messages, stream: true });
    let text = "";
    const err = await (async () => {
      for await (const ch of stream) text += ch.choices[0]?.delta.content ?? "";
    })().catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String(err.message)).toMatch(/scripted device failure/);
    expect(text.length).toBeGreaterThan(0); // it failed midway, after some output
    const ok = await c.chat.completions.create({ model: "m", messages });
    expect(ok.choices[0].message.content).toBe("one two three four five six seven");

    const failing = new ScriptedModel(tokenizer, () => "a b c", { failAtDecode: 1 });
    await using s2 = await serveScripted({ f: failing });
    const e500 = await openai(await s2.listen())
      .chat.completions.create({ model: "f", messages })
      .catch((e) => e);
    expect(e500).toBeInstanceOf(OpenAI.InternalServerError);
    expect(e500.type).toBe("server_error");
  });

  it("a model that becomes unavailable mid-generation: an error event, then 503 for it while the others answer", async () => {
    const lost = new ScriptedModel(tokenizer, () => "one two three four five six seven", { loseAtDecode: 3 });
    const fine = new ScriptedModel(tokenizer, () => "still here");
    await using s = await serveScripted({ big: lost, small: fine });
    const c = openai(await s.listen());
    const messages = [{ role: "user" as const, content: "hi" }];
    const stream = await c.chat.completions.create({ model: "big", messages, stream: true });
    const err = await (async () => {
      for await (const _ of stream);
    })().catch((e) => e);
    expect(String(err.message)).toMatch(/rank 1 was lost/);
    const again = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "big", messages }),
    });
    expect(again.status).toBe(503);
    expect((await json(again)).error).toMatchObject({ type: "server_error", code: "model_unavailable" });
    expect(lost.prompts).toHaveLength(1); // refused before the model was asked
    const ok = await c.chat.completions.create({ model: "small", messages });
    expect(ok.choices[0].message.content).toBe("still here");
    const health = await fetch(`${s.url}/health`).then(json);
    expect(health.status).toBe("degraded");
    expect(health.models.map((m: Json) => [m.id, m.available])).toEqual([
      ["big", false],
      ["small", true],
    ]);
    expect(health.models[0].error).toMatch(/rank 1 was lost/);
  });

  it("answers bad JSON with a 400 in OpenAI's error shape", async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"model": "tiny", "messages": [',
    });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_json", param: null });
    expect(typeof body.error.message).toBe("string");
  });

  it("validates fields with a 400 naming the field", async () => {
    const bad = async (body: Record<string, unknown>) => {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], ...body }),
      });
      expect(res.status).toBe(400);
      return (await json(res)).error;
    };
    expect(await bad({ temperature: 5 })).toMatchObject({
      param: "temperature",
      type: "invalid_request_error",
    });
    expect(await bad({ max_tokens: 0 })).toMatchObject({ param: "max_tokens" });
    expect(await bad({ messages: undefined })).toMatchObject({
      param: "messages",
      code: "missing_required_parameter",
    });
    expect(await bad({ messages: [{ role: "user", content: 7 }] })).toMatchObject({
      param: "messages[0].content",
    });
    expect(await bad({ messages: [{ role: "wizard", content: "hi" }] })).toMatchObject({
      param: "messages[0].role",
    });
    expect(
      await bad({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }),
    ).toMatchObject({ param: "messages[0].content[0].type" });
    expect(await bad({ n: 2 })).toMatchObject({ param: "n" });
    expect(await bad({ tool_choice: "auto" })).toMatchObject({ param: "tool_choice" });
    expect(
      await bad({
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{" } }],
          },
        ],
      }),
    ).toMatchObject({ param: "messages[1].tool_calls[0].function.arguments" });

    const completion = async (body: Record<string, unknown>) => {
      const res = await fetch(`${server.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny", ...body }),
      });
      expect(res.status).toBe(400);
      return (await json(res)).error;
    };
    expect(await completion({ prompt: ["one", "two"] })).toMatchObject({ param: "prompt" });
    expect(await completion({ prompt: [1, 2, 100_000] })).toMatchObject({ param: "prompt[2]" });
    expect(await completion({ prompt: "" })).toMatchObject({ param: "prompt" });

    // The openai client surfaces them as BadRequestError with the param.
    const err = await client.chat.completions
      .create({ model: "tiny", messages: [{ role: "user", content: "hi" }], top_p: 0 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe("top_p");
  });

  it("refuses a body over the size limit with a 413", async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x".repeat(100_000) }] }),
    });
    expect(res.status).toBe(413);
    expect((await json(res)).error.code).toBe("request_too_large");
  });

  it("answers an unknown model with a 404 in OpenAI's shape", async () => {
    const err = await client.chat.completions
      .create({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }] })
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
    expect(err.param).toBe("model");
    const res = await fetch(`${server.url}/v1/nothing-here`);
    expect(res.status).toBe(404);
    expect((await json(res)).error.type).toBe("invalid_request_error");
  });

  it("requires the API key when one is set (401 otherwise)", async () => {
    const model = new ScriptedModel(tokenizer, () => "ok");
    await using s = await serveScripted({ m: model }, { apiKey: "s3cret" });
    const url = await s.listen();
    const ask = (c: OpenAI) =>
      c.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const none = await fetch(`${url}/v1/models`);
    expect(none.status).toBe(401);
    expect((await json(none)).error.code).toBe("invalid_api_key");
    const wrong = await ask(openai(url, "guess")).catch((e) => e);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(wrong.status).toBe(401);
    const right = await ask(openai(url, "s3cret"));
    expect(right.choices[0].message.content).toBe("ok");
    expect((await fetch(`${url}/health`)).status).toBe(200); // health checks need no key
    expect(model.prompts).toHaveLength(1); // refused requests never reached the model
  });
});
