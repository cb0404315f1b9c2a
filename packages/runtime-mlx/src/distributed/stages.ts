/**
 * Before loading, the ranks agree on who holds which layers: each tells the others (one all_gather)
 * its memory and a signature of what it was asked to load; a rank started with another model or other
 * options is refused here, not discovered as garbage later. Every rank then computes the same split.
 */
import { totalmem } from "node:os";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { DistributedError } from "../errors.js";
import * as mx from "../mlx.js";
import type { Dtype } from "../native.js";
import type { DistributedGroup } from "./group.js";
import { type LayerRange, planSplit, splitFromCounts, weightBytes } from "./split.js";

export interface StageRequest {
  readonly dtype: Dtype;
  readonly tied: boolean;
  readonly bits?: number;
  readonly groupSize?: number;
  readonly contextLength: number;
  /** Explicit layer counts per rank; default: in proportion to each rank's memory. */
  readonly split?: readonly number[];
  /** Anything else all ranks must agree on (KV cache policy...). */
  readonly extra?: unknown;
}

/** The memory this rank offers: Metal's recommended working set on a Mac GPU, else the machine's RAM. */
export function memoryShare(): number {
  if (mx.defaultDevice() === "gpu") {
    const limit = Number(mx.deviceInfo("gpu").max_recommended_working_set_size);
    if (limit > 0) return limit;
  }
  return totalmem();
}

/** 32-bit FNV-1a of a string, as an int32. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h | 0;
}

/** Exchanges memory and signatures with every rank and returns the layers of every rank. */
export async function planStages(
  group: DistributedGroup,
  cfg: Qwen35Config,
  req: StageRequest,
  o: { timeoutMs: number },
): Promise<LayerRange[]> {
  const signature = fnv1a(
    JSON.stringify({
      protocol: 1,
      config: cfg,
      dtype: req.dtype,
      tied: req.tied,
      bits: req.bits ?? null,
      groupSize: req.groupSize ?? null,
      contextLength: req.contextLength,
      split: req.split ?? null,
      extra: req.extra ?? null,
    }),
  );
  const megabytes = Math.max(1, Math.min(2 ** 31 - 1, Math.round(memoryShare() / 2 ** 20)));
  const mine = mx.array(Int32Array.of(megabytes, signature), [2]);
  const all = group.allGather(mine);
  let values: Int32Array;
  try {
    await group.wait([all], { timeoutMs: o.timeoutMs, what: "agreeing on the pipeline split" });
    values = all.toTypedArray() as Int32Array;
  } finally {
    mx.dispose([mine, all]);
  }
  const shares: number[] = [];
  for (let r = 0; r < group.size; r++) {
    if (values[2 * r + 1] !== signature) {
      await group.flush(); // every rank sees the mismatch: let ours reach them before we end
      throw new DistributedError(
        "E_MLX_DIST_MISMATCH",
        `${group.describe(r)} was started with another model or other options than rank ${group.rank} ` +
          "(config, dtype, bits, context length and split must match): start every rank with the same arguments",
      );
    }
    shares.push(values[2 * r]);
  }
  if (req.split) {
    if (req.split.length !== group.size) {
      throw new DistributedError(
        "E_MLX_DIST_SETUP",
        `the pipeline split gives ${req.split.length} layer counts for ${group.size} ranks`,
      );
    }
    return splitFromCounts(req.split, cfg.numHiddenLayers);
  }
  return planSplit(weightBytes(cfg, req), shares);
}
