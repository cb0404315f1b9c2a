/**
 * Constrained decoding through generate(): every supported JSON-Schema keyword, tool calls in the
 * chat template's format, thinking, and the refusals. Outputs are checked with ajv (draft 2020-12,
 * ajv-formats), never with the engine that produced them. A "random" model stands in for a weak
 * one: seeded random logits, so nearly every unconstrained output is garbage.
 */
import { join } from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { beforeAll, describe, expect, it } from "vitest";
import {
  compileConstraint,
  generate,
  type JsonSchema,
  loadTokenizer,
  parseToolCall,
  type StepModel,
  type StepOutput,
  type Tokenizer,
  type ToolSpec,
  UnsupportedSamplingError,
  UnsupportedSchemaError,
} from "../src/index.js";
import { Xoshiro128 } from "../src/sampler.js";
import { ScriptedModel } from "./helpers.js";

const TINY_TRAINED = join(import.meta.dirname, "../../../fixtures/tiny-trained");

// ajv and ajv-formats are CommonJS: under ESM their classes are the default export's `default`
const AjvClass = (Ajv2020 as unknown as { default: typeof Ajv2020.default }).default;
const withFormats = (addFormats as unknown as { default: typeof addFormats.default }).default;
const ajv = withFormats(new AjvClass({ strict: true, strictTuples: false, allErrors: true }));

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${text}`);
  }
}

function expectValid(schema: JsonSchema, value: unknown, text: string): void {
  const validate = ajv.compile(schema as object);
  if (!validate(value)) throw new Error(`${text}\nis not valid: ${ajv.errorsText(validate.errors)}`);
}

/** Seeded random logits at every step: a model that knows nothing. */
class RandomModel implements StepModel {
  readonly contextLength = 4096;
  readonly outputKind = "logits" as const;
  position = 0;
  private rng: Xoshiro128;
  constructor(
    private readonly vocabSize: number,
    seed: number,
  ) {
    this.rng = new Xoshiro128(seed);
  }
  reset(): void {
    this.position = 0;
  }
  async prefill(ids: Int32Array | number[]): Promise<StepOutput> {
    this.position += ids.length;
    return this.out();
  }
  async decode(): Promise<StepOutput> {
    this.position++;
    return this.out();
  }
  dispose(): void {}
  private out(): StepOutput {
    const logits = new Float32Array(this.vocabSize);
    for (let i = 0; i < logits.length; i++) logits[i] = this.rng.next() * 8;
    return { logits };
  }
}

/** A RandomModel that first says `script` (one token a step, again after reset), then knows nothing. */
function scriptedRandomModel(script: ArrayLike<number>, seed: number): StepModel {
  const rnd = new RandomModel(4096, seed);
  let step = 0;
  const next = async (): Promise<StepOutput> => {
    const out = (await rnd.decode()) as { logits: Float32Array };
    if (step < script.length) out.logits[script[step]] = 100;
    step++;
    return out;
  };
  return {
    contextLength: 4096,
    outputKind: "logits",
    position: 0,
    reset: () => {
      step = 0;
    },
    prefill: () => next(),
    decode: () => next(),
    dispose: () => {},
  };
}

let tok: Tokenizer;
beforeAll(async () => {
  tok = await loadTokenizer(TINY_TRAINED);
}, 60_000);

/** Each supported keyword, in a schema whose outputs are bounded (a random model never stops a string). */
const SCHEMAS: Record<string, JsonSchema> = {
  "nested objects, arrays, enums, required": {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 6 },
      kind: { enum: ["cat", "dog", 3, null] },
      tags: { type: "array", items: { type: "string", enum: ["a", "b"] }, minItems: 1, maxItems: 3 },
      owner: {
        type: "object",
        properties: { age: { type: "integer", minimum: 0, maximum: 120 }, ok: { type: "boolean" } },
        required: ["age", "ok"],
        additionalProperties: false,
      },
    },
    required: ["name", "kind", "owner"],
  },
  "numbers and exclusive bounds": {
    type: "object",
    properties: {
      i: { type: "integer", exclusiveMinimum: -3, exclusiveMaximum: 9 },
      x: { type: "number" },
      n: { type: ["integer", "null"], minimum: 10, maximum: 99 },
    },
    required: ["i", "x", "n"],
  },
  "const, anyOf, $ref, prefixItems": {
    $defs: { small: { type: "integer", minimum: 0, maximum: 9 } },
    type: "object",
    properties: {
      v: { const: "v1" },
      either: { anyOf: [{ $ref: "#/$defs/small" }, { type: "string", maxLength: 3 }, { type: "null" }] },
      pair: {
        type: "array",
        prefixItems: [{ type: "boolean" }, { $ref: "#/$defs/small" }],
        items: { type: "null" },
        maxItems: 3,
      },
    },
    required: ["v", "either", "pair"],
    additionalProperties: false,
  },
  "pattern and formats": {
    type: "object",
    properties: {
      code: { type: "string", pattern: "^[A-Z]{2}-[0-9]{3}$" },
      id: { type: "string", format: "uuid" },
      word: { type: "string", pattern: "(yes|no)+!?" },
    },
    required: ["code", "id", "word"],
  },
  "allOf of one, top-level array": {
    allOf: [{ type: "array", items: { type: "integer", minimum: 1, maximum: 5 }, maxItems: 4 }],
  },
};

describe("jsonSchema: every output validates (random model, 8 seeds per schema)", () => {
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(name, async () => {
      for (let seed = 1; seed <= 8; seed++) {
        const r = await generate(new RandomModel(4096, seed), tok, {
          prompt: "In the beginning",
          jsonSchema: schema,
          maxTokens: 400,
          sampling: { temperature: 1, seed },
        });
        expect(r.finishDetail.type, r.rawText).toBe("eos");
        // JSON admits exponents no double holds (1E400 parses to Infinity, which no validator
        // takes for a number): the one case where a grammar-valid number is not a valid value
        const value = parse(r.text);
        if (name.startsWith("numbers") && !Number.isFinite((value as { x: number }).x)) {
          expect(r.text).toMatch(/"x": -?\d+(\.\d+)?[eE][+-]?\d{3,}/);
          continue;
        }
        expectValid(schema, value, r.text);
        expect(r.text).toBe(r.rawText);
        expect(r.stats.maskMs).toBeGreaterThan(0);
      }
    }, 120_000);
  }

  it("without the schema, the same model writes no JSON", async () => {
    const r = await generate(new RandomModel(4096, 1), tok, {
      prompt: "In the beginning",
      maxTokens: 40,
      sampling: { temperature: 1, seed: 1 },
    });
    expect(() => JSON.parse(r.text)).toThrow();
    expect(r.stats.maskMs).toBe(0);
  });

  it("leaves greedy output alone where it already fits, and stops at the end of the value", async () => {
    const json = '{"a": [1, 2], "b": "hi"}';
    const ids = tok.encode(`${json} and more`);
    const schema = {
      type: "object",
      properties: { a: { type: "array", items: { type: "integer" } }, b: { type: "string" } },
    };
    const free = await generate(new ScriptedModel([...ids, 4000], { vocabSize: 4096 }), tok, {
      prompt: "x",
      maxTokens: ids.length,
    });
    const held = await generate(new ScriptedModel([...ids, 4000], { vocabSize: 4096 }), tok, {
      prompt: "x",
      jsonSchema: schema,
      maxTokens: ids.length,
    });
    expect(free.text).toBe(`${json} and more`);
    expect(held.text).toBe(json); // the same tokens while they fit, then EOS (the only id left)
    expect(held.finishDetail).toEqual({ type: "eos", tokenId: 4000 });
    expect(held.tokenIds).toEqual(ids.slice(0, held.tokenIds.length));
  });

  it("takes markers inside a constrained answer as text", async () => {
    const json = '{"s": "<tool_call>"}';
    const ids = tok.encode(json);
    const r = await generate(new ScriptedModel([...ids, 4000], { vocabSize: 4096 }), tok, {
      prompt: "x",
      jsonSchema: { type: "object", properties: { s: { type: "string" } } },
    });
    expect(r.text).toBe(json);
    expect(r.toolCallErrors).toEqual([]);
  });

  it("json_object ({type: object}) and a grammar", async () => {
    const r = await generate(new RandomModel(4096, 3), tok, {
      prompt: "x",
      grammar: 'root ::= "yes" | "no" | ("maybe " [0-9])',
      sampling: { temperature: 1, seed: 3 },
    });
    expect(r.text).toMatch(/^(yes|no|maybe [0-9])$/);
  });
});

describe("thinking", () => {
  it("leaves thinking unmasked and constrains what follows </think>", async () => {
    const thinking = tok.encode("Let me see.\n</think>\n\n");
    // thinks in plain words (no JSON), then knows nothing
    const model = scriptedRandomModel(thinking, 9);
    const schema = {
      type: "object",
      properties: { n: { type: "integer", minimum: 1, maximum: 3 } },
      required: ["n"],
    };
    const r = await generate(model, tok, {
      messages: [{ role: "user", content: "hi" }],
      enableThinking: true,
      jsonSchema: schema,
      maxTokens: 60,
      sampling: { temperature: 1, seed: 2 },
    });
    expect(r.thinking).toBe("Let me see.");
    expectValid(schema, parse(r.text), r.text);
  });
});

const TOOLS: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      strict: true,
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", maxLength: 8 },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          days: { type: "integer", minimum: 1, maximum: 7 },
          at: {
            type: "object",
            properties: { lat: { type: "integer", minimum: -90, maximum: 90 } },
            required: ["lat"],
          },
          note: { type: "string", minLength: 0, maxLength: 5 },
        },
        required: ["city", "unit", "days"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "add",
      strict: true,
      parameters: {
        type: "object",
        properties: {
          xs: { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, maxItems: 3 },
        },
        required: ["xs"],
      },
    },
  },
];

function checkCalls(text: string, tools: ToolSpec[], minCalls: number): void {
  const blocks = [...text.matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)];
  expect(blocks.length, text).toBeGreaterThanOrEqual(minCalls);
  for (const [, body] of blocks) {
    const parsed = parseToolCall(body, tools);
    if (!parsed.ok) throw new Error(`${parsed.error.message}\n${body}`);
    const tool = tools.find((t) => t.function.name === parsed.call.name)!;
    expectValid(tool.function.parameters as JsonSchema, parsed.call.arguments, body);
  }
}

describe("tool calls in Qwen3.5's XML format", () => {
  it("toolChoice required: one or more well-formed calls with schema-valid arguments", async () => {
    for (let seed = 1; seed <= 8; seed++) {
      const r = await generate(new RandomModel(4096, seed), tok, {
        messages: [{ role: "user", content: "weather?" }],
        tools: TOOLS,
        toolChoice: "required",
        maxTokens: 400,
        sampling: { temperature: 1, seed },
      });
      expect(r.finishDetail.type, r.rawText).toBe("eos");
      expect(r.toolCallErrors).toEqual([]);
      expect(r.toolCalls.length).toBeGreaterThanOrEqual(1);
      for (const call of r.toolCalls) {
        const tool = TOOLS.find((t) => t.function.name === call.name)!;
        expectValid(tool.function.parameters as JsonSchema, call.arguments, r.rawText);
      }
      checkCalls(r.rawText, TOOLS, 1);
      expect(r.finishReason).toBe("tool_calls");
    }
  }, 120_000);

  it("a named tool, one call (parallelToolCalls false), after a prefix the prompt wrote", async () => {
    for (let seed = 1; seed <= 4; seed++) {
      const prefix = "<tool_call>\n<function=add>\n";
      const r = await generate(new RandomModel(4096, seed), tok, {
        prompt: `add things\n${prefix}`,
        tools: TOOLS,
        toolChoice: { name: "add" },
        parallelToolCalls: false,
        answerPrefix: prefix,
        maxTokens: 200,
        sampling: { temperature: 1, seed },
      });
      expect(r.finishDetail.type, r.rawText).toBe("eos");
      const parsed = parseToolCall(
        `${prefix.slice("<tool_call>".length)}${r.rawText.replace(/<\/tool_call>$/, "")}`,
        TOOLS,
      );
      if (!parsed.ok) throw new Error(`${parsed.error.message}: ${r.rawText}`);
      expect(parsed.call.name).toBe("add");
      expectValid(TOOLS[1].function.parameters as JsonSchema, parsed.call.arguments, r.rawText);
      expect(r.rawText.endsWith("</function>\n</tool_call>")).toBe(true);
    }
  });

  it("strict tools under auto: free text, and every call it makes is well-formed", async () => {
    // a model that starts a call after a few words, then knows nothing
    const start = tok.encode("Sure.\n\n<tool_call>");
    for (let seed = 1; seed <= 4; seed++) {
      const r = await generate(scriptedRandomModel(start, seed), tok, {
        messages: [{ role: "user", content: "weather?" }],
        tools: TOOLS,
        maxTokens: 300,
        parallelToolCalls: false,
        sampling: { temperature: 1, seed },
      });
      expect(r.text).toBe("Sure.");
      expect(r.toolCallErrors).toEqual([]);
      expect(r.toolCalls).toHaveLength(1);
      checkCalls(r.rawText, TOOLS, 1);
    }
  }, 60_000);
});

describe("refusals", () => {
  const refuses = async (schema: unknown, path: string, keyword: string) => {
    const err = await generate(new RandomModel(4096, 1), tok, {
      prompt: "x",
      jsonSchema: schema as JsonSchema,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UnsupportedSchemaError);
    expect((err as UnsupportedSchemaError).keyword).toBe(keyword);
    expect((err as Error).message).toContain(path);
  };

  it("names the unsupported keyword and where it is", async () => {
    await refuses(
      { type: "object", properties: { a: { type: "integer", multipleOf: 3 } } },
      "jsonSchema.properties.a.multipleOf",
      "multipleOf",
    );
    await refuses({ oneOf: [{ type: "string" }] }, "jsonSchema.oneOf", "oneOf");
    await refuses({ type: "array", uniqueItems: true }, "jsonSchema.uniqueItems", "uniqueItems");
    await refuses({ type: "string", format: "email" }, "jsonSchema.format", "format");
    await refuses({ type: "string", pattern: "(?=a)b" }, "jsonSchema.pattern", "pattern");
    await refuses({ type: "integer", minimum: 5, maximum: 1 }, "jsonSchema", "minimum");
    await refuses({ type: "number", minimum: -2.5 }, "jsonSchema.minimum", "minimum");
    await refuses({ $ref: "https://example.com/s.json" }, "jsonSchema.$ref", "$ref");
    await refuses({ type: "object", foo: 1 }, "jsonSchema.foo", "foo");
    await refuses({ type: "string", enum: ["a", 1] }, "jsonSchema.enum[1]", "enum");
    await refuses(
      { type: "object", properties: { a: {} }, required: ["b"] },
      "jsonSchema.required",
      "required",
    );
  });

  it("refuses a strict tool whose parameters it cannot hold to", async () => {
    const tools: ToolSpec[] = [
      {
        type: "function",
        function: {
          name: "f",
          strict: true,
          parameters: { type: "object", properties: { s: { type: "string", pattern: "a+" } } },
        },
      },
    ];
    const err = await generate(new RandomModel(4096, 1), tok, { prompt: "x", tools }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UnsupportedSchemaError);
    expect((err as Error).message).toContain("tools[0].function.parameters.properties.s.pattern");
  });

  it("refuses constraints on an argmax-only model (top-1 outputs cannot be masked)", async () => {
    const model = new ScriptedModel([1, 2, 3], { vocabSize: 4096, top1: true, declareOutputKind: true });
    await expect(
      generate(model, tok, { prompt: "x", jsonSchema: { type: "object" } }),
    ).rejects.toBeInstanceOf(UnsupportedSamplingError);
    // also when the model does not say so up front
    const quiet = new ScriptedModel([1, 2, 3], { vocabSize: 4096, top1: true });
    await expect(generate(quiet, tok, { prompt: "x", jsonSchema: { type: "object" } })).rejects.toThrow(
      /top-1/,
    );
    expect(model.prefilled).toEqual([]);
  });

  it("reports an EBNF grammar the engine cannot parse, and keeps working after", async () => {
    await expect(
      generate(new RandomModel(4096, 1), tok, { prompt: "x", grammar: 'root ::= "a" | b' }),
    ).rejects.toThrow(/Rule "b" is not defined/);
    const r = await generate(new RandomModel(4096, 1), tok, { prompt: "x", grammar: 'root ::= "ok"' });
    expect(r.text).toBe("ok");
  });
});

describe("TokenMatcher (token by token, with rollback for speculative decoding)", () => {
  it("masks, accepts, refuses and rolls back", async () => {
    const m = await compileConstraint(tok, { kind: "json_schema", schema: { enum: ["yes", "no"] } });
    const allowed = (mask: Int32Array, id: number) => ((mask[id >> 5] >>> (id & 31)) & 1) === 1;
    const quote = tok.encode('"')[0];
    const mask0 = await m.mask();
    expect(allowed(mask0, quote)).toBe(true);
    expect(allowed(mask0, tok.encode("{")[0])).toBe(false);
    const draft = tok.encode('"yes"');
    for (const id of draft) expect(m.accept(id)).toBe(true);
    expect(allowed(await m.mask(), 4000)).toBe(true); // EOS once the value is complete
    m.rollback(draft.length);
    expect(allowed(await m.mask(), quote)).toBe(true);
    expect(m.accept(tok.encode("{")[0])).toBe(false);
    m.dispose();
  });
});
