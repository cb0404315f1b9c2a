import { InvalidArgumentError } from "@anemll-qwen35/core";
import { beforeAll, describe, expect, it } from "vitest";
import {
  ContextOverflowError,
  type GenerateOptions,
  type GenerationChunk,
  generate,
  loadTokenizer,
  type StepModel,
  type Tokenizer,
  type ToolSpec,
  UnsupportedSamplingError,
} from "../src/index.js";
import { FIXTURE_TOKENIZER_DIR, ScriptedModel, type ScriptedModelOptions, SPECIAL_BASE } from "./helpers.js";

let tok: Tokenizer;
let EOS: number;
beforeAll(async () => {
  tok = await loadTokenizer(FIXTURE_TOKENIZER_DIR, { eosTokenIds: [SPECIAL_BASE] });
  EOS = tok.tokenId("<|im_end|>")!;
});

/** A model that will "say" `text` and then <|im_end|>. */
function says(text: string, opts: Partial<ScriptedModelOptions> = {}, eos = true) {
  const ids = tok.encode(text);
  return { ids, model: new ScriptedModel(eos ? [...ids, EOS] : ids, { vocabSize: 1040, ...opts }) };
}

async function collect(gen: AsyncIterable<GenerationChunk>): Promise<GenerationChunk[]> {
  const out: GenerationChunk[] = [];
  for await (const c of gen) out.push(c);
  return out;
}

const textOf = (chunks: GenerationChunk[], type: "text" | "thinking") =>
  chunks.map((c) => (c.type === type ? c.text : "")).join("");

describe("generate over a scripted StepModel", () => {
  it("prefills the prompt, feeds back each token, stops at EOS and reports stats", async () => {
    const { ids, model } = says("Hello world!");
    const prompt = "Say hello:";
    const gen = generate(model, tok, { prompt });
    const chunks = await collect(gen);
    const r = await gen;

    expect(model.resets).toBe(1);
    expect(model.prefilled).toEqual([tok.encode(prompt)]);
    expect(model.decoded).toEqual(ids); // every generated token is fed back; the EOS is not
    expect(r.text).toBe("Hello world!");
    expect(r.rawText).toBe("Hello world!");
    expect(r.thinking).toBe("");
    expect(r.tokenIds).toEqual(ids);
    expect(r.finishReason).toBe("stop");
    expect(r.finishDetail).toEqual({ type: "eos", tokenId: EOS });
    expect(textOf(chunks, "text")).toBe("Hello world!");
    expect(chunks.flatMap((c) => (c.type === "text" ? c.tokenIds : []))).toEqual(ids);

    const s = r.stats;
    expect(s.promptTokens).toBe(tok.encode(prompt).length);
    expect(s.generatedTokens).toBe(ids.length + 1);
    expect(s.decodeSteps).toBe(ids.length);
    expect(s.timeToFirstTokenMs).toBeGreaterThanOrEqual(s.prefillMs);
    expect(s.totalMs).toBeGreaterThanOrEqual(s.timeToFirstTokenMs);
    expect(s.totalMs).toBeGreaterThanOrEqual(s.prefillMs + s.decodeMs);
    expect(s.prefillTokensPerSecond).toBeCloseTo(s.promptTokens / (s.prefillMs / 1000), 6);
    expect(s.decodeTokensPerSecond).toBeCloseTo(s.decodeSteps / (s.decodeMs / 1000), 6);
  });

  it("is awaitable without iterating, and iterating twice replays the same chunks", async () => {
    const { model } = says("One two three.");
    const gen = generate(model, tok, { prompt: [5, 6, 7] });
    const r = await gen;
    expect(r.text).toBe("One two three.");
    expect(model.prefilled).toEqual([[5, 6, 7]]);
    const a = await collect(gen);
    const b = await collect(gen);
    expect(a).toEqual(b);
    expect(textOf(a, "text")).toBe(r.text);
    expect(await gen.result).toBe(r);
  });

  it("streams multi-byte text without ever emitting half a character", async () => {
    const text = "Olá 😊 生活的真谛 ปี!";
    const { model } = says(text);
    const chunks = await collect(generate(model, tok, { prompt: "x" }));
    for (const c of chunks) if (c.type === "text") expect(c.text).not.toContain("\uFFFD");
    expect(textOf(chunks, "text")).toBe(text);
  });

  it("separates thinking when the chat template opened <think> (enableThinking: true)", async () => {
    const { model } = says("\nTwo plus two is four.\n</think>\n\nIt is 4.");
    const gen = generate(model, tok, { messages: [{ role: "user", content: "2+2?" }], enableThinking: true });
    const chunks = await collect(gen);
    const r = await gen;
    expect(tok.decode(model.prefilled[0]).endsWith("<|im_start|>assistant\n<think>\n")).toBe(true);
    expect(r.thinking).toBe("Two plus two is four.");
    expect(r.text).toBe("It is 4.");
    expect(textOf(chunks, "thinking")).toBe(r.thinking);
    expect(textOf(chunks, "text")).toBe(r.text);
    const firstText = chunks.findIndex((c) => c.type === "text");
    expect(chunks.slice(0, firstText).every((c) => c.type === "thinking")).toBe(true);
    expect(r.rawText).toBe("\nTwo plus two is four.\n</think>\n\nIt is 4.");
  });

  it("with enableThinking: false the prompt closes the think block and all output is the answer", async () => {
    const { model } = says("It is 4.");
    const r = await generate(model, tok, {
      messages: [{ role: "user", content: "2+2?" }],
      enableThinking: false,
    });
    expect(tok.decode(model.prefilled[0]).endsWith("<think>\n\n</think>\n\n")).toBe(true);
    expect(r).toMatchObject({ text: "It is 4.", thinking: "" });
  });

  it("stops on a stop string split across tokens, without emitting any of it", async () => {
    const stop = "\nUser:";
    expect(tok.encode(stop).length).toBeGreaterThan(1);
    const { model } = says("Answer: 42\nUser: and then?");
    const gen = generate(model, tok, { prompt: "Q", stop: [stop] });
    const chunks = await collect(gen);
    const r = await gen;
    expect(r.text).toBe("Answer: 42");
    expect(textOf(chunks, "text")).toBe("Answer: 42");
    expect(r.finishReason).toBe("stop");
    expect(r.finishDetail).toEqual({ type: "stop_string", stopString: stop });
    // It stopped as soon as the stop string completed, not at EOS.
    expect(r.tokenIds.length).toBeLessThan(tok.encode("Answer: 42\nUser: and then?").length);
  });

  it("stops at maxTokens with finish reason length", async () => {
    const { ids, model } = says("one two three four five six");
    const r = await generate(model, tok, { prompt: "count", maxTokens: 3 });
    expect(r.finishReason).toBe("length");
    expect(r.finishDetail).toEqual({ type: "max_tokens" });
    expect(r.tokenIds).toEqual(ids.slice(0, 3));
    expect(r.stats.generatedTokens).toBe(3);
    expect(model.decoded.length).toBe(2);
    expect(r.text).toBe(tok.decode(ids.slice(0, 3)));
  });

  it("stops when the context is full with finish reason length", async () => {
    const prompt = tok.encode("count to ten");
    const { model } = says("one two three four five six", { contextLength: prompt.length + 2 });
    const r = await generate(model, tok, { prompt });
    expect(r.finishDetail).toEqual({ type: "context_full" });
    expect(r.finishReason).toBe("length");
    expect(r.tokenIds.length).toBe(3); // one from prefill, two decodes fill the context
    expect(model.position).toBe(model.contextLength);
  });

  it("rejects a prompt longer than the context with ContextOverflowError, before any model call", async () => {
    const { model } = says("x", { contextLength: 4 });
    const gen = generate(model, tok, { prompt: "a much longer prompt than four tokens" });
    const err = await gen.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ContextOverflowError);
    expect((err as ContextOverflowError).contextLength).toBe(4);
    expect((err as ContextOverflowError).promptTokens).toBe(
      tok.encode("a much longer prompt than four tokens").length,
    );
    expect(model.prefilled).toEqual([]);
    await expect(collect(gen)).rejects.toBeInstanceOf(ContextOverflowError);
  });

  it("abort mid-run resolves with finish reason abort and the text so far", async () => {
    const { ids, model } = says("a b c d e f g h i j k l m n o p", { stepDelayMs: 2 });
    const ac = new AbortController();
    let seen = 0;
    const gen = generate(model, tok, {
      prompt: "go",
      signal: ac.signal,
      onToken: () => {
        if (++seen === 4) ac.abort();
      },
    });
    const r = await gen;
    expect(r.finishReason).toBe("abort");
    expect(r.finishDetail).toEqual({ type: "abort" });
    expect(r.tokenIds).toEqual(ids.slice(0, 4)); // stopped right after the step in flight
    expect(r.text).toBe(tok.decode(ids.slice(0, 4)));
  });

  it("abort during a model step (runtime throws AbortError) also resolves with abort", async () => {
    const ac = new AbortController();
    // the abort lands inside the second step (the first decode), whatever the machine's speed
    const { model } = says("a b c d e f g h", { stepDelayMs: 5, onStep: (n) => n === 2 && ac.abort() });
    const r = await generate(model, tok, { prompt: "go", signal: ac.signal });
    expect(r.finishReason).toBe("abort");
    expect(r.tokenIds).toHaveLength(1); // the prefill's token; the decode in flight was cut off
  });

  it("an already-aborted signal does no model work", async () => {
    const { model } = says("never");
    const r = await generate(model, tok, { prompt: "go", signal: AbortSignal.abort() });
    expect(r).toMatchObject({ finishReason: "abort", text: "", tokenIds: [] });
    expect(r.stats.generatedTokens).toBe(0);
    expect(Number.isNaN(r.stats.timeToFirstTokenMs)).toBe(true);
    expect(model.prefilled).toEqual([]);
  });

  it("leaving the for-await loop early stops the model", async () => {
    const { ids, model } = says("a b c d e f g h i j k l m n o p q r s t", { stepDelayMs: 2 });
    const gen = generate(model, tok, { prompt: "go" });
    for await (const c of gen) {
      if (c.type === "text") break;
    }
    const r = await gen;
    expect(r.finishReason).toBe("abort");
    expect(r.tokenIds.length).toBeLessThan(ids.length);
  });

  it("parses Qwen3.5 XML tool calls into tool_call chunks and finish reason tool_calls", async () => {
    const tools: ToolSpec[] = [
      {
        type: "function",
        function: {
          name: "get_weather",
          parameters: { type: "object", properties: { city: { type: "string" } } },
        },
      },
      { type: "function", function: { name: "calc" } },
    ];
    const out =
      "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n" +
      "</tool_call>\n<tool_call>\n<function=calc>\n<parameter=x>\n17\n</parameter>\n</function>\n</tool_call>";
    const { model } = says(out);
    const gen = generate(model, tok, {
      messages: [{ role: "user", content: "Weather in Paris, and 17?" }],
      tools,
      enableThinking: false,
    });
    const chunks = await collect(gen);
    const r = await gen;
    expect(tok.decode(model.prefilled[0])).toContain('"name": "get_weather"');
    expect(r.text).toBe("Let me check.");
    expect(r.toolCalls).toEqual([
      { name: "get_weather", arguments: { city: "Paris" } },
      { name: "calc", arguments: { x: 17 } },
    ]);
    expect(r.finishReason).toBe("tool_calls");
    expect(chunks.filter((c) => c.type === "tool_call")).toEqual([
      { type: "tool_call", call: r.toolCalls[0] },
      { type: "tool_call", call: r.toolCalls[1] },
    ]);
    expect(r.toolCallErrors).toEqual([]);
  });

  it("a call to a function not in `tools` is a tool_call_error, never a call", async () => {
    const { model } = says(
      "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>",
    );
    const r = await generate(model, tok, {
      messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "function", function: { name: "get_weather" } }],
    });
    expect(r.toolCalls).toEqual([]);
    expect(r.finishReason).toBe("stop");
    expect(r.toolCallErrors.map((e) => e.message)).toEqual([
      '"rm_rf" is not one of the tools offered (get_weather)',
    ]);
  });

  it("reports a malformed tool call instead of dropping it", async () => {
    const { model } = says("<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>");
    const gen = generate(model, tok, { prompt: "p" });
    const chunks = await collect(gen);
    const r = await gen;
    expect(r.toolCalls).toEqual([]);
    expect(r.toolCallErrors).toHaveLength(1);
    expect(r.toolCallErrors[0].message).toMatch(/missing <\/parameter>/);
    expect(chunks).toContainEqual({ type: "tool_call_error", error: r.toolCallErrors[0] });
    expect(r.finishReason).toBe("stop");
  });

  it("reports a tool call cut off by maxTokens", async () => {
    const text = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
    const { model } = says(text);
    const r = await generate(model, tok, { prompt: "p", maxTokens: tok.encode(text).length - 2 });
    expect(r.finishReason).toBe("length");
    expect(r.toolCallErrors[0].message).toMatch(/ended inside a <tool_call>/);
  });

  it("control tokens the model emits (not EOS) produce no text", async () => {
    const ids = [...tok.encode("a"), tok.tokenId("<|im_start|>")!, ...tok.encode("b"), EOS];
    const model = new ScriptedModel(ids, { vocabSize: 1040 });
    const r = await generate(model, tok, { prompt: "p" });
    expect(r.text).toBe("ab");
    expect(r.tokenIds).toEqual(ids.slice(0, -1));
  });

  it("<|endoftext|> passed as a model EOS id ends generation too", async () => {
    const model = new ScriptedModel([...tok.encode("fin"), SPECIAL_BASE, ...tok.encode("more")], {
      vocabSize: 1040,
    });
    const r = await generate(model, tok, { prompt: "p" });
    expect(r.finishDetail).toEqual({ type: "eos", tokenId: SPECIAL_BASE });
    expect(r.text).toBe("fin");
  });

  it("calls onToken per token and onChunk per chunk", async () => {
    const { ids, model } = says("abc def");
    const tokens: number[] = [];
    const chunks: GenerationChunk[] = [];
    const gen = generate(model, tok, {
      prompt: "p",
      onToken: (id) => tokens.push(id),
      onChunk: (c) => chunks.push(c),
    });
    expect(await collect(gen)).toEqual(chunks);
    expect(tokens).toEqual(ids);
  });

  it("seeded sampling is reproducible through the generator", async () => {
    const run = async (seed: number) => {
      const model = new ScriptedModel(new Array(40).fill(65), { vocabSize: 1040 });
      const r = await generate(model, tok, {
        prompt: "p",
        maxTokens: 30,
        sampling: { temperature: 30, seed },
      });
      return r.tokenIds;
    };
    const a = await run(3);
    expect(await run(3)).toEqual(a);
    expect(await run(4)).not.toEqual(a);
    expect(a.every((id) => id < tok.vocabSize)).toBe(true);
  });

  it("drives an argmax-only (top1) model greedily and refuses sampling on it", async () => {
    const { ids, model } = says("top one", { top1: true });
    const r = await generate(model, tok, { prompt: "p" });
    expect(r.tokenIds).toEqual(ids);

    const declared = says("x", { top1: true, declareOutputKind: true }).model;
    await expect(
      generate(declared, tok, { prompt: "p", sampling: { temperature: 0.8 } }),
    ).rejects.toBeInstanceOf(UnsupportedSamplingError);
    expect(declared.prefilled).toEqual([]); // refused before any work
    const undeclared = says("x", { top1: true }).model;
    await expect(
      generate(undeclared, tok, { prompt: "p", sampling: { temperature: 0.8 } }),
    ).rejects.toBeInstanceOf(UnsupportedSamplingError);
  });

  it("rejects bad options", async () => {
    const { model } = says("x");
    const bad: GenerateOptions[] = [
      { prompt: "a", messages: [{ role: "user", content: "b" }] },
      { prompt: "" },
      {},
      { prompt: [1, -2] },
      { prompt: "a", maxTokens: 0 },
      { prompt: "a", stop: [""] },
    ];
    for (const o of bad) await expect(generate(model, tok, o)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it("a model failure rejects the result and throws from the iterator (no unhandled rejection)", async () => {
    const failing: StepModel = {
      contextLength: 100,
      position: 0,
      reset() {},
      async prefill() {
        throw new Error("device lost");
      },
      async decode() {
        throw new Error("unreachable");
      },
      dispose() {},
    };
    const gen = generate(failing, tok, { prompt: "p" });
    await expect(collect(gen)).rejects.toThrow("device lost");
    await expect(gen).rejects.toThrow("device lost");
    // Only iterating a failing generation must not leave an unhandled rejection (vitest would flag it).
    await expect(collect(generate(failing, tok, { prompt: "p" }))).rejects.toThrow("device lost");
  });
});
