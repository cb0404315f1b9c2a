/**
 * A checkpoint folder is input from someone else: its model.safetensors.index.json may name files
 * outside the folder, pipes or garbage. Each is refused with a typed error, and nothing blocks.
 */
import { execFileSync } from "node:child_process";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AnemllError, InvalidArgumentError } from "@anemll-qwen35/core";
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

  it("refuses a context longer than the model's max_position_embeddings", async () => {
    const err = await loadMlxModel(fixtureDir("tiny-tied"), { contextLength: 1_000_000 }).catch((e) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toMatch(/exceeds the model's max_position_embeddings \(2048\)/);
  });
});
