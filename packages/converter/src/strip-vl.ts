/**
 * stripVl: an official Qwen3.5 VL checkpoint → a text-only checkpoint in the layout HF's
 * Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM load: config.json is the text config
 * (model_type qwen3_5_text / qwen3_5_moe_text), tensors are renamed
 * `model.language_model.X` → `model.X`, and `model.visual.*` / `mtp.*` are left out.
 * Tensor bytes are copied as stored (no dtype change), in chunks.
 *
 * Atomic: everything is written into a hidden temp folder next to `dst` and renamed to `dst`
 * at the end; an error or an abort removes the temp folder, so `dst` either does not exist or
 * is complete.
 */
import { copyFile, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import {
  assertWeights,
  type CheckpointProgress,
  checkWeights,
  commitDirectory,
  hfName,
  hfShardName,
  pathExists,
  type Qwen35Config,
  readQwen35Config,
  SafetensorsCheckpoint,
  SafetensorsWriter,
  ShardedSafetensorsWriter,
  SINGLE_FILE,
  TEXT_SIDE_FILES,
  type TensorSpec,
  tempSiblingPath,
  writeFileAtomic,
} from "@anemll-qwen35/ir/checkpoint";

export interface StripVlOptions {
  onProgress?: (p: CheckpointProgress) => void;
  signal?: AbortSignal;
  /** Replace an existing dst (default false: an existing dst is an error). */
  overwrite?: boolean;
  /** Copy chunk size in bytes (default 64 MiB). */
  chunkBytes?: number;
}

export interface StripVlResult {
  dst: string;
  /** Tensors written. */
  tensors: number;
  /** Tensor bytes written. */
  bytes: number;
  /** Source tensors left out (vision tower, MTP head, anything else not in the text model). */
  dropped: string[];
  /** Shard files written. */
  files: string[];
  /** Side files copied (tokenizer etc.). */
  copied: string[];
}

export async function stripVl(
  src: string,
  dst: string,
  options: StripVlOptions = {},
): Promise<StripVlResult> {
  const { signal } = options;
  const chunk = options.chunkBytes ?? 64 * 1024 * 1024;
  signal?.throwIfAborted();
  if ((await pathExists(dst)) && !options.overwrite) {
    throw new InvalidArgumentError(`${dst} already exists (pass overwrite: true to replace it)`);
  }
  const configPath = join(src, "config.json");
  const config = await readQwen35Config(configPath);
  const rawConfig = config.raw;

  const source = await SafetensorsCheckpoint.open(src);
  try {
    return await stripOpened(src, dst, options, chunk, rawConfig, config, source);
  } finally {
    await source.close();
  }
}

async function stripOpened(
  src: string,
  dst: string,
  options: StripVlOptions,
  chunk: number,
  rawConfig: Readonly<Record<string, unknown>>,
  config: Qwen35Config,
  source: SafetensorsCheckpoint,
): Promise<StripVlResult> {
  const { signal, onProgress } = options;
  const report = checkWeights(config, source, src);
  assertWeights(report, src);

  // keep every language-model tensor, renamed to the text layout; group as the source shards were
  const keep: { from: string; to: string; shard: string }[] = [];
  for (const [canonical, from] of report.map.toHf) {
    keep.push({ from, to: hfName(canonical, "text"), shard: source.shardOf(from) });
  }
  keep.sort((a, b) => (a.to < b.to ? -1 : a.to > b.to ? 1 : 0));
  const kept = new Set(keep.map((k) => k.from));
  const dropped = source.names().filter((n) => !kept.has(n));
  const specs: TensorSpec[] = keep.map(({ from, to }) => {
    const info = source.info(from);
    return { name: to, dtype: info.dtype, shape: info.shape };
  });
  const groups = new Map<string, string[]>();
  for (const k of keep) groups.set(k.shard, [...(groups.get(k.shard) ?? []), k.to]);
  const shardOrder = source.shardFiles.filter((s) => groups.has(s));
  const totalBytes = keep.reduce((n, k) => n + source.info(k.from).byteLength, 0);

  const tmp = tempSiblingPath(dst);
  await mkdir(tmp, { recursive: true });
  try {
    const metadata = { format: "pt" };
    const single = shardOrder.length <= 1;
    const writer = single
      ? await SafetensorsWriter.create(join(tmp, SINGLE_FILE), specs, { metadata })
      : await ShardedSafetensorsWriter.create(tmp, specs, {
          metadata,
          shards: shardOrder.map((s) => groups.get(s)!),
          shardName: hfShardName,
        });
    let bytes = 0;
    try {
      for (const { from, to } of keep) {
        const file = source.fileOf(from);
        const { byteLength } = file.info(from);
        let start = 0;
        do {
          signal?.throwIfAborted();
          const len = Math.min(chunk, byteLength - start);
          if (len > 0) await writer.writeBytes(to, await file.readRange(from, start, len));
          start += len;
          bytes += len;
          onProgress?.({
            stage: "tensors",
            tensor: to,
            bytes,
            totalBytes,
            fraction: totalBytes ? bytes / totalBytes : 1,
          });
        } while (start < byteLength);
      }
      signal?.throwIfAborted();
      await writer.close();
    } catch (err) {
      await writer.abort();
      throw err;
    }

    onProgress?.({ stage: "files", bytes, totalBytes, fraction: totalBytes ? bytes / totalBytes : 1 });
    const textConfig: Record<string, unknown> = { ...config.textConfig };
    textConfig.model_type = config.modelType;
    textConfig.architectures = [config.moe ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM"];
    textConfig.tie_word_embeddings = report.tied;
    if (rawConfig.transformers_version !== undefined && textConfig.transformers_version === undefined) {
      textConfig.transformers_version = rawConfig.transformers_version;
    }
    await writeFileAtomic(join(tmp, "config.json"), `${JSON.stringify(textConfig, null, 2)}\n`);
    const copied: string[] = [];
    for (const name of TEXT_SIDE_FILES) {
      if (await pathExists(join(src, name))) {
        await copyFile(join(src, name), join(tmp, name));
        copied.push(name);
      }
    }
    signal?.throwIfAborted();
    onProgress?.({ stage: "commit", bytes, totalBytes, fraction: 1 });
    await commitDirectory(tmp, dst, options.overwrite ?? false);
    const files = single ? [SINGLE_FILE] : (writer as ShardedSafetensorsWriter).plan.map((p) => p.file);
    return { dst, tensors: keep.length, bytes, dropped, files, copied };
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}
