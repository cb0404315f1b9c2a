/**
 * What constrained decoding holds a generation to, in the engine's terms: the answer's JSON
 * Schema or grammar, and the tool calls Qwen3.5's chat template writes. A call is
 *
 * ```
 * <tool_call>
 * <function=NAME>
 * <parameter=ARG>
 * VALUE
 * </parameter>
 * </function>
 * </tool_call>
 * ```
 *
 * with a string-typed VALUE written raw and any other as JSON (tool-calls.ts reads it back the same
 * way), so a call's grammar is fixed text around one value grammar per parameter.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { ToolSpec } from "./chat-template.js";
import { UnsupportedSchemaError } from "./errors.js";
import { compileConstraint, type GrammarSpec, type TagFormat, type TagItem } from "./grammar-engine.js";
import { checkJsonSchema, type JsonSchema } from "./json-schema.js";
import type { Tokenizer } from "./tokenizer.js";
import { isRawStringType } from "./tool-calls.js";

/**
 * Which tools the model must call: `"auto"` lets it answer or call (calls to tools with
 * `strict: true` are constrained); `"required"` makes it call one or more of `tools`;
 * `{ name }` that one. Forced calls are always constrained.
 */
export type ToolChoice = "auto" | "required" | { name: string };

export interface ConstraintOptions {
  /** The answer is one JSON value valid against this schema (see SUPPORTED_SCHEMA_KEYWORDS). */
  jsonSchema?: JsonSchema;
  /** The answer matches this EBNF grammar (xgrammar's dialect: `root ::= …`, W3C EBNF notation). */
  grammar?: string;
  tools?: readonly ToolSpec[];
  toolChoice?: ToolChoice;
  /** False: at most one tool call. Default true. */
  parallelToolCalls?: boolean;
}

export interface ConstraintPlan {
  readonly spec: GrammarSpec;
  /**
   * True when the whole answer is the constrained text (a schema or grammar, no tool calls): it is
   * taken as it is, with no thinking or tool-call markers read inside it.
   */
  readonly literalAnswer: boolean;
}

const CALL_END = "</function>\n</tool_call>";
/** Nothing: the engine has no empty string literal, but an empty grammar. */
const EMPTY: TagFormat = { type: "grammar", grammar: 'root ::= ""' };
/** Raw text that never contains "</" (which would close the parameter, function or call early). */
const RAW_TEXT = "([^<]|<+[^/<])*<*";

/**
 * The constraint `o` asks for, or undefined when nothing is constrained. Throws
 * UnsupportedSchemaError for a schema keyword the engine does not enforce, InvalidArgumentError
 * for options that do not fit together.
 */
export function planConstraint(o: ConstraintOptions): ConstraintPlan | undefined {
  if (o.jsonSchema !== undefined && o.grammar !== undefined)
    throw new InvalidArgumentError("give either jsonSchema or grammar, not both");
  if (o.grammar !== undefined && (typeof o.grammar !== "string" || o.grammar.trim() === ""))
    throw new InvalidArgumentError("grammar must be a non-empty EBNF string");
  if (o.jsonSchema !== undefined) checkJsonSchema(o.jsonSchema, "jsonSchema");

  const tools = o.tools ?? [];
  const choice = o.toolChoice ?? "auto";
  const single = o.parallelToolCalls === false;
  let tags: TagItem[] | undefined;
  if (choice !== "auto") {
    const name = typeof choice === "object" ? choice.name : undefined;
    const chosen = tools
      .map((tool, i) => ({ tool, i }))
      .filter(({ tool }) => name === undefined || tool.function.name === name);
    if (chosen.length === 0) {
      throw new InvalidArgumentError(
        name === undefined
          ? 'toolChoice "required" needs tools'
          : `toolChoice names "${name}", which is not among the tools`,
      );
    }
    tags = chosen.map(({ tool, i }) => callTag(tool, true, i));
    return {
      spec: structural({
        type: "tags_with_separator",
        tags,
        separator: "\n",
        at_least_one: true,
        stop_after_first: single,
      }),
      literalAnswer: false,
    };
  }
  if (tools.some((t) => t.function.strict === true)) {
    tags = tools.map((tool, i) => callTag(tool, tool.function.strict === true, i));
  }

  const answer: TagFormat | undefined =
    o.jsonSchema !== undefined
      ? { type: "json", schema: o.jsonSchema }
      : o.grammar !== undefined
        ? { type: "grammar", grammar: o.grammar }
        : undefined;
  if (!tags) {
    if (o.jsonSchema !== undefined)
      return { spec: { kind: "json_schema", schema: o.jsonSchema }, literalAnswer: true };
    if (o.grammar !== undefined) return { spec: { kind: "ebnf", grammar: o.grammar }, literalAnswer: true };
    return undefined;
  }
  if (answer) {
    // either the answer in its form, or calls (and nothing else)
    const calls: TagFormat = {
      type: "tags_with_separator",
      tags,
      separator: "\n",
      at_least_one: true,
      stop_after_first: single,
    };
    return { spec: structural({ type: "or", elements: [answer, calls] }), literalAnswer: false };
  }
  // free text, and every <tool_call> a well-formed call to one of the tools
  return {
    spec: structural({ type: "triggered_tags", triggers: ["<tool_call>"], tags, stop_after_first: single }),
    literalAnswer: false,
  };
}

/**
 * Checks and compiles (into the engine's cache) the constraint `o` asks for, so that a server can
 * refuse a bad one before the request waits for its model; generate() with the same options then
 * starts at once. Throws what generate() would: UnsupportedSchemaError, InvalidArgumentError,
 * GrammarError. Returns false when nothing is constrained.
 */
export async function prepareConstraint(tokenizer: Tokenizer, o: ConstraintOptions): Promise<boolean> {
  const plan = planConstraint(o);
  if (!plan) return false;
  (await compileConstraint(tokenizer, plan.spec)).dispose();
  return true;
}

function structural(format: TagFormat): GrammarSpec {
  return { kind: "structural_tag", format };
}

/** One tool's call: its name, then (when `strict`) each parameter in declared order. */
function callTag(tool: ToolSpec, strict: boolean, index: number): TagItem {
  const name = tool.function.name;
  if (typeof name !== "string" || !/^[^\s<>]+$/.test(name))
    throw new InvalidArgumentError(
      `tools[${index}].function.name must be a name without spaces, < or > (got ${JSON.stringify(name)})`,
    );
  return {
    type: "tag",
    begin: `<tool_call>\n<function=${name}>\n`,
    content: strict
      ? parameters(tool.function.parameters, `tools[${index}].function.parameters`)
      : { type: "any_text" },
    end: CALL_END,
  };
}

const PARAMETER_KEYS = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "$defs",
  "definitions",
  "title",
  "description",
  "$schema",
  "$comment",
]);

function parameters(params: unknown, where: string): TagFormat {
  if (params === undefined) return EMPTY;
  const fail = (path: (string | number)[], keyword: string | undefined, why: string): never => {
    throw new UnsupportedSchemaError(where, path, keyword, why);
  };
  if (typeof params !== "object" || params === null || Array.isArray(params))
    fail([], undefined, "must be an object schema");
  const p = params as Record<string, unknown>;
  for (const key of Object.keys(p)) {
    if (!PARAMETER_KEYS.has(key))
      fail(
        [key],
        key,
        `"${key}" is not supported at the top of a tool's parameters (an object with properties)`,
      );
  }
  if (p.type !== undefined && p.type !== "object") fail(["type"], "type", 'must be "object"');
  if (p.additionalProperties !== undefined && p.additionalProperties !== false)
    fail(
      ["additionalProperties"],
      "additionalProperties",
      "strict tool calls take only the declared parameters: leave it out or set it to false",
    );
  checkJsonSchema({ ...p, type: "object" }, where);

  const props = (p.properties ?? {}) as Record<string, unknown>;
  const required = new Set((p.required ?? []) as string[]);
  const defs = { $defs: p.$defs, definitions: p.definitions };
  const elements: TagFormat[] = [];
  for (const [arg, schema] of Object.entries(props)) {
    if (!/^\S(.*\S)?$/.test(arg) || /[<>\n]/.test(arg))
      fail(
        ["properties", arg],
        "properties",
        `parameter name ${JSON.stringify(arg)} has <, >, a newline or surrounding spaces`,
      );
    const one: TagFormat = {
      type: "sequence",
      elements: [
        { type: "const_string", value: `<parameter=${arg}>\n` },
        value(schema, defs, (keyword, why) => fail(["properties", arg, keyword], keyword, why)),
        { type: "const_string", value: "\n</parameter>\n" },
      ],
    };
    elements.push(required.has(arg) ? one : { type: "or", elements: [one, EMPTY] });
  }
  return elements.length === 0 ? EMPTY : { type: "sequence", elements };
}

/** A parameter's value: raw text for string-typed ones (as the template writes them), else JSON. */
function value(
  schema: unknown,
  defs: { $defs: unknown; definitions: unknown },
  fail: (keyword: string, why: string) => never,
): TagFormat {
  if (refersToRoot(schema))
    fail("$ref", 'a parameter cannot refer to the whole parameters object ("$ref": "#")');
  if (
    typeof schema !== "object" ||
    schema === null ||
    !isRawStringType((schema as { type?: unknown }).type)
  ) {
    if (typeof schema !== "object" || schema === null) return { type: "json", schema: schema as JsonSchema };
    return { type: "json", schema: { ...(schema as object), ...pruned(defs) } };
  }
  const s = schema as Record<string, unknown>;
  for (const k of ["pattern", "format"]) {
    if (s[k] !== undefined)
      fail(k, `"${k}" is not supported on a string-typed tool parameter (its value is raw text)`);
  }
  const literals = s.enum ?? (s.const !== undefined ? [s.const] : undefined);
  if (Array.isArray(literals)) {
    for (const v of literals as string[]) {
      if (v.includes("</")) fail("enum", `${JSON.stringify(v)} contains "</", which would end the parameter`);
    }
    return {
      type: "or",
      elements: (literals as string[]).map((v) => ({ type: "const_string", value: v }) as TagFormat),
    };
  }
  if (s.minLength !== undefined || s.maxLength !== undefined) {
    // counted in characters, none of them "<"
    return { type: "regex", pattern: `[^<]{${s.minLength ?? 0},${s.maxLength ?? ""}}` };
  }
  return { type: "regex", pattern: RAW_TEXT };
}

function pruned(defs: { $defs: unknown; definitions: unknown }): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (defs.$defs !== undefined) out.$defs = defs.$defs;
  if (defs.definitions !== undefined) out.definitions = defs.definitions;
  return out;
}

function refersToRoot(schema: unknown): boolean {
  if (typeof schema !== "object" || schema === null) return false;
  if ((schema as { $ref?: unknown }).$ref === "#") return true;
  return Object.values(schema).some(refersToRoot);
}
