import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  loadTokenizer,
  MalformedTokenizerFileError,
  MissingTokenizerFileError,
  Tokenizer,
} from "../src/index.js";
import { chatCases, FIXTURE_TOKENIZER_DIR, SPECIAL_BASE } from "./helpers.js";

let tok: Tokenizer;
let scratch: string;
beforeAll(async () => {
  tok = await loadTokenizer(FIXTURE_TOKENIZER_DIR, { eosTokenIds: [SPECIAL_BASE] });
  scratch = await mkdtemp(join(tmpdir(), "generate-tok-"));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

/** A scratch folder `name` holding `files` (file name → contents). */
async function folder(name: string, files: Record<string, string> = {}): Promise<string> {
  const dir = join(scratch, name);
  await mkdir(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), text);
  return dir;
}
const fixtureJson = () => readFile(join(FIXTURE_TOKENIZER_DIR, "tokenizer.json"), "utf8");
/** What loading `dir` throws. */
const loadError = (dir: string) => loadTokenizer(dir).catch((e: unknown) => e);

describe("loadTokenizer on the Qwen3.5-format fixture", () => {
  it("encodes the probe strings to the ids Hugging Face tokenizers (Python) produced", () => {
    const { probes } = chatCases();
    expect(probes.length).toBeGreaterThan(3);
    for (const p of probes) expect(tok.encode(p.text), p.text).toEqual(p.ids);
  });

  it("decodes back to the same text (byte-level BPE is lossless after NFC)", () => {
    for (const p of chatCases().probes) expect(tok.decode(p.ids)).toBe(p.text.normalize("NFC"));
  });

  it("never prepends a BOS", () => {
    expect(tok.encode("hi")[0]).toBe(tok.encode("hi there")[0]);
    expect(tok.encode("")).toEqual([]);
  });

  it("finds special tokens by name in Qwen3.5 order (33 after the BPE ids)", () => {
    expect(tok.tokenId("<|endoftext|>")).toBe(SPECIAL_BASE);
    expect(tok.tokenId("<|im_start|>")).toBe(SPECIAL_BASE + 1);
    expect(tok.tokenId("<|im_end|>")).toBe(SPECIAL_BASE + 2);
    expect(tok.tokenId("<think>")).toBe(SPECIAL_BASE + 24);
    expect(tok.tokenId("</think>")).toBe(SPECIAL_BASE + 25);
    expect(tok.tokenId("<tool_call>")).toBe(SPECIAL_BASE + 14);
    expect(tok.tokenId("<|nope|>")).toBeUndefined();
    expect(tok.addedTokens.size).toBe(33);
    expect(tok.vocabSize).toBe(SPECIAL_BASE + 33);
    expect(tok.isSpecial(SPECIAL_BASE + 1)).toBe(true);
    expect(tok.isSpecial(SPECIAL_BASE + 24)).toBe(false); // <think> stays visible in decoded text
  });

  it("takes EOS from tokenizer_config (<|im_end|>) plus the model's ids", () => {
    expect([...tok.eosTokenIds].sort()).toEqual([SPECIAL_BASE, SPECIAL_BASE + 2]);
    expect(tok.isEos(SPECIAL_BASE + 2)).toBe(true);
    expect(tok.isEos(SPECIAL_BASE + 1)).toBe(false);
  });

  it("skips special tokens on request but keeps <think>", () => {
    const ids = tok.encode("<|im_start|>user\nhi<|im_end|><think>");
    expect(tok.decode(ids)).toBe("<|im_start|>user\nhi<|im_end|><think>");
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe("user\nhi<think>");
  });

  it("drops ids past the vocabulary (padded embedding rows) instead of failing", () => {
    const ids = tok.encode("ok");
    expect(tok.decode([...ids, 5000, 248300])).toBe("ok");
    expect(tok.decode([])).toBe("");
  });

  it("reads the chat template from chat_template.jinja", () => {
    expect(tok.chatTemplateSource).toContain("<|im_start|>");
  });
});

describe("Tokenizer.fromJSON", () => {
  it("merges added tokens that only tokenizer_config.json lists (Qwen3.5 keeps 7 of 33 there)", async () => {
    const json = JSON.parse(await fixtureJson());
    const config = JSON.parse(await readFile(join(FIXTURE_TOKENIZER_DIR, "tokenizer_config.json"), "utf8"));
    json.added_tokens = json.added_tokens.filter((t: { id: number }) => t.id < SPECIAL_BASE + 26);
    const t = Tokenizer.fromJSON(json, config);
    expect(t.tokenId("<|audio_pad|>")).toBe(SPECIAL_BASE + 32);
    expect(t.encode("a<|audio_start|>b")).toEqual([...t.encode("a"), SPECIAL_BASE + 26, ...t.encode("b")]);
    expect(t.decode([SPECIAL_BASE + 26])).toBe("<|audio_start|>");
    // Without the config they are unknown text.
    const bare = Tokenizer.fromJSON(json, {});
    expect(bare.tokenId("<|audio_pad|>")).toBeUndefined();
    expect(bare.encode("<|audio_start|>").length).toBeGreaterThan(1);
    expect(bare.eosTokenIds).toEqual([]);
  });

  it("accepts chat_template as a string or a named list in tokenizer_config", async () => {
    const json = JSON.parse(await fixtureJson());
    expect(Tokenizer.fromJSON(json, { chat_template: "A{{ messages[0].content }}" }).chatTemplateSource).toBe(
      "A{{ messages[0].content }}",
    );
    const listed = Tokenizer.fromJSON(json, {
      chat_template: [
        { name: "tool_use", template: "T" },
        { name: "default", template: "D" },
      ],
    });
    expect(listed.chatTemplateSource).toBe("D");
    expect(() => Tokenizer.fromJSON(json, { chat_template: 7 })).toThrow(MalformedTokenizerFileError);
  });
});

describe("tokenizer file errors name the file", () => {
  it("a tokenizer.json the library only fails on when encoding (found by the reader fuzz test)", async () => {
    const json = JSON.parse(await fixtureJson());
    json.pre_tokenizer.pretokenizers[0].behavior = [];
    expect(() => Tokenizer.fromJSON(json, {}, { source: "/m/tokenizer.json" })).toThrow(
      /\/m\/tokenizer\.json: could not build the tokenizer: .*toLowerCase/,
    );
  });

  it("an empty vocabulary (every prompt would encode to nothing)", async () => {
    const json = JSON.parse(await fixtureJson());
    json.model.vocab = {};
    expect(() => Tokenizer.fromJSON(json, {}, { source: "/m/tokenizer.json" })).toThrow(
      /\/m\/tokenizer\.json: "model\.vocab" is empty/,
    );
  });

  it('a merges entry that is not a pair of tokens is named (the library said "x.split is not a function")', async () => {
    const json = JSON.parse(await fixtureJson());
    const cases: [unknown, RegExp][] = [
      [7, /model\.merges\[5\] must be a pair of tokens \("a b" or \["a", "b"\]\), got 7$/],
      [{ a: 1 }, /model\.merges\[5\] .* got \{"a":1\}$/],
      ["nospace", /model\.merges\[5\] .* got "nospace"$/],
      [["a", "b", "c"], /model\.merges\[5\] .* got \["a","b","c"\]$/],
      [["a", 2], /model\.merges\[5\] .* got \["a",2\]$/],
    ];
    for (const [entry, pattern] of cases) {
      const bad = structuredClone(json);
      bad.model.merges[5] = entry;
      expect(() => Tokenizer.fromJSON(bad, {}, { source: "/m/tokenizer.json" })).toThrow(pattern);
    }
    json.model.merges = "a b";
    expect(() => Tokenizer.fromJSON(json, {}, { source: "/m/tokenizer.json" })).toThrow(
      /\/m\/tokenizer\.json: "model\.merges" must be a list, got "a b"/,
    );
  });

  it("missing tokenizer.json", async () => {
    const dir = await folder("empty");
    const err = await loadError(dir);
    expect(err).toBeInstanceOf(MissingTokenizerFileError);
    expect((err as MissingTokenizerFileError).file).toBe(join(dir, "tokenizer.json"));
    expect((err as Error).message).toContain("tokenizer.json");
  });

  it("tokenizer.json that is not JSON", async () => {
    const dir = await folder("badjson", { "tokenizer.json": '{"model": ' });
    const err = await loadError(dir);
    expect(err).toBeInstanceOf(MalformedTokenizerFileError);
    expect((err as MalformedTokenizerFileError).file).toBe(join(dir, "tokenizer.json"));
    expect((err as Error).message).toMatch(/not valid JSON/);
  });

  it("tokenizer.json without a model vocabulary", async () => {
    const dir = await folder("novocab", { "tokenizer.json": JSON.stringify({ model: { type: "BPE" } }) });
    const err = await loadError(dir);
    expect(err).toBeInstanceOf(MalformedTokenizerFileError);
    expect((err as Error).message).toContain("model.vocab");
  });

  it("tokenizer_config.json that is malformed, or names an unknown eos_token", async () => {
    const dir = await folder("badconfig", {
      "tokenizer.json": await fixtureJson(),
      "tokenizer_config.json": "[1,2",
    });
    let err = await loadError(dir);
    expect(err).toBeInstanceOf(MalformedTokenizerFileError);
    expect((err as MalformedTokenizerFileError).file).toBe(join(dir, "tokenizer_config.json"));

    await writeFile(join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|missing|>" }));
    err = await loadError(dir);
    expect(err).toBeInstanceOf(MalformedTokenizerFileError);
    expect((err as Error).message).toContain("<|missing|>");
  });

  it("generation_config.json eos ids join the EOS set; a bad one is named", async () => {
    const dir = await folder("genconfig", {
      "tokenizer.json": await fixtureJson(),
      "generation_config.json": JSON.stringify({ eos_token_id: [SPECIAL_BASE, SPECIAL_BASE + 2] }),
    });
    const t = await loadTokenizer(dir);
    expect([...t.eosTokenIds].sort()).toEqual([SPECIAL_BASE, SPECIAL_BASE + 2]);

    await writeFile(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: "x" }));
    const err = await loadError(dir);
    expect(err).toBeInstanceOf(MalformedTokenizerFileError);
    expect((err as MalformedTokenizerFileError).file).toBe(join(dir, "generation_config.json"));
  });
});
