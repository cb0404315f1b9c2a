import { describe, expect, it } from "vitest";
import { findDuplicateKeys } from "../../src/checkpoint/json-duplicates.js";

describe("findDuplicateKeys", () => {
  it("finds a repeated top-level key that JSON.parse would silently collapse", () => {
    const text = '{"a": {"x": 1}, "b": 2, "a": {"x": 3}}';
    expect(Object.keys(JSON.parse(text))).toEqual(["a", "b"]);
    expect(findDuplicateKeys(text)).toEqual([{ key: "a", path: [] }]);
  });

  it("reports nested duplicates with their path", () => {
    const text = '{"t": {"dtype": "F32", "shape": [1], "dtype": "F16"}, "m": [{"k": 1}, {"k": 2, "k": 3}]}';
    expect(findDuplicateKeys(text)).toEqual([
      { key: "dtype", path: ["t"] },
      { key: "k", path: ["m", "[1]"] },
    ]);
  });

  it("does not confuse string contents, escapes or sibling objects with keys", () => {
    const text = String.raw`{"a\"b": "{\"a\\\"b\": 1}", "c": {"a\"b": 1}, "d": {"a\"b": [",", "}"]}, "a\u0022c": 1}`;
    expect(findDuplicateKeys(text)).toEqual([]);
  });

  it("decodes escaped keys before comparing", () => {
    expect(findDuplicateKeys('{"ab": 1, "a\\u0062": 2}')).toEqual([{ key: "ab", path: [] }]);
  });
});
