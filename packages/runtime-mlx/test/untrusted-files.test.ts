/**
 * A checkpoint folder is input from someone else: its model.safetensors.index.json may name files
 * outside the folder, pipes or garbage. Each is refused with a typed error, and nothing blocks.
 */
import { execFileSync } from "node:child_process";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AnemllError, InvalidArgumentError } from "@anemll-qwen35/core";
import { SafetensorsError, WeightError } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadMlxModel } from "../src/index.js";
import { fixtureDir, tempDir } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

const INDEX = "model.safetensors.index.json";

describeMlx("untrusted checkpoint files", () => {
  let tmp: string;
  let n = 0;
  beforeAll(() => {
    tmp = tempDir("untrusted");
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  /** A copy of tiny-tied whose index maps its first tensor to `entry`. */
  function withEntry(entry: unknown, prepare?: (dir: string) => void): string {
    const dir = join(tmp, `m${n++}`);
    cpSync(fixtureDir("tiny-tied"), dir, { recursive: true });
    const index = JSON.parse(readFileSync(join(dir, INDEX), "utf8"));
    const first = Object.keys(index.weight_map)[0];
    index.weight_map[first] = entry;
    writeFileSync(join(dir, INDEX), JSON.stringify(index));
    prepare?.(dir);
    return dir;
  }

  const refused = async (dir: string, pattern: RegExp) => {
    const err = await loadMlxModel(dir).catch((e) => e);
    expect(err).toBeInstanceOf(AnemllError);
    expect(err.message).toMatch(pattern);
  };

  it("refuses index entries outside the folder (../, absolute paths)", async () => {
    const outside = join(tmp, "other.safetensors");
    cpSync(join(fixtureDir("tiny-tied"), "model.safetensors-00001-of-00002.safetensors"), outside);
    await refused(withEntry("../other.safetensors"), /shard file name in the same folder/);
    await refused(withEntry("/etc/passwd"), /shard file name in the same folder/);
  });

  it("refuses a non-string entry with a typed error", async () => {
    await refused(withEntry(42), /shard file name in the same folder, got 42/);
    await refused(withEntry(null), /shard file name/);
  });

  it(
    "refuses a named pipe instead of blocking on it",
    async () => {
      const dir = withEntry("pipe.safetensors", (d) => execFileSync("mkfifo", [join(d, "pipe.safetensors")]));
      await refused(dir, /pipe\.safetensors, which is not a regular file/);
    },
    timeLimit(10_000),
  );

  /** A copy of tiny-tied with the first shard's header (and data) edited by `edit`. */
  function withShard(
    edit: (
      header: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>,
      data: Buffer,
    ) => void,
  ): string {
    const dir = join(tmp, `m${n++}`);
    cpSync(fixtureDir("tiny-tied"), dir, { recursive: true });
    const file = join(dir, "model.safetensors-00001-of-00002.safetensors");
    const bytes = readFileSync(file);
    const len = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + len).toString("utf8"));
    const data = Buffer.from(bytes.subarray(8 + len));
    edit(header, data);
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(json.length));
    writeFileSync(file, Buffer.concat([prefix, json, data]));
    return dir;
  }
  const NORM = "model.language_model.layers.0.linear_attn.norm.weight";

  it("refuses a fractional tensor shape as convert does (ir's safetensors header check), naming file and tensor", async () => {
    const dir = withShard((h) => {
      h[NORM].shape = [127.5];
    });
    const err = await loadMlxModel(dir).catch((e) => e);
    expect(err).toBeInstanceOf(SafetensorsError);
    expect(err.message).toMatch(
      /model\.safetensors-00001-of-00002\.safetensors.*layers\.0\.linear_attn\.norm\.weight.*shape must be an array of non-negative integers, got \[127\.5\]/,
    );
  });

  it("refuses a NaN or Inf weight at load, naming the tensor, the element and the file", async () => {
    for (const [value, shown] of [
      [Number.NaN, "NaN"],
      [Number.NEGATIVE_INFINITY, "-Infinity"],
    ] as const) {
      const dir = withShard((h, data) => {
        const [begin] = h[NORM].data_offsets;
        expect(h[NORM].dtype).toBe("F32");
        data.writeFloatLE(value, begin + 4 * 5);
      });
      const err = await loadMlxModel(dir).catch((e) => e);
      expect(err).toBeInstanceOf(WeightError);
      expect(err.tensor).toBe(NORM);
      expect(err.message).toContain(
        `model.safetensors-00001-of-00002.safetensors: "${NORM}" holds ${shown} (element 5 of [128]); a checkpoint's weights must be finite`,
      );
    }
  });

  it("refuses a context longer than the model's max_position_embeddings", async () => {
    const err = await loadMlxModel(fixtureDir("tiny-tied"), { contextLength: 1_000_000 }).catch((e) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toMatch(/exceeds the model's max_position_embeddings \(2048\)/);
  });
});
