/**
 * The expert-skip draft of a mixture-of-experts checkpoint: the same weights with every routed
 * expert's down projection zeroed, so each MoE block returns its shared expert's output alone —
 * the "shared-expert-only" draft the reference study tried for speculation on the 35B MoE. Written
 * once beside the bench cache (a copy of the checkpoint's shards; tensors streamed through MLX).
 */
import { existsSync } from "node:fs";
import { copyFile, mkdir, readdir, rename, rm, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { readQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { mx } from "@anemll-qwen35/runtime-mlx";
import { BenchModelError } from "./errors.js";
import { cacheRoot, type ModelSpec } from "./models.js";

/** Routed experts' down projection of a decoder layer (HF Qwen3.5 MoE: one fused [E, D, F] tensor). */
const ROUTED_DOWN = /^model\.(language_model\.)?layers\.\d+\.mlp\.experts\.down_proj(\.weight)?$/;
const DONE = "anemll-expert-skip.json";

/** Writes (or reuses) the shared-expert-only copy of `dir`; returns its folder. */
export async function expertSkipCheckpoint(dir: string, name: string): Promise<string> {
  const cfg = await readQwen35Config(join(dir, "config.json"));
  if (!cfg.moe) throw new BenchModelError(name, "expert-skip needs a mixture-of-experts checkpoint");
  const out = join(cacheRoot(), "bench", "expert-skip", name);
  if (existsSync(join(out, DONE))) return out;
  const tmp = `${out}.partial`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  let zeroed = 0;
  for (const f of await readdir(dir)) {
    if (f.endsWith(".safetensors")) {
      const { arrays, metadata } = mx.loadSafetensors(join(dir, f));
      for (const [k, a] of Object.entries(arrays)) {
        if (!ROUTED_DOWN.test(k)) continue;
        arrays[k] = mx.zeros(a.shape, a.dtype);
        zeroed++;
      }
      mx.saveSafetensors(join(tmp, f), arrays, metadata);
      mx.dispose(arrays);
    } else if (!f.startsWith(".") && !f.startsWith("anemll-")) {
      await copyFile(join(dir, f), join(tmp, f));
    }
  }
  if (zeroed !== cfg.numHiddenLayers) {
    await rm(tmp, { recursive: true, force: true });
    throw new BenchModelError(
      name,
      `found ${zeroed} routed-expert down projections in ${basename(dir)}, expected one per layer (${cfg.numHiddenLayers})`,
    );
  }
  await writeFile(join(tmp, DONE), `${JSON.stringify({ source: dir, zeroed }, null, 2)}\n`);
  await rm(out, { recursive: true, force: true });
  await rename(tmp, out);
  return out;
}

/** The expert-skip draft of `target` as a model the scenarios can open. */
export function expertSkipModel(target: ModelSpec): ModelSpec {
  return {
    name: `${target.name}-shared-only`,
    weights: `${target.weights}; routed experts zeroed (shared expert only)`,
    checkpoint: async () => expertSkipCheckpoint(await target.checkpoint(), target.name),
  };
}
