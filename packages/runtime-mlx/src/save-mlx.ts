/**
 * Writes a checkpoint in mlx-lm's format (what `mlx_lm.convert` produces, and what loadMlxModel
 * detects as "mlx"): tensors named `language_model.model.*` / `language_model.lm_head.*`, the
 * zero-centred norms carrying their `1 + w`, the depthwise conv as [C, K, 1], experts as
 * `switch_mlp.{gate,up,down}_proj`, optionally quantized (affine `.weight` / `.scales` / `.biases`),
 * and `config.json` with mlx-lm's `quantization` entry. The folder is written next to its final path
 * and renamed into place, so an interrupted save never leaves a folder that looks complete.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { type ResolveOptions, readQwen35Config, resolveModelRef } from "@anemll-qwen35/ir/checkpoint";
import { type DtypeLike, toDtype } from "./array.js";
import { MlxModelLoadError } from "./errors.js";
import * as mx from "./mlx.js";
import type { Dtype, MxArray } from "./native.js";
import { openCheckpoint } from "./qwen35/checkpoint.js";
import { isQuantizable, paramSpecs } from "./qwen35/params.js";
import { isPrequantized, readParam, validateMlx } from "./qwen35/weights.js";

export interface SaveMlxOptions {
  /** Stored float dtype (default: the config's dtype, else float32). A_log stays float32. */
  dtype?: DtypeLike;
  /** Quantize at save (4 or 8 bits, group `groupSize`, default 64), as mlx_lm.convert -q. */
  bits?: 4 | 8;
  groupSize?: number;
  /** Replace `out` if it exists (default: refuse). */
  overwrite?: boolean;
  resolve?: ResolveOptions;
}

/** Files copied beside the weights when the source has them. */
const SIDE_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "chat_template.jinja",
  "generation_config.json",
  "special_tokens_map.json",
];

const DTYPE_OF_CONFIG: Record<string, Dtype> = {
  bfloat16: "bfloat16",
  float16: "float16",
  float32: "float32",
};

/** Converts `ref` (HF or MLX format) into an MLX-format folder at `out`; returns `out`. */
export async function saveMlxCheckpoint(
  ref: string,
  out: string,
  opts: SaveMlxOptions = {},
): Promise<string> {
  const src = await resolveModelRef(ref, opts.resolve);
  const target = resolve(out);
  if (existsSync(target) && !opts.overwrite) {
    throw new InvalidArgumentError(
      `saveMlxCheckpoint: ${target} exists (pass overwrite: true to replace it)`,
    );
  }
  const configPath = join(src, "config.json");
  const config = await readQwen35Config(configPath);
  const dtype = opts.dtype ? toDtype(opts.dtype) : (DTYPE_OF_CONFIG[config.dtype ?? ""] ?? "float32");
  const groupSize = opts.groupSize ?? 64;
  const quantize = opts.bits ? { bits: opts.bits, groupSize } : undefined;

  const view = await openCheckpoint(src, config);
  const temp = join(dirname(target), `.${basename(target)}.${randomBytes(6).toString("hex")}.tmp`);
  const arrays: Record<string, MxArray> = {};
  try {
    if (view.format === "mlx") validateMlx(config, view, src);
    if (quantize && isPrequantized(config, view)) {
      throw new MlxModelLoadError(src, "already quantized; save it without `bits`");
    }
    const perPath: Record<string, { group_size: number; bits: number; mode: string }> = {};
    let quantized = false;
    mx.tidy(() => {
      for (const spec of paramSpecs(config, view.tied)) {
        const p = readParam(view, spec, { dtype, quantize });
        const name = `language_model.${spec.name}`;
        if (!isQuantizable(spec.kind)) {
          arrays[name] = p as MxArray;
        } else if ("kind" in p && p.kind === "quantized") {
          arrays[`${name}.weight`] = p.weight;
          arrays[`${name}.scales`] = p.scales;
          arrays[`${name}.biases`] = p.biases;
          quantized = true;
          if (quantize && p.bits !== quantize.bits) {
            perPath[name] = { group_size: p.groupSize, bits: p.bits, mode: "affine" };
          }
        } else if ("kind" in p) {
          arrays[`${name}.weight`] = p.weight;
        }
      }
      mx.keep(arrays);
    });
    await mx.asyncEval(Object.values(arrays));

    const rawConfig = JSON.parse(await readFile(configPath, "utf8")) as Record<string, unknown>;
    // The stored dtype, where the config names one (the loader's default dtype comes from it).
    const text = (rawConfig.text_config ?? rawConfig) as Record<string, unknown>;
    for (const key of ["dtype", "torch_dtype"]) if (typeof text[key] === "string") text[key] = dtype;
    if (quantize) {
      const q = { group_size: groupSize, bits: quantize.bits, mode: "affine", ...perPath };
      rawConfig.quantization = q;
      rawConfig.quantization_config = q;
    } else if (!quantized) {
      delete rawConfig.quantization;
      delete rawConfig.quantization_config;
    }
    await mkdir(temp, { recursive: true });
    mx.saveSafetensors(join(temp, "model.safetensors"), arrays, { format: "mlx" });
    await writeFile(join(temp, "config.json"), `${JSON.stringify(rawConfig, null, 2)}\n`);
    for (const f of SIDE_FILES) {
      if (existsSync(join(src, f))) await copyFile(join(src, f), join(temp, f));
    }
    if (existsSync(target)) await rm(target, { recursive: true, force: true });
    await rename(temp, target);
    return target;
  } catch (error) {
    await rm(temp, { recursive: true, force: true });
    throw error;
  } finally {
    mx.dispose(arrays);
    view.dispose();
  }
}
