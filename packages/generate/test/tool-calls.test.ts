import { describe, expect, it } from "vitest";
import { parseToolCall, type ToolSpec } from "../src/index.js";

const body = (fn: string, params: Array<[string, string]>) =>
  `\n<function=${fn}>\n${params.map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("")}</function>\n`;

describe("parseToolCall (Qwen3.5 XML)", () => {
  it("reads the name and parameters; JSON-looking values become JSON", () => {
    const r = parseToolCall(
      body("calculate", [
        ["expression", "17*23"],
        ["digits", "[1, 2]"],
        ["exact", "true"],
        ["limit", "42"],
        ["opts", '{"a": {"b": null}}'],
      ]),
    );
    expect(r).toEqual({
      ok: true,
      call: {
        name: "calculate",
        arguments: { expression: "17*23", digits: [1, 2], exact: true, limit: 42, opts: { a: { b: null } } },
      },
    });
  });

  it("keeps multi-line values and inner whitespace, dropping only the framing newlines", () => {
    const code = "def f():\n    return 1\n";
    const r = parseToolCall(body("run_python", [["code", code]]));
    expect(r.ok && r.call.arguments.code).toBe(code);
  });

  it("keeps strings as strings when the tool schema says so", () => {
    const tools: ToolSpec[] = [
      {
        type: "function",
        function: {
          name: "lookup",
          parameters: { type: "object", properties: { zip: { type: "string" }, n: { type: "integer" } } },
        },
      },
    ];
    const r = parseToolCall(
      body("lookup", [
        ["zip", "01234"],
        ["n", "5"],
      ]),
      tools,
    );
    expect(r.ok && r.call.arguments).toEqual({ zip: "01234", n: 5 });
    const zipTrue = body("lookup", [["zip", "true"]]);
    expect(parseToolCall(zipTrue, tools)).toEqual({
      ok: true,
      call: { name: "lookup", arguments: { zip: "true" } },
    });
    // Without the schema "true" is JSON; "01234" is not (leading zero) and stays a string.
    expect(parseToolCall(zipTrue)).toEqual({ ok: true, call: { name: "lookup", arguments: { zip: true } } });
    expect(parseToolCall(body("lookup", [["zip", "01234"]]))).toEqual({
      ok: true,
      call: { name: "lookup", arguments: { zip: "01234" } },
    });
  });

  it("accepts a call without parameters and the JSON form of Qwen2.5/Qwen3", () => {
    expect(parseToolCall("<function=now>\n</function>")).toEqual({
      ok: true,
      call: { name: "now", arguments: {} },
    });
    expect(parseToolCall('\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n')).toEqual({
      ok: true,
      call: { name: "get_weather", arguments: { city: "Paris" } },
    });
    expect(parseToolCall('{"name": "f", "arguments": "{\\"x\\": 1}"}')).toEqual({
      ok: true,
      call: { name: "f", arguments: { x: 1 } },
    });
  });

  it.each([
    ["empty block", "\n\n", /empty/],
    ["no function element", "get_weather(city='Paris')", /<function=NAME>/],
    ["unnamed function", "<function=>\n</function>", /NAME/],
    ["unclosed function", "<function=f>\n<parameter=a>\n1\n</parameter>\n", /missing <\/function>/],
    ["unclosed parameter", "<function=f>\n<parameter=a>\n1\n</function>", /missing <\/parameter> for "a"/],
    ["text between parameters", "<function=f>\nhello\n</function>", /unexpected text/],
    [
      "duplicate parameter",
      body("f", [
        ["a", "1"],
        ["a", "2"],
      ]),
      /given twice/,
    ],
    ["text after </function>", "<function=f>\n</function>\nmore", /after <\/function>/],
    ["bad JSON form", '{"name": "f", "arguments": ', /not valid JSON/],
    ["JSON form without name", '{"arguments": {}}', /"name"/],
  ])("reports a malformed call: %s", (_label, text, message) => {
    const r = parseToolCall(text);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.message).toMatch(message);
      expect(r.error.raw).toBe(text);
    }
  });

  it("refuses a call to a function that was not offered (XML and JSON forms)", () => {
    const tools: ToolSpec[] = [{ type: "function", function: { name: "get_weather" } }];
    for (const text of [body("delete_all_files", [["path", "/"]]), '{"name": "delete_all_files"}']) {
      const r = parseToolCall(text, tools);
      expect(r.ok).toBe(false);
      if (!r.ok)
        expect(r.error.message).toBe('"delete_all_files" is not one of the tools offered (get_weather)');
      // without a tool list nothing is known to check against
      expect(parseToolCall(text).ok).toBe(true);
    }
    expect(parseToolCall(body("get_weather", []), tools).ok).toBe(true);
    expect(parseToolCall(body("x", []), []).ok).toBe(false);
  });

  it('keeps a parameter named "__proto__" as an argument', () => {
    const r = parseToolCall(
      body("f", [
        ["__proto__", '{"polluted": true}'],
        ["constructor", "1"],
      ]),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(Object.keys(r.call.arguments)).toEqual(["__proto__", "constructor"]);
    expect(JSON.parse(JSON.stringify(r.call.arguments))).toEqual(
      JSON.parse('{"__proto__": {"polluted": true}, "constructor": 1}'),
    );
    expect(Object.getPrototypeOf(r.call.arguments)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
