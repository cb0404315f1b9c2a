/**
 * Context buckets share the weights (issue 25 item 1): a package with decode/prefill functions at
 * every bucket stores its weights once — the weight file is byte-identical to a single-ctx
 * conversion's — and adds only each function's program text. On a super-block of the 0.8B's width
 * (synthetic, 4 layers, int8) the default buckets 256 / 1,024 / 4,096 make the chain ≤ 1.1× the
 * single ctx-4096 one; on tiny-trained (5 MB of weights) the program text is a larger share.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { publishedConfigJson, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { convert } from "../src/index.js";
import { fixtureDir } from "./golden.js";

const work = mkdtempSync(join(tmpdir(), "converter-bucket-size-"));

function bytesUnder(dir: string): number {
  let n = 0;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    n += statSync(p).isDirectory() ? bytesUnder(p) : statSync(p).size;
  }
  return n;
}
const packagesBytes = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith(".mlpackage"))
    .reduce((n, f) => n + bytesUnder(join(dir, f)), 0);
const weightsSha = (dir: string, pkg: string) =>
  createHash("sha256")
    .update(readFileSync(join(dir, pkg, "Data", "com.apple.CoreML", "weights", "weight.bin")))
    .digest("hex");

async function compare(model: string, ctx: number, name: string) {
  const bucketed = join(work, `${name}-buckets`);
  const single = join(work, `${name}-single`);
  const { manifest } = await convert({ model, out: bucketed, workers: 1, quant: "int8" });
  await convert({ model, out: single, ctx, workers: 1, quant: "int8" });
  const blocks = manifest.components.filter((c) => c.kind === "superblocks").map((c) => c.file);
  for (const f of blocks) expect(weightsSha(bucketed, f), f).toBe(weightsSha(single, f));
  return { buckets: manifest.buckets, ratio: packagesBytes(bucketed) / packagesBytes(single) };
}

describe("context buckets: package size", () => {
  it(
    "0.8B-wide super-block (synthetic, 4 layers): buckets 256/1024/4096 ≤ 1.1× a single ctx-4096 chain, weights stored once",
    async () => {
      const config = publishedConfigJson("0.8b") as { text_config: Record<string, unknown> };
      const t = config.text_config;
      const layers = (t.layer_types as string[]).slice(0, 4);
      // the vocabulary and EOS of tiny-trained, whose tokenizer files are copied in
      const tiny = JSON.parse(readFileSync(join(fixtureDir("tiny-trained"), "config.json"), "utf8"));
      const text = { ...t, num_hidden_layers: 4, layer_types: layers, vocab_size: 4096 };
      const small = { ...config, text_config: { ...text, eos_token_id: tiny.text_config.eos_token_id } };
      const ck = join(work, "synthetic-0.8b-4l");
      await writeSyntheticCheckpoint({
        config: small,
        out: ck,
        vision: false,
        mtp: false,
        tokenizerDir: fixtureDir("tiny-trained"),
      });
      const r = await compare(ck, 4096, "wide");
      expect(r.buckets).toEqual([256, 1024, 4096]);
      expect(r.ratio).toBeLessThanOrEqual(1.1);
      expect(r.ratio).toBeGreaterThan(1); // the functions' program text is there
    },
    timeLimit(600_000),
  );

  it(
    "tiny-trained: the weights are stored once; only program text is added",
    async () => {
      const r = await compare(fixtureDir("tiny-trained"), 2048, "tiny");
      expect(r.buckets).toEqual([256, 1024, 2048]);
      expect(r.ratio).toBeGreaterThan(1);
      expect(r.ratio).toBeLessThan(1.3);
    },
    timeLimit(300_000),
  );
});
