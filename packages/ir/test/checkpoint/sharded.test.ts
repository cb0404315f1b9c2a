import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  INDEX_FILE,
  qwenShardName,
  SafetensorsCheckpoint,
  SafetensorsError,
  ShardedSafetensorsWriter,
  writeSafetensors,
} from "../../src/checkpoint/index.js";
import { listDir, tempDir, vals } from "./helpers.js";

const t = (n: number, v: number) => tensor("f32", [n], new Float32Array(n).fill(v));

async function writeSharded(dir: string, shardName = qwenShardName) {
  const specs = [
    { name: "a", dtype: "f32" as const, shape: [4] }, // 16 bytes
    { name: "b", dtype: "f32" as const, shape: [4] },
    { name: "c", dtype: "f32" as const, shape: [8] }, // 32 bytes: alone over the 32-byte limit with a
    { name: "d", dtype: "bf16" as const, shape: [2] },
  ];
  const w = await ShardedSafetensorsWriter.create(dir, specs, {
    maxShardBytes: 32,
    shardName,
    metadata: { format: "pt" },
  });
  await w.write("c", t(8, 3));
  await w.write("a", t(4, 1));
  await w.write("d", tensor("bf16", [2], Uint16Array.from([0x3f80, 0x4000])));
  await w.write("b", t(4, 2));
  await w.close();
  return w;
}

describe("sharded checkpoints", () => {
  it("writes shards greedily with Qwen's shard names and an index with total_size", async () => {
    const dir = await tempDir();
    const w = await writeSharded(dir);
    expect(w.plan).toEqual([
      { file: "model.safetensors-00001-of-00003.safetensors", names: ["a", "b"] },
      { file: "model.safetensors-00002-of-00003.safetensors", names: ["c"] },
      { file: "model.safetensors-00003-of-00003.safetensors", names: ["d"] },
    ]);
    const index = JSON.parse(await readFile(join(dir, INDEX_FILE), "utf8"));
    expect(index.metadata.total_size).toBe(16 + 16 + 32 + 4);
    expect(index.weight_map).toEqual({
      a: "model.safetensors-00001-of-00003.safetensors",
      b: "model.safetensors-00001-of-00003.safetensors",
      c: "model.safetensors-00002-of-00003.safetensors",
      d: "model.safetensors-00003-of-00003.safetensors",
    });
    expect((await listDir(dir)).sort()).toEqual([INDEX_FILE, ...w.plan.map((p) => p.file)].sort());
  });

  it("opens a sharded folder as one object: names, shapes, dtypes, reads by name", async () => {
    const dir = await tempDir();
    await writeSharded(dir);
    await using ckpt = await SafetensorsCheckpoint.open(dir);
    expect(ckpt.names()).toEqual(["a", "b", "c", "d"]);
    expect(ckpt.shardFiles.length).toBe(3);
    expect(ckpt.info("c").shape).toEqual([8]);
    expect(ckpt.info("d").dtype).toBe("bf16");
    expect(ckpt.shardOf("c")).toBe("model.safetensors-00002-of-00003.safetensors");
    expect(vals(await ckpt.read("c"))).toEqual(new Array(8).fill(3));
    expect(vals(await ckpt.readFloat32("d"))).toEqual([1, 2]);
    expect(ckpt.totalBytes).toBe(68);
    expect(ckpt.indexMetadata.total_size).toBe(68);
    expect(ckpt.has("zz")).toBe(false);
    expect(() => ckpt.info("zz")).toThrow(SafetensorsError);
  });

  it("opens a folder with a single model.safetensors, and a .safetensors path directly", async () => {
    const dir = await tempDir();
    await writeSafetensors(join(dir, "model.safetensors"), [{ name: "x", tensor: t(2, 5) }]);
    await using a = await SafetensorsCheckpoint.open(dir);
    expect(a.names()).toEqual(["x"]);
    await using b = await SafetensorsCheckpoint.open(join(dir, "model.safetensors"));
    expect(vals(await b.read("x"))).toEqual([5, 5]);
  });

  it("errors on a folder with neither index nor model.safetensors", async () => {
    const dir = await tempDir();
    await expect(SafetensorsCheckpoint.open(dir)).rejects.toThrow(
      /no model.safetensors.index.json or model.safetensors/,
    );
  });

  it("index referencing a missing shard", async () => {
    const dir = await tempDir();
    await writeSharded(dir);
    await rm(join(dir, "model.safetensors-00002-of-00003.safetensors"));
    const err = (await SafetensorsCheckpoint.open(dir).catch((e) => e)) as SafetensorsError;
    expect(err).toBeInstanceOf(SafetensorsError);
    expect(err.file).toBe(join(dir, INDEX_FILE));
    expect(err.tensor).toBe("c");
    expect(err.message).toMatch(
      /references shard "model.safetensors-00002-of-00003.safetensors" .* which does not exist/,
    );
  });

  it("index placing a tensor in a shard that lacks it", async () => {
    const dir = await tempDir();
    await writeSharded(dir);
    const indexPath = join(dir, INDEX_FILE);
    const index = JSON.parse(await readFile(indexPath, "utf8"));
    index.weight_map.b = "model.safetensors-00003-of-00003.safetensors";
    await writeFile(indexPath, JSON.stringify(index));
    const err = (await SafetensorsCheckpoint.open(dir).catch((e) => e)) as SafetensorsError;
    expect(err).toBeInstanceOf(SafetensorsError);
    expect(err.file).toBe(join(dir, "model.safetensors-00003-of-00003.safetensors"));
    expect(err.tensor).toBe("b");
    expect(err.message).toMatch(/the shard does not contain it/);
  });

  it("index with a duplicate tensor, a path outside the folder, or bad JSON", async () => {
    const dir = await tempDir();
    await writeSharded(dir);
    const indexPath = join(dir, INDEX_FILE);
    const shard1 = "model.safetensors-00001-of-00003.safetensors";
    await writeFile(indexPath, `{"metadata": {}, "weight_map": {"a": "${shard1}", "a": "${shard1}"}}`);
    await expect(SafetensorsCheckpoint.open(dir)).rejects.toThrow(
      /tensor "a"\): tensor listed twice in weight_map/,
    );
    await writeFile(indexPath, JSON.stringify({ weight_map: { a: "../evil.safetensors" } }));
    await expect(SafetensorsCheckpoint.open(dir)).rejects.toThrow(/shard file name in the same folder/);
    await writeFile(indexPath, "{");
    await expect(SafetensorsCheckpoint.open(dir)).rejects.toThrow(/index is not JSON/);
  });

  it("an unfinished sharded write leaves no index and no temp files", async () => {
    const dir = await tempDir();
    const w = await ShardedSafetensorsWriter.create(
      dir,
      [
        { name: "a", dtype: "f32", shape: [1] },
        { name: "b", dtype: "f32", shape: [1] },
      ],
      { maxShardBytes: 4 },
    );
    await w.write("a", t(1, 1));
    await expect(w.close()).rejects.toThrow(/tensor "b"\): incomplete/);
    const left = await listDir(dir);
    expect(left.some((f) => f.startsWith("."))).toBe(false);
    expect(left).not.toContain(INDEX_FILE);
  });
});
