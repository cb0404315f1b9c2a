import type { ToolCall, ToolSpec } from "./chat-template.js";

/** A `<tool_call>` block the model wrote that could not be read as a call. */
export interface MalformedToolCall {
  /** The text between `<tool_call>` and `</tool_call>` (or to the end, if never closed). */
  raw: string;
  /** What was wrong, e.g. `missing </parameter> for "city"`. */
  message: string;
}

export type ToolCallParse = { ok: true; call: ToolCall } | { ok: false; error: MalformedToolCall };

/**
 * Parses the body of one `<tool_call>…</tool_call>` block. When `tools` is given, a call to a
 * function not among them is refused like a malformed call (the model invented a tool, or text it
 * read talked it into one): a caller must never be handed a call it did not offer.
 *
 * Qwen3.5 writes calls as XML (the qwen3_coder format):
 * ```
 * <function=get_weather>
 * <parameter=city>
 * Paris
 * </parameter>
 * </function>
 * ```
 * A value is read as JSON when it parses (`42`, `true`, `{"a":1}`) unless the tool's JSON Schema
 * says the parameter is a string; otherwise it stays a string. The JSON form of Qwen2.5/Qwen3
 * (`{"name": …, "arguments": {…}}`) is accepted too, so older checkpoints work.
 */
export function parseToolCall(body: string, tools?: readonly ToolSpec[]): ToolCallParse {
  const parsed = parseCallSyntax(body, tools ?? []);
  if (!parsed.ok || tools === undefined) return parsed;
  const name = parsed.call.name;
  if (tools.some((t) => t.function?.name === name)) return parsed;
  const offered = tools.map((t) => t.function?.name).join(", ") || "none";
  return {
    ok: false,
    error: { raw: body, message: `"${name}" is not one of the tools offered (${offered})` },
  };
}

function parseCallSyntax(body: string, tools: readonly ToolSpec[]): ToolCallParse {
  const s = body.trim();
  const fail = (message: string): ToolCallParse => ({ ok: false, error: { raw: body, message } });
  if (s.length === 0) return fail("empty <tool_call> block");
  if (s.startsWith("{")) return parseJsonCall(s, body);

  const open = "<function=";
  if (!s.startsWith(open)) return fail('expected "<function=NAME>" at the start of the tool call');
  const nameEnd = s.indexOf(">", open.length);
  const name = nameEnd < 0 ? "" : s.slice(open.length, nameEnd).trim();
  if (nameEnd < 0 || name.length === 0 || name.includes("\n"))
    return fail('"<function=" is not followed by NAME>');
  const close = "</function>";
  if (!s.endsWith(close)) {
    return fail(
      s.includes(close)
        ? `unexpected text after </function> of "${name}"`
        : `missing </function> for "${name}"`,
    );
  }

  const schema = propertyTypes(tools, name);
  const args: Record<string, unknown> = {};
  const inner = s.slice(nameEnd + 1, s.length - close.length);
  let i = 0;
  for (;;) {
    while (i < inner.length && /\s/.test(inner[i])) i++;
    if (i >= inner.length) break;
    const pOpen = "<parameter=";
    if (!inner.startsWith(pOpen, i)) {
      return fail(`unexpected text in "${name}": ${JSON.stringify(inner.slice(i, i + 40))}`);
    }
    const pNameEnd = inner.indexOf(">", i + pOpen.length);
    const pName = pNameEnd < 0 ? "" : inner.slice(i + pOpen.length, pNameEnd).trim();
    if (pNameEnd < 0 || pName.length === 0 || pName.includes("\n")) {
      return fail(`"<parameter=" in "${name}" is not followed by NAME>`);
    }
    const pClose = inner.indexOf("</parameter>", pNameEnd + 1);
    if (pClose < 0) return fail(`missing </parameter> for "${pName}" in "${name}"`);
    if (Object.hasOwn(args, pName)) return fail(`parameter "${pName}" given twice in "${name}"`);
    // The template puts the value on its own line(s): drop exactly that framing newline.
    let value = inner.slice(pNameEnd + 1, pClose);
    if (value.startsWith("\n")) value = value.slice(1);
    if (value.endsWith("\n")) value = value.slice(0, -1);
    // defineProperty: a parameter named "__proto__" is a key like any other, not the prototype
    Object.defineProperty(args, pName, {
      value: convertValue(value, schema && Object.hasOwn(schema, pName) ? schema[pName] : undefined),
      enumerable: true,
      writable: true,
      configurable: true,
    });
    i = pClose + "</parameter>".length;
  }
  return { ok: true, call: { name, arguments: args } };
}

function parseJsonCall(s: string, raw: string): ToolCallParse {
  let v: unknown;
  try {
    v = JSON.parse(s);
  } catch (err) {
    return { ok: false, error: { raw, message: `tool call is not valid JSON: ${(err as Error).message}` } };
  }
  const obj = v as { name?: unknown; arguments?: unknown };
  if (typeof obj !== "object" || obj === null || typeof obj.name !== "string" || obj.name.length === 0) {
    return { ok: false, error: { raw, message: 'JSON tool call needs a string "name"' } };
  }
  let args = obj.arguments ?? {};
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      return {
        ok: false,
        error: { raw, message: `"arguments" of "${obj.name}" is a string that is not JSON` },
      };
    }
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    return { ok: false, error: { raw, message: `"arguments" of "${obj.name}" must be an object` } };
  }
  return { ok: true, call: { name: obj.name, arguments: args as Record<string, unknown> } };
}

/**
 * True when a parameter whose schema has this `type` is written as raw text (Qwen3.5's template
 * writes strings as they are and everything else as JSON): `"string"` or a list of only "string".
 */
export function isRawStringType(type: unknown): boolean {
  const types = Array.isArray(type) ? type : type === undefined ? [] : [type];
  return types.length > 0 && types.every((t) => t === "string");
}

function convertValue(value: string, type: unknown): unknown {
  if (isRawStringType(type)) return value;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

/** `properties[*].type` of the named tool's parameter schema, if the caller passed the tools. */
function propertyTypes(tools: readonly ToolSpec[], name: string): Record<string, unknown> | undefined {
  const tool = tools.find((t) => t.function?.name === name);
  const props = tool?.function.parameters?.properties;
  if (typeof props !== "object" || props === null) return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(props as Record<string, unknown>)) {
    if (typeof v === "object" && v !== null)
      Object.defineProperty(out, k, { value: (v as { type?: unknown }).type, enumerable: true });
  }
  return out;
}
