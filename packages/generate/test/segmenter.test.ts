import { describe, expect, it } from "vitest";
import { opensThinking } from "../src/generator.js";
import { type Segment, Segmenter } from "../src/segmenter.js";

function split(pieces: string[], startInThinking = false): Segment[] {
  const s = new Segmenter({ startInThinking });
  const out = pieces.flatMap((p) => s.push(p));
  out.push(...s.finish());
  return out;
}

/** Joins consecutive segments of a kind, like the result fields. */
function joined(segs: Segment[]) {
  let text = "";
  let thinking = "";
  const calls: string[] = [];
  for (const s of segs) {
    if (s.kind === "text") text += s.text;
    else if (s.kind === "thinking") thinking += s.text;
    else calls.push(`${s.closed ? "" : "OPEN:"}${s.body}`);
  }
  return { text, thinking, calls };
}

describe("Segmenter", () => {
  it("separates thinking from the answer, even with markers split across pieces", () => {
    const r = joined(split(["<th", "ink>\nLet me", " think.\n</thi", "nk>\n\nThe answer", " is 4."]));
    expect(r).toEqual({ text: "The answer is 4.", thinking: "Let me think.", calls: [] });
  });

  it("starts in thinking when the prompt already opened <think>", () => {
    const r = joined(split(["\nHmm, 2+2.\n", "</think>", "\n\n4"], true));
    expect(r).toEqual({ text: "4", thinking: "Hmm, 2+2.", calls: [] });
  });

  it("streams thinking and text pieces that join to the trimmed results", () => {
    const segs = split(["<think>\n", "a", "\n", "b", "\n", "</think>", "\n\n", "x", " ", "y"]);
    expect(segs).toEqual([
      { kind: "thinking", text: "a" },
      { kind: "thinking", text: "\nb" },
      { kind: "text", text: "x" },
      { kind: "text", text: " y" },
    ]);
  });

  it("keeps a non-thinking answer byte for byte, trailing whitespace included", () => {
    expect(joined(split(["  indented\n", "code\n"])).text).toBe("  indented\ncode\n");
  });

  it("cuts tool-call blocks out of the answer and drops their framing blank lines", () => {
    const r = joined(
      split([
        "I'll check.\n\n<tool_",
        "call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_",
        "call>",
      ]),
    );
    expect(r.text).toBe("I'll check.");
    expect(r.calls).toEqual(["\n<function=f>\n</function>\n", "\n<function=g>\n</function>\n"]);
  });

  it("reports a tool call cut off by the end of generation", () => {
    const r = joined(split(["<tool_call>\n<function=f>\n<parameter=a>\n1"]));
    expect(r.calls).toEqual(["OPEN:\n<function=f>\n<parameter=a>\n1"]);
  });

  it("treats <tool_call> inside thinking as thinking text, and drops a stray </think>", () => {
    expect(joined(split(["<think>use <tool_call> maybe</think>ok"]))).toEqual({
      text: "ok",
      thinking: "use <tool_call> maybe",
      calls: [],
    });
    expect(joined(split(["plan</think>\n\nanswer"]))).toEqual({
      text: "plananswer",
      thinking: "",
      calls: [],
    });
  });

  it("releases a held partial marker at the end", () => {
    expect(joined(split(["a <thi"])).text).toBe("a <thi");
  });
});

describe("opensThinking", () => {
  it("looks at the last turn of the prompt only", () => {
    expect(opensThinking("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n")).toBe(true);
    expect(opensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(false);
    expect(
      opensThinking("<|im_start|>assistant\n<think>\nx</think>y<|im_end|>\n<|im_start|>assistant\n"),
    ).toBe(false);
    expect(opensThinking("plain prompt")).toBe(false);
  });
});
