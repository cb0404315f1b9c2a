/**
 * Checkpoints that look convertible but are broken: non-finite weights and corrupt tokenizer files
 * fail the conversion with an error naming the tensor or the file (before any package is written,
 * for the tokenizer), instead of converting "successfully" into a model that cannot work.
 */
import { cpSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { SafetensorsFile, WeightError } from "@anemll-qwen35/ir/checkpoint";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { describe, expect, it } from "vitest";
import { convert } from "../src/convert.js";

const tied = resolve(__dirname, "../../../fixtures/tiny-tied");
const work = scratchDir("convert-inputs-");
const fast = {
  ctx: 128,
  fuse: 1 as const,
  body: { kind: "none" as const },
  lmHead: { kind: "none" as const },
};
let n = 0;

/** A copy of tiny-tied with `edit` applied to it. */
function variant(edit: (dir: string) => void | Promise<void>): Promise<string> {
  const dir = join(work, `v${n++}`);
  cpSync(tied, dir, { recursive: true });
  return Promise.resolve(edit(dir)).then(() => dir);
}

const edit = (file: string, change: (json: Record<string, unknown>) => void) => (dir: string) => {
  const p = join(dir, file);
  const json = JSON.parse(readFileSync(p, "utf8"));
  change(json);
  writeFileSync(p, JSON.stringify(json));
};

/** Overwrites element 3 of `tensor` in its shard with a NaN (or +Inf) bit pattern. */
async function poison(dir: string, tensor: string, value: "nan" | "inf"): Promise<void> {
  const shard = join(dir, "model.safetensors-00001-of-00002.safetensors");
  await using f = await SafetensorsFile.open(shard);
  const info = f.info(tensor);
  const width = info.dtype === "f32" ? 4 : 2;
  const bits =
    info.dtype === "f32"
      ? value === "nan"
        ? 0x7fc00000
        : 0x7f800000
      : info.dtype === "bf16"
        ? value === "nan"
          ? 0x7fc0
          : 0x7f80
        : value === "nan"
          ? 0x7e00
          : 0x7c00;
  const bytes = Buffer.alloc(width);
  if (width === 4) bytes.writeUInt32LE(bits);
  else bytes.writeUInt16LE(bits);
  const fd = openSync(shard, "r+");
  writeSync(fd, bytes, 0, width, info.fileOffset + 3 * width);
}

async function refused(dir: string, pattern: RegExp): Promise<AnemllError> {
  const out = join(work, `out${n++}`);
  const err = await convert({ model: dir, out, ...fast }).catch((e) => e);
  expect(err, String(err?.stack)).toBeInstanceOf(AnemllError);
  expect(err.message).toMatch(pattern);
  return err;
}

describe("non-finite weights", () => {
  it("a NaN or Inf in a weight fails the conversion, naming the tensor", async () => {
    const shard = join(tied, "model.safetensors-00001-of-00002.safetensors");
    const names = (await SafetensorsFile.open(shard).then(async (f) => {
      const all = f.names();
      await f.close();
      return all;
    })) as string[];
    const embed = names.find((x) => x.endsWith("embed_tokens.weight"))!;
    const norm = names.find((x) => /layers\.0\.input_layernorm\.weight$/.test(x))!;
    const e1 = await refused(await variant((d) => poison(d, embed, "nan")), /holds NaN \(element 3 of/);
    expect(e1).toBeInstanceOf(WeightError);
    expect((e1 as WeightError).tensor).toBe(embed);
    const e2 = await refused(await variant((d) => poison(d, norm, "inf")), /holds Infinity/);
    expect((e2 as WeightError).tensor).toBe(norm);
  });
});

describe("tokenizer files", () => {
  it.each([
    [
      "tokenizer.json is not JSON",
      (d: string) => writeFileSync(join(d, "tokenizer.json"), "{"),
      /tokenizer\.json: not valid JSON/,
    ],
    [
      "empty vocabulary",
      edit("tokenizer.json", (j) => {
        const m = j.model as Record<string, unknown>;
        m.vocab = {};
        m.merges = [];
      }),
      /tokenizer\.json: .*(empty|round-trip)/,
    ],
    ["no model", edit("tokenizer.json", (j) => delete j.model), /tokenizer\.json: expected "model\.vocab"/],
    [
      "added_tokens not a list",
      edit("tokenizer.json", (j) => (j.added_tokens = 7)),
      /"added_tokens" must be an array/,
    ],
    [
      "merges that lose text",
      edit("tokenizer.json", (j) => {
        const m = j.model as { vocab: Record<string, number> };
        m.vocab = Object.fromEntries(Object.entries(m.vocab).filter(([t]) => !/[Hh]/.test(t)));
      }),
      /tokenizer\.json: does not round-trip text/,
    ],
    [
      "tokenizer.json missing, the other tokenizer files there",
      (d: string) => rmSync(join(d, "tokenizer.json")),
      /tokenizer\.json: is missing, though the checkpoint has tokenizer_config\.json, chat_template\.jinja: the converted model would not run/,
    ],
    [
      "a merges entry that is not a pair of tokens",
      edit("tokenizer.json", (j) => {
        const m = j.model as { merges: unknown[] };
        m.merges[3] = 42;
      }),
      /tokenizer\.json: model\.merges\[3\] must be a pair of tokens \("a b" or \["a", "b"\]\), got 42/,
    ],
    [
      "tokenizer_config.json is not JSON",
      (d: string) => writeFileSync(join(d, "tokenizer_config.json"), "[1,"),
      /tokenizer_config\.json: not valid JSON/,
    ],
    [
      "eos_token not in the vocabulary",
      edit("tokenizer_config.json", (j) => (j.eos_token = "<|nope|>")),
      /eos_token "<\|nope\|>" is not in the vocabulary/,
    ],
    [
      "chat template does not parse",
      (d: string) => writeFileSync(join(d, "chat_template.jinja"), "{% for m in messages %}"),
      /chat template/,
    ],
    [
      "chat template drops the messages",
      (d: string) => writeFileSync(join(d, "chat_template.jinja"), "<|im_start|>assistant\n"),
      /chat_template\.jinja: the chat template does not render a message: the rendered prompt does not contain/,
    ],
    [
      "chat template raises",
      (d: string) => writeFileSync(join(d, "chat_template.jinja"), "{{ raise_exception('broken') }}"),
      /chat_template\.jinja: .*broken/,
    ],
    [
      "generation_config eos is not an id",
      edit("generation_config.json", (j) => (j.eos_token_id = "x")),
      /generation_config\.json: eos_token_id must be an integer/,
    ],
    [
      "an EOS id beyond the vocabulary",
      edit("generation_config.json", (j) => (j.eos_token_id = [962, 5000])),
      /end-of-sequence id 5000 is outside the model's vocabulary \(0\.\.1023\)/,
    ],
  ])("%s: refused, naming the file, before any package is written", async (_what, change, pattern) => {
    const dir = await variant(change);
    const out = join(work, `out${n++}`);
    const err = await convert({ model: dir, out, ...fast }).catch((e) => e);
    expect(err).toBeInstanceOf(AnemllError);
    expect(err.message).toMatch(pattern);
    expect(() => readFileSync(join(`${out}.partial`, "embed.mlpackage", "Manifest.json"))).toThrow();
  });

  it("a checkpoint without any tokenizer files converts without one, saying so", async () => {
    const dir = await variant((d) => {
      for (const f of ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]) rmSync(join(d, f));
    });
    const logs: string[] = [];
    const r = await convert({
      model: dir,
      out: join(work, `out${n++}`),
      ...fast,
      onLog: (l) => logs.push(l),
    });
    expect(r.manifest.tokenizer.files).toEqual(["generation_config.json"]);
    expect(logs[0]).toMatch(
      /has no tokenizer files: converting without a tokenizer \(run the result on token ids, or with --tokenizer DIR\)/,
    );
  });
});
