import { InvalidArgumentError } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { StopStringMatcher } from "../src/index.js";
import { partialSuffix, StopRules } from "../src/stop.js";

/** Feeds pieces; returns what was emitted and whether/where it stopped. */
function run(stops: string[], pieces: string[]) {
  const m = new StopStringMatcher(stops);
  const emitted: string[] = [];
  for (const p of pieces) {
    const r = m.push(p);
    emitted.push(r.emit);
    if (r.stopped) return { emitted, stopped: r.stopString };
  }
  emitted.push(m.flush());
  return { emitted, stopped: undefined };
}

describe("StopStringMatcher", () => {
  it("finds a stop string split across pieces and never emits any part of it", () => {
    const r = run(["<END>"], ["Hello <", "EN", "D> trailing"]);
    expect(r.stopped).toBe("<END>");
    expect(r.emitted.join("")).toBe("Hello ");
    expect(r.emitted).toEqual(["Hello ", "", ""]);
  });

  it("releases held text once it can no longer become a stop string", () => {
    const r = run(["<END>"], ["a <E", "X", "b"]);
    expect(r.stopped).toBeUndefined();
    expect(r.emitted).toEqual(["a ", "<EX", "b", ""]);
  });

  it("releases a held prefix at the end of generation", () => {
    const r = run(["\n\nUser:"], ["answer.\n", "\nUs"]);
    expect(r.stopped).toBeUndefined();
    expect(r.emitted.join("")).toBe("answer.\n\nUs");
    expect(r.emitted.at(-1)).toBe("\n\nUs"); // held until flush
  });

  it("takes the earliest of several stop strings, also within one piece", () => {
    expect(run(["world", "lo w"], ["hello world"]).stopped).toBe("lo w");
    const r = run(["STOP", "END"], ["xx EN", "D yy STOP"]);
    expect(r.stopped).toBe("END");
    expect(r.emitted.join("")).toBe("xx ");
  });

  it("handles overlapping prefixes (aab inside aaab)", () => {
    const r = run(["aab"], ["a", "a", "a", "b", "c"]);
    expect(r.stopped).toBe("aab");
    expect(r.emitted.join("")).toBe("a");
  });

  it("passes everything through without stop strings, and rejects empty ones", () => {
    expect(run([], ["a", "b"]).emitted).toEqual(["a", "b", ""]);
    expect(() => new StopStringMatcher([""])).toThrow(InvalidArgumentError);
  });

  it("partialSuffix is the longest proper prefix of a needle ending the text", () => {
    expect(partialSuffix("abc<thi", ["<think>"])).toBe(4);
    expect(partialSuffix("abc<think>", ["<think>"])).toBe(0); // a whole needle is not partial
    expect(partialSuffix("x", ["ab", "xy"])).toBe(1);
  });
});

describe("StopRules", () => {
  it("knows EOS ids and the token budget", () => {
    const r = new StopRules({ eosTokenIds: [7, 9], maxTokens: 3 });
    expect(r.isEos(7) && r.isEos(9) && !r.isEos(8)).toBe(true);
    expect([1, 2, 3, 4].map((n) => r.reachedMaxTokens(n))).toEqual([false, false, true, true]);
    expect(new StopRules().reachedMaxTokens(1e9)).toBe(false);
  });

  it("rejects a budget that is not a positive integer", () => {
    expect(() => new StopRules({ maxTokens: 0 })).toThrow(/maxTokens/);
    expect(() => new StopRules({ maxTokens: 2.5 })).toThrow(InvalidArgumentError);
  });
});
