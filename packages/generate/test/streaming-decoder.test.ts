import { beforeAll, describe, expect, it } from "vitest";
import { type DecodesIds, loadTokenizer, StreamingDecoder, type Tokenizer } from "../src/index.js";
import { chatCases, FIXTURE_TOKENIZER_DIR } from "./helpers.js";

let tok: Tokenizer;
beforeAll(async () => {
  tok = await loadTokenizer(FIXTURE_TOKENIZER_DIR);
});

/** Push ids one at a time; return every piece. */
function stream(ids: number[], d: StreamingDecoder = tok.streamingDecoder()): string[] {
  const pieces = ids.map((id) => d.push(id));
  pieces.push(d.flush());
  return pieces;
}

describe("StreamingDecoder", () => {
  it("emits a 4-byte emoji only once all its byte tokens are in, never a U+FFFD half", () => {
    const ids = tok.encode("test 😊!");
    // The fixture has no merge for 😊: it is four single-byte tokens.
    const emojiBytes = ids.filter((id) => tok.decode([id]) === "\uFFFD");
    expect(emojiBytes.length).toBe(4);
    const pieces = stream(ids);
    expect(pieces.join("")).toBe("test 😊!");
    for (const p of pieces) expect(p).not.toContain("\uFFFD");
    expect(pieces).toContain("😊"); // released as one piece, by the token completing it
  });

  it("matches a full decode for every probe, CJK, Devanagari and Thai included", () => {
    for (const p of chatCases().probes) {
      const pieces = stream(p.ids);
      expect(pieces.join("")).toBe(tok.decode(p.ids));
      for (const piece of pieces) expect(piece).not.toContain("\uFFFD");
    }
  });

  it("keeps spaces exactly (byte-level: the space lives in the token)", () => {
    const text = "Hi   Hello\n\n \n  \n Hello  world";
    expect(stream(tok.encode(text)).join("")).toBe(text);
  });

  it("flush releases an incomplete character as U+FFFD and resets", () => {
    const d = tok.streamingDecoder();
    const ids = tok.encode("é😊");
    // Push all but the last byte of the emoji.
    let out = "";
    for (const id of ids.slice(0, -1)) out += d.push(id);
    expect(out).toBe("é");
    expect(d.flush()).toBe("\uFFFD");
    expect(d.push(tok.encode("ok"))).toBe("ok");
  });

  it("skips special tokens when asked", () => {
    const ids = tok.encode("<|im_start|>assistant\nyes<|im_end|>");
    expect(stream(ids, tok.streamingDecoder({ skipSpecialTokens: true })).join("")).toBe("assistant\nyes");
    expect(stream(ids).join("")).toBe("<|im_start|>assistant\nyes<|im_end|>");
  });

  it("holds a trailing U+FFFD only until the next token or the hold limit, never forever", () => {
    const fffd = tok.encode("\uFFFD"); // three byte tokens EF BF BD
    expect(fffd.length).toBe(3);
    const d = tok.streamingDecoder();
    // A real U+FFFD at the end looks like half a character: held...
    expect(d.push(fffd)).toBe("");
    // ...and released with the next token.
    expect(d.push(tok.encode("a"))).toBe("\uFFFDa");
    // A run of them is released once 8 tokens are held, not at the end of generation.
    const run = tok.encode("\uFFFD\uFFFD\uFFFD");
    const pieces = run.map((id) => d.push(id));
    expect(pieces.slice(0, 8).join("").length).toBeGreaterThan(0);
    expect(pieces.join("") + d.flush()).toBe("\uFFFD\uFFFD\uFFFD");
  });

  it("uses context so decoders that strip a leading space keep inner spaces", () => {
    // A Metaspace-like decoder: "▁" means a space, and the first token of a decode loses it.
    const vocab = ["▁Hello", "▁world", "!"];
    const fake: DecodesIds = {
      decode: (ids) =>
        Array.from(ids as ArrayLike<number>, (i) => vocab[i])
          .join("")
          .replaceAll("▁", " ")
          .replace(/^ /, ""),
      isSpecial: () => false,
    };
    const d = new StreamingDecoder(fake);
    expect([d.push(0), d.push(1), d.push(2), d.flush()].join("")).toBe("Hello world!");
    // Decoding one token at a time without context would lose the space.
    expect(fake.decode([0]) + fake.decode([1])).toBe("Helloworld");
  });
});
