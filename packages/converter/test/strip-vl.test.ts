import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import {
  type CheckpointProgress,
  INDEX_FILE,
  Qwen35Checkpoint,
  SafetensorsCheckpoint,
  WeightError,
} from "@anemll-qwen35/ir/checkpoint";
import { tinyConfigJson, writeSyntheticCheckpoint, writeTokenizerFiles } from "@anemll-qwen35/testkit";
import { listDir, tempDir } from "@anemll-qwen35/testkit/temp";
import { describe, expect, it } from "vitest";
import { stripVl } from "../src/strip-vl.js";

/** A tiny official-layout checkpoint: 2+ shards, vision tower, MTP head, tokenizer files. */
async function makeVl(dir: string, opts: { moe?: boolean; tied?: boolean } = {}) {
  const tok = join(dir, "tok");
  await mkdir(tok, { recursive: true });
  await writeTokenizerFiles(tok);
  const src = join(dir, "src");
  await writeSyntheticCheckpoint({
    config: tinyConfigJson(opts),
    out: src,
    tokenizerDir: tok,
    maxShardBytes: 4096,
  });
  return src;
}

describe("stripVl", () => {
  it("writes a text-only checkpoint: text config, renamed tensors, no vision/MTP, side files", async () => {
    const dir = await tempDir();
    const src = await makeVl(dir, { tied: false });
    const dst = join(dir, "out", "text");
    const events: CheckpointProgress[] = [];
    const result = await stripVl(src, dst, { onProgress: (p) => events.push(p), chunkBytes: 100 });

    const config = JSON.parse(await readFile(join(dst, "config.json"), "utf8"));
    expect(config.model_type).toBe("qwen3_5_text");
    expect(config.architectures).toEqual(["Qwen3_5ForCausalLM"]);
    expect(config.text_config).toBeUndefined();
    expect(config.tie_word_embeddings).toBe(false);
    expect(config.hidden_size).toBe(16);

    await using srcCk = await SafetensorsCheckpoint.open(src);
    await using out = await SafetensorsCheckpoint.open(dst);
    expect(srcCk.shardFiles.length).toBeGreaterThan(1);
    expect(out.indexFile).toBe(join(dst, INDEX_FILE));
    const names = out.names();
    expect(names.every((n) => n.startsWith("model.") || n === "lm_head.weight")).toBe(true);
    expect(
      names.some((n) => n.includes("language_model") || n.includes("visual") || n.startsWith("mtp.")),
    ).toBe(false);
    const srcText = srcCk
      .names()
      .filter((n) => n.startsWith("model.language_model.") || n === "lm_head.weight");
    expect(names.length).toBe(srcText.length);
    expect(result.tensors).toBe(srcText.length);
    expect(result.dropped.length).toBe(srcCk.names().length - srcText.length);
    for (const n of srcText) {
      const to = n.replace("model.language_model.", "model.");
      expect(out.info(to).dtype).toBe(srcCk.info(n).dtype);
      expect(await out.readBytes(to)).toEqual(await srcCk.readBytes(n));
    }
    expect(out.info("model.layers.0.linear_attn.A_log").dtype).toBe("f32");

    expect(result.copied.sort()).toEqual([
      "generation_config.json",
      "tokenizer.json",
      "tokenizer_config.json",
    ]);
    expect(existsSync(join(dst, "preprocessor_config.json"))).toBe(false);
    expect(await readFile(join(dst, "tokenizer.json"), "utf8")).toBe(
      await readFile(join(src, "tokenizer.json"), "utf8"),
    );

    // progress: non-decreasing bytes, stages in order, ends at 1
    const bytes = events.map((e) => e.bytes);
    expect(bytes).toEqual([...bytes].sort((a, b) => a - b));
    expect(events.at(-1)).toMatchObject({ stage: "commit", fraction: 1, bytes: result.bytes });
    expect(events.filter((e) => e.stage === "tensors").length).toBeGreaterThan(result.tensors);
    expect(events.find((e) => e.stage === "tensors")?.tensor).toMatch(/^(model\.|lm_head)/);

    // the output is a valid text-layout checkpoint
    await using ck = await Qwen35Checkpoint.open(dst);
    expect(ck.weightMap.layout).toBe("text");
    expect(ck.config.source.layout).toBe("text");
    expect(ck.tiedEmbeddings).toBe(false);
    expect(await listDir(join(dir, "out"))).toEqual(["text"]);
  });

  it("MoE, tied, single-shard source: one model.safetensors and tie_word_embeddings true", async () => {
    const dir = await tempDir();
    const src = join(dir, "src");
    await writeSyntheticCheckpoint({ config: tinyConfigJson({ moe: true, tied: true }), out: src });
    const dst = join(dir, "dst");
    const r = await stripVl(src, dst);
    expect(r.files).toEqual(["model.safetensors"]);
    const config = JSON.parse(await readFile(join(dst, "config.json"), "utf8"));
    expect(config.model_type).toBe("qwen3_5_moe_text");
    expect(config.architectures).toEqual(["Qwen3_5MoeForCausalLM"]);
    expect(config.tie_word_embeddings).toBe(true);
    await using ck = await Qwen35Checkpoint.open(dst);
    expect(ck.config.moe?.numExperts).toBe(4);
    expect((await ck.get("layers.0.mlp.experts.gate_up_proj")).shape).toEqual([4, 16, 16]);
  });

  it("an abort mid-copy leaves neither dst nor temp folders", async () => {
    const dir = await tempDir();
    const src = await makeVl(dir);
    const parent = join(dir, "out");
    await mkdir(parent);
    const ac = new AbortController();
    let calls = 0;
    const run = stripVl(src, join(parent, "text"), {
      signal: ac.signal,
      chunkBytes: 64,
      onProgress: () => {
        if (++calls === 5) ac.abort();
      },
    });
    await expect(run).rejects.toMatchObject({ name: "AbortError" });
    expect(await listDir(parent)).toEqual([]);
  });

  it("refuses an existing dst unless overwrite, and then replaces it whole", async () => {
    const dir = await tempDir();
    const src = await makeVl(dir);
    const dst = join(dir, "dst");
    await mkdir(dst);
    await writeFile(join(dst, "stale.txt"), "old");
    await expect(stripVl(src, dst)).rejects.toThrow(InvalidArgumentError);
    expect(await listDir(dst)).toEqual(["stale.txt"]);
    await stripVl(src, dst, { overwrite: true });
    expect(existsSync(join(dst, "stale.txt"))).toBe(false);
    expect(existsSync(join(dst, "config.json"))).toBe(true);
    expect((await listDir(dir)).filter((n) => n.startsWith("."))).toEqual([]);
  });

  it("does not write anything for a checkpoint with missing tensors", async () => {
    const dir = await tempDir();
    const src = await makeVl(dir);
    const index = JSON.parse(await readFile(join(src, INDEX_FILE), "utf8"));
    delete index.weight_map["model.language_model.layers.1.mlp.up_proj.weight"];
    await writeFile(join(src, INDEX_FILE), JSON.stringify(index));
    const dst = join(dir, "dst");
    await expect(stripVl(src, dst)).rejects.toThrow(WeightError);
    expect(existsSync(dst)).toBe(false);
  });
});
