/**
 * Checkpoint directories: either one `model.safetensors`, or shards listed by
 * `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {tensor: shard}}),
 * the Hugging Face layout. Shard names are taken from the index as they are, which covers the
 * usual `model-00001-of-00004.safetensors` and Qwen3.5's `model.safetensors-00001-of-00004.safetensors`.
 */
import { readFile, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { Tensor } from "@anemll-qwen35/core";
import { pathExists, writeFileAtomic } from "./atomic.js";
import { findDuplicateKeys } from "./json-duplicates.js";
import {
  SafetensorsError,
  SafetensorsFile,
  type SafetensorsTensorInfo,
  type TensorSource,
} from "./safetensors.js";
import {
  type SafetensorsWriteOptions,
  SafetensorsWriter,
  specByteLength,
  type TensorOrder,
  type TensorSpec,
} from "./safetensors-writer.js";

export const INDEX_FILE = "model.safetensors.index.json";
export const SINGLE_FILE = "model.safetensors";

export interface SafetensorsIndex {
  metadata: Record<string, unknown>;
  weightMap: Record<string, string>;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** Parses an index file's text; shard names must be plain file names in the same directory. */
export function parseSafetensorsIndex(text: string, file: string): SafetensorsIndex {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    throw new SafetensorsError(file, undefined, "index is not JSON", { cause });
  }
  if (!isObject(parsed)) throw new SafetensorsError(file, undefined, "index JSON is not an object");
  const dup = findDuplicateKeys(text).find((d) => d.path.length === 1 && d.path[0] === "weight_map");
  if (dup) throw new SafetensorsError(file, dup.key, "tensor listed twice in weight_map");
  const { weight_map: weightMap, metadata } = parsed;
  if (!isObject(weightMap))
    throw new SafetensorsError(file, undefined, `"weight_map" must be an object {tensor: shard file}`);
  for (const [name, shard] of Object.entries(weightMap)) {
    if (
      typeof shard !== "string" ||
      shard === "" ||
      basename(shard) !== shard ||
      shard === "." ||
      shard === ".."
    ) {
      throw new SafetensorsError(
        file,
        name,
        `weight_map value must be a shard file name in the same folder, got ${JSON.stringify(shard)}`,
      );
    }
  }
  if (metadata !== undefined && !isObject(metadata))
    throw new SafetensorsError(file, undefined, `"metadata" must be an object`);
  return {
    metadata: (metadata as Record<string, unknown>) ?? {},
    weightMap: weightMap as Record<string, string>,
  };
}

/**
 * All tensors of a checkpoint directory (or of a single .safetensors file) behind one object.
 * Every shard's header is read and validated on open, and every index entry is checked against
 * its shard; tensor data is read on demand.
 */
export class SafetensorsCheckpoint implements TensorSource, AsyncDisposable {
  private constructor(
    /** The folder holding the files. */
    readonly dir: string,
    /** The index file, when the checkpoint is sharded. */
    readonly indexFile: string | undefined,
    /** The index's "metadata" (e.g. total_size), or {}. */
    readonly indexMetadata: Readonly<Record<string, unknown>>,
    private readonly files: Map<string, SafetensorsFile>,
    private readonly where: Map<string, SafetensorsFile>,
  ) {}

  /**
   * Opens a checkpoint: `path` is a folder with `model.safetensors.index.json` or
   * `model.safetensors`, or a path to one .safetensors file.
   */
  static async open(path: string): Promise<SafetensorsCheckpoint> {
    let isDir: boolean;
    try {
      isDir = (await stat(path)).isDirectory();
    } catch (cause) {
      throw new SafetensorsError(path, undefined, "no such file or folder", { cause });
    }
    if (!isDir) {
      const file = await SafetensorsFile.open(path);
      const where = new Map(file.names().map((n) => [n, file]));
      return new SafetensorsCheckpoint(
        dirname(path),
        undefined,
        {},
        new Map([[basename(path), file]]),
        where,
      );
    }
    const indexPath = join(path, INDEX_FILE);
    if (await pathExists(indexPath)) return SafetensorsCheckpoint.openIndexed(path, indexPath);
    const single = join(path, SINGLE_FILE);
    if (await pathExists(single)) {
      const file = await SafetensorsFile.open(single);
      const where = new Map(file.names().map((n) => [n, file]));
      return new SafetensorsCheckpoint(path, undefined, {}, new Map([[SINGLE_FILE, file]]), where);
    }
    throw new SafetensorsError(path, undefined, `no ${INDEX_FILE} or ${SINGLE_FILE} in this folder`);
  }

  private static async openIndexed(dir: string, indexPath: string): Promise<SafetensorsCheckpoint> {
    const index = parseSafetensorsIndex(await readFile(indexPath, "utf8"), indexPath);
    const byShard = new Map<string, string[]>();
    for (const [name, shard] of Object.entries(index.weightMap)) {
      const list = byShard.get(shard) ?? [];
      list.push(name);
      byShard.set(shard, list);
    }
    const files = new Map<string, SafetensorsFile>();
    const where = new Map<string, SafetensorsFile>();
    try {
      for (const [shard, names] of byShard) {
        const shardPath = join(dir, shard);
        if (!(await pathExists(shardPath))) {
          const more = names.length > 1 ? ` and ${names.length - 1} other tensors` : "";
          throw new SafetensorsError(
            indexPath,
            names[0],
            `index references shard "${shard}" (for this tensor${more}), which does not exist in ${dir}`,
          );
        }
        const file = await SafetensorsFile.open(shardPath);
        files.set(shard, file);
        for (const name of names) {
          if (!file.has(name)) {
            throw new SafetensorsError(
              shardPath,
              name,
              `${INDEX_FILE} puts this tensor in "${shard}", but the shard does not contain it`,
            );
          }
          where.set(name, file);
        }
      }
    } catch (err) {
      await Promise.all([...files.values()].map((f) => f.close()));
      throw err;
    }
    return new SafetensorsCheckpoint(dir, indexPath, index.metadata, files, where);
  }

  /** Shard file names (relative to `dir`). */
  get shardFiles(): string[] {
    return [...this.files.keys()];
  }

  /** Tensor names, sorted. */
  names(): string[] {
    return [...this.where.keys()].sort();
  }

  has(name: string): boolean {
    return this.where.has(name);
  }

  info(name: string): SafetensorsTensorInfo {
    return this.fileOf(name).info(name);
  }

  /** The shard file (name relative to `dir`) holding `name`. */
  shardOf(name: string): string {
    return basename(this.fileOf(name).path);
  }

  /** The open file holding `name` (for chunked reads with readRange). */
  fileOf(name: string): SafetensorsFile {
    const file = this.where.get(name);
    if (!file)
      throw new SafetensorsError(this.indexFile ?? this.dir, name, "no such tensor in this checkpoint");
    return file;
  }

  read(name: string): Promise<Tensor> {
    return this.fileOf(name).read(name);
  }

  readFloat32(name: string): Promise<Tensor<"f32">> {
    return this.fileOf(name).readFloat32(name);
  }

  readBytes(name: string): Promise<Uint8Array> {
    return this.fileOf(name).readBytes(name);
  }

  /** Reads the tensor's bytes into a caller-owned buffer (see SafetensorsFile.readInto). */
  readInto(name: string, target: Uint8Array): Promise<Uint8Array> {
    return this.fileOf(name).readInto(name, target);
  }

  /** Total bytes of tensor data. */
  get totalBytes(): number {
    let n = 0;
    for (const name of this.where.keys()) n += this.info(name).byteLength;
    return n;
  }

  async close(): Promise<void> {
    await Promise.all([...this.files.values()].map((f) => f.close()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** `model-00001-of-00003.safetensors` (Hugging Face's usual shard names). */
export const hfShardName = (i: number, n: number): string =>
  `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`;

/** `model.safetensors-00001-of-00003.safetensors` (the names in Qwen3.5's official repos). */
export const qwenShardName = (i: number, n: number): string =>
  `model.safetensors-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`;

export interface ShardedWriteOptions extends SafetensorsWriteOptions {
  /** Shard size limit in bytes of tensor data (a tensor larger than this gets a shard alone). */
  maxShardBytes?: number;
  /** Explicit grouping: one array of tensor names per shard (overrides maxShardBytes). */
  shards?: readonly (readonly string[])[];
  /** Shard file name for shard i of n (default hfShardName). */
  shardName?: (i: number, n: number) => string;
  /** Extra entries for the index's "metadata" (total_size is always set). */
  indexMetadata?: Record<string, unknown>;
}

/**
 * Writes a sharded checkpoint into `dir`: tensors are grouped into shards in declaration order
 * (greedy, up to maxShardBytes), each shard is a SafetensorsWriter (atomic), and the index is
 * written last, so an interrupted run leaves no index.
 */
export class ShardedSafetensorsWriter implements AsyncDisposable {
  private readonly owner = new Map<string, SafetensorsWriter>();
  private done = false;

  private constructor(
    readonly dir: string,
    /** Shard file name -> tensor names, in shard order. */
    readonly plan: readonly { file: string; names: readonly string[] }[],
    private readonly writers: Map<string, SafetensorsWriter>,
    private readonly totalSize: number,
    private readonly indexMetadata: Record<string, unknown>,
  ) {
    for (const { file, names } of plan) for (const n of names) this.owner.set(n, writers.get(file)!);
  }

  static async create(
    dir: string,
    specs: readonly TensorSpec[],
    options: ShardedWriteOptions = {},
  ): Promise<ShardedSafetensorsWriter> {
    const indexPath = join(dir, INDEX_FILE);
    const byName = new Map<string, TensorSpec>();
    for (const s of specs) {
      if (byName.has(s.name)) throw new SafetensorsError(indexPath, s.name, "declared twice");
      byName.set(s.name, s);
    }
    let groups: string[][];
    if (options.shards) {
      groups = options.shards.map((g) => [...g]);
      const listed = new Set(groups.flat());
      for (const n of groups.flat()) {
        if (!byName.has(n)) throw new SafetensorsError(indexPath, n, "listed in a shard but not declared");
      }
      if (listed.size !== groups.flat().length)
        throw new SafetensorsError(indexPath, undefined, "a tensor is listed in two shards");
      for (const n of byName.keys()) {
        if (!listed.has(n)) throw new SafetensorsError(indexPath, n, "declared but not assigned to a shard");
      }
      groups = groups.filter((g) => g.length > 0);
    } else {
      const limit = options.maxShardBytes ?? 5 * 1024 ** 3;
      groups = [];
      let current: string[] = [];
      let size = 0;
      for (const s of specs) {
        const b = specByteLength(s);
        if (current.length > 0 && size + b > limit) {
          groups.push(current);
          current = [];
          size = 0;
        }
        current.push(s.name);
        size += b;
      }
      if (current.length > 0 || groups.length === 0) groups.push(current);
    }
    const nameOf = options.shardName ?? hfShardName;
    const plan = groups.map((names, i) => ({ file: nameOf(i, groups.length), names }));
    const writers = new Map<string, SafetensorsWriter>();
    try {
      for (const { file, names } of plan) {
        const shardSpecs = names.map((n) => byName.get(n)!);
        const order: TensorOrder = options.order ?? "name";
        writers.set(file, await SafetensorsWriter.create(join(dir, file), shardSpecs, { ...options, order }));
      }
    } catch (err) {
      await Promise.all([...writers.values()].map((w) => w.abort()));
      throw err;
    }
    let total = 0;
    for (const s of specs) total += specByteLength(s);
    return new ShardedSafetensorsWriter(dir, plan, writers, total, options.indexMetadata ?? {});
  }

  async write(name: string, t: Tensor): Promise<void> {
    await this.writerOf(name).write(name, t);
  }

  async writeBytes(name: string, bytes: Uint8Array): Promise<void> {
    await this.writerOf(name).writeBytes(name, bytes);
  }

  /** Closes every shard (each checks its tensors are complete), then writes the index. */
  async close(): Promise<void> {
    try {
      for (const w of this.writers.values()) await w.close();
      const weightMap: Record<string, string> = {};
      const entries: [string, string][] = [];
      for (const { file, names } of this.plan) for (const n of names) entries.push([n, file]);
      entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      for (const [n, f] of entries) weightMap[n] = f;
      const index = {
        metadata: { ...this.indexMetadata, total_size: this.totalSize },
        weight_map: weightMap,
      };
      await writeFileAtomic(join(this.dir, INDEX_FILE), `${JSON.stringify(index, null, 2)}\n`);
      this.done = true;
    } catch (err) {
      await this.abort();
      throw err;
    }
  }

  /** Discards unfinished shards (finished ones stay; without the index they are not a checkpoint). */
  async abort(): Promise<void> {
    await Promise.all([...this.writers.values()].map((w) => w.abort()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.done) await this.abort();
  }

  private writerOf(name: string): SafetensorsWriter {
    const w = this.owner.get(name);
    if (!w)
      throw new SafetensorsError(
        join(this.dir, INDEX_FILE),
        name,
        "not declared when the writer was created",
      );
    return w;
  }
}
