/**
 * Structured output end to end: the openai client against the server, on the trained tiny model
 * (a Qwen3.5 that learned the King James Bible, converted to a chain, reference backend), whose
 * free output is almost never JSON. Every response must parse and validate against its schema,
 * checked with ajv (not the engine that constrained it); free greedy output must stay what it was
 * (Hugging Face's golden continuation); and the same holds on runtime-mlx through generate().
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { generate, type JsonSchema } from "@anemll-qwen35/generate";
import { loadModel } from "@anemll-qwen35/models";
import Ajv2020 from "ajv/dist/2020.js";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type OpenAIServer } from "../src/index.js";
import { FIXTURE as TINY_TIED } from "./helpers.js";

const TINY_TRAINED = resolve(import.meta.dirname, "../../../fixtures/tiny-trained");
const mlx = await import("@anemll-qwen35/runtime-mlx")
  .then((m) => m.mlxAvailable())
  .catch((e: Error) => ({ available: false, reason: e.message }));

// ajv is CommonJS: under ESM its class is the default export's `default`
const AjvClass = (Ajv2020 as unknown as { default: typeof Ajv2020.default }).default;
const ajv = new AjvClass({ strict: true, allErrors: true });
function validOrThrow(schema: JsonSchema, value: unknown, text: string): void {
  const validate = ajv.compile(schema as object);
  if (!validate(value)) throw new Error(`${text}\nis not valid: ${ajv.errorsText(validate.errors)}`);
}
function parse(text: string | null | undefined): unknown {
  try {
    return JSON.parse(text ?? "");
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${text}`);
  }
}

/** Nested objects, arrays, enums and required fields; every string and number bounded. */
const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 8 },
    age: { type: "integer", minimum: 1, maximum: 120 },
    role: { enum: ["king", "prophet", "priest", "shepherd"] },
    home: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 6 },
        tribe: { type: "string", enum: ["Judah", "Levi", "Benjamin"] },
      },
      required: ["tribe"],
      additionalProperties: false,
    },
    sons: { type: "array", items: { type: "string", minLength: 1, maxLength: 5 }, maxItems: 2 },
    alive: { type: "boolean" },
  },
  required: ["name", "role", "home"],
  additionalProperties: false,
} as const;
/** The longest value PERSON admits, written compactly as the grammar writes it. */
const LONGEST = {
  name: "x".repeat(8),
  age: 120,
  role: "shepherd",
  home: { city: "x".repeat(6), tribe: "Benjamin" },
  sons: ["x".repeat(5), "x".repeat(5)],
  alive: false,
};
// No token is shorter than one character, so this many tokens always finish the value (+ EOS).
const compact = (v: unknown) => JSON.stringify(v).replaceAll(",", ", ").replaceAll(":", ": ");
const JSON_MAX_TOKENS = compact(LONGEST).length + 1;

const TOOLS = [
  {
    type: "function" as const,
    function: {
      name: "find_verse",
      strict: true,
      parameters: {
        type: "object",
        properties: {
          book: { type: "string", enum: ["Genesis", "Exodus", "Psalms", "John"] },
          chapter: { type: "integer", minimum: 1, maximum: 150 },
          words: { type: "array", items: { type: "string", enum: ["light", "lord", "day"] }, maxItems: 2 },
        },
        required: ["book", "chapter"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function" as const,
    function: {
      name: "count",
      strict: true,
      parameters: {
        type: "object",
        properties: { word: { type: "string", minLength: 1, maxLength: 8 }, exact: { type: "boolean" } },
        required: ["word", "exact"],
      },
    },
  },
];
/** The longest call after the forced `<tool_call>\n<function=` (in characters, so in tokens at most). */
const LONGEST_CALL =
  "find_verse>\n<parameter=book>\nGenesis\n</parameter>\n<parameter=chapter>\n150\n</parameter>\n" +
  `<parameter=words>\n${compact(["light", "light"])}\n</parameter>\n</function>\n</tool_call>`;
const TOOL_MAX_TOKENS = LONGEST_CALL.length + 1;

const PROMPTS = [
  "Tell me of a man of old.",
  "Who was the first king?",
  "Describe a prophet.",
  "Write the record of a priest.",
  "And the shepherd said",
  "Give me one of the fathers.",
  "In the beginning",
  "Who dwelt in Bethlehem?",
  "Name a son of Jacob.",
  "Speak of the house of David.",
];

let server: OpenAIServer;
let client: OpenAI;

beforeAll(async () => {
  const tmp = mkdtempSync(join(tmpdir(), "structured-"));
  const chain = join(tmp, "trained");
  const argmax = join(tmp, "argmax");
  // fp32 without weight quantization: the interpreter's fastest form (the tools' prompt is ~680 tokens)
  await convert({
    model: TINY_TRAINED,
    out: chain,
    ctx: 1024,
    dtype: "fp32",
    body: { kind: "none" },
    lmHead: { kind: "none" },
  });
  await convert({ model: TINY_TIED, out: argmax, ctx: 128, fuse: 1, argmax: true });
  server = await createServer({
    models: [
      { name: "trained", path: chain, backend: "reference" },
      { name: "argmax", path: argmax, backend: "reference" },
    ],
    port: 0,
  });
  client = new OpenAI({
    baseURL: `${await server.listen()}/v1`,
    apiKey: "unused",
    maxRetries: 0,
    timeout: 120_000,
  });
}, 600_000);

afterAll(async () => {
  await server?.close();
});

describe("the trained tiny model through the server (openai client)", () => {
  it("free greedy output is unchanged: Hugging Face's golden continuation", async () => {
    const r = await client.completions.create({
      model: "trained",
      prompt: "In the beginning God",
      max_tokens: 13,
      temperature: 0,
    });
    expect(r.choices[0].text).toBe(" hath given him the way of the Lord, and hath made him");
  }, 120_000);

  it("without a schema it does not write JSON", async () => {
    const r = await client.chat.completions.create({
      model: "trained",
      messages: [{ role: "user", content: PROMPTS[0] }],
      max_tokens: JSON_MAX_TOKENS,
      temperature: 0,
    });
    expect(() => JSON.parse(r.choices[0].message.content ?? "")).toThrow();
  }, 120_000);

  it(`50 constrained requests: 30 json_schema (≤ ${JSON_MAX_TOKENS} tokens), 20 forced strict tool calls; all valid`, async () => {
    expect(JSON_MAX_TOKENS).toBeLessThan(160); // the bound the test's run time was sized for
    for (let i = 0; i < 30; i++) {
      const sampled = i % 3 !== 0; // a third greedy, the rest sampled with distinct seeds
      const r = await client.chat.completions.create({
        model: "trained",
        messages: [{ role: "user", content: PROMPTS[i % PROMPTS.length] }],
        max_tokens: JSON_MAX_TOKENS,
        response_format: {
          type: "json_schema",
          json_schema: { name: "person", schema: PERSON, strict: true },
        },
        ...(sampled ? { temperature: 0.9, seed: 100 + i } : { temperature: 0 }),
      });
      const c = r.choices[0];
      expect(c.finish_reason, c.message.content ?? "").toBe("stop");
      validOrThrow(PERSON, parse(c.message.content), c.message.content ?? "");
    }
    for (let i = 0; i < 20; i++) {
      const named = i % 2 === 0;
      const r = await client.chat.completions.create({
        model: "trained",
        messages: [{ role: "user", content: PROMPTS[i % PROMPTS.length] }],
        tools: TOOLS,
        tool_choice: named
          ? { type: "function", function: { name: TOOLS[i % 4 === 0 ? 0 : 1].function.name } }
          : "required",
        max_tokens: TOOL_MAX_TOKENS,
        temperature: i < 10 ? 0 : 0.9,
        seed: 200 + i,
      });
      const c = r.choices[0];
      expect(c.finish_reason, c.message.content ?? "").toBe("tool_calls");
      expect(c.message.tool_calls).toHaveLength(1);
      const call = c.message.tool_calls?.[0];
      if (call?.type !== "function") throw new Error("expected a function call");
      const tool = TOOLS.find((t) => t.function.name === call.function.name);
      expect(tool, call.function.name).toBeDefined();
      if (named) expect(call.function.name).toBe(TOOLS[i % 4 === 0 ? 0 : 1].function.name);
      validOrThrow(tool!.function.parameters, parse(call.function.arguments), call.function.arguments);
    }
  }, 900_000);

  it("json_object mode answers one JSON object", async () => {
    const r = await client.chat.completions.create({
      model: "trained",
      messages: [{ role: "user", content: "Answer in JSON." }],
      max_tokens: 40,
      temperature: 0,
      response_format: { type: "json_object" },
    });
    // an unbounded object can run past max_tokens; when it ends by itself it is an object
    if (r.choices[0].finish_reason === "stop") {
      const v = parse(r.choices[0].message.content);
      expect(typeof v === "object" && v !== null && !Array.isArray(v)).toBe(true);
    } else {
      expect(r.choices[0].message.content?.startsWith("{")).toBe(true);
    }
  }, 120_000);

  it("refuses an unsupported schema keyword with a 400 naming it", async () => {
    const err = await client.chat.completions
      .create({
        model: "trained",
        messages: [{ role: "user", content: "x" }],
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "n",
            schema: { type: "object", properties: { n: { type: "integer", multipleOf: 2 } } },
          },
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const e = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.param).toBe("response_format.json_schema.schema.properties.n.multipleOf");
    expect(e.code).toBe("unsupported_schema");
    expect(e.message).toMatch(/multipleOf.*not supported/);

    const tool = await client.chat.completions
      .create({
        model: "trained",
        messages: [{ role: "user", content: "x" }],
        tools: [
          {
            type: "function",
            function: {
              name: "f",
              strict: true,
              parameters: { type: "object", properties: { a: { oneOf: [{ type: "string" }] } } },
            },
          },
        ],
      })
      .catch((x: unknown) => x);
    expect(tool).toBeInstanceOf(OpenAI.BadRequestError);
    expect((tool as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(
      "tools[0].function.parameters.properties.a.oneOf",
    );
  });

  it("refuses constraints on a chain converted with --argmax (top-1 outputs cannot be masked)", async () => {
    const err = await client.chat.completions
      .create({
        model: "argmax",
        messages: [{ role: "user", content: "x" }],
        response_format: { type: "json_object" },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("unsupported_constraint");
    expect((err as Error).message).toMatch(/argmax/);
  });
});

describe.skipIf(!mlx.available)(
  `runtime-mlx through generate()${mlx.available ? "" : ` — skipped: MLX unavailable (${(mlx as { reason?: string }).reason})`}`,
  () => {
    it("10 json_schema generations and 4 forced strict tool calls, all valid", async () => {
      const loaded = await loadModel(TINY_TRAINED, { backend: "mlx", dtype: "float32" });
      try {
        const { model, tokenizer } = loaded;
        for (let i = 0; i < 10; i++) {
          const r = await generate(model, tokenizer, {
            messages: [{ role: "user", content: PROMPTS[i] }],
            enableThinking: false,
            jsonSchema: PERSON,
            maxTokens: JSON_MAX_TOKENS,
            sampling: i % 2 ? { temperature: 0.9, seed: i } : { temperature: 0 },
          });
          expect(r.finishReason, r.rawText).toBe("stop");
          validOrThrow(PERSON, parse(r.text), r.text);
        }
        for (let i = 0; i < 4; i++) {
          const r = await generate(model, tokenizer, {
            messages: [{ role: "user", content: PROMPTS[i] }],
            enableThinking: false,
            tools: TOOLS,
            toolChoice: "required",
            parallelToolCalls: false,
            maxTokens: TOOL_MAX_TOKENS + 16,
            sampling: { temperature: i ? 0.9 : 0, seed: i },
          });
          expect(r.toolCallErrors).toEqual([]);
          expect(r.toolCalls).toHaveLength(1);
          const tool = TOOLS.find((t) => t.function.name === r.toolCalls[0].name)!;
          validOrThrow(tool.function.parameters, r.toolCalls[0].arguments, r.rawText);
        }
      } finally {
        await loaded.dispose();
      }
    }, 600_000);
  },
);
