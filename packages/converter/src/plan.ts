/**
 * Which packages a conversion writes: the embedding, the super-blocks grouped `fuse` at a time
 * (as many as fit the per-package size budget with `fuse: "all"`), and the lm_head.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { parameterCounts, type Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { WeightQuant } from "./graph/quant.js";

export interface PlanOptions {
  /** Super-blocks per package, or "all" (as many as the budget allows). */
  fuse: number | "all";
  /** Largest package size in bytes (default 1.5 GB: single ANE blobs of ~2 GB fell back to CPU). */
  budgetBytes: number;
  /** Encoding of the super-block projections. */
  body: WeightQuant;
  /** Default LUT group size (output channels per LUT). */
  groupSize: number;
}

export type PlannedComponent =
  | { readonly kind: "embed"; readonly name: string; readonly file: string }
  | {
      readonly kind: "superblocks";
      readonly name: string;
      readonly file: string;
      /** First super-block index and how many. */
      readonly first: number;
      readonly count: number;
      /** Layers [start, end). */
      readonly layers: readonly [number, number];
      readonly estimatedBytes: number;
    }
  | { readonly kind: "lm_head"; readonly name: string; readonly file: string };

export const DEFAULT_BUDGET_BYTES = 1.5e9;

/** Stored bytes of `params` weights in `rows` output channels: payload plus LUT/scale overhead. */
export function bytesFor(params: number, encoding: WeightQuant, rows: number, groupSize: number): number {
  switch (encoding.kind) {
    case "none":
      return params * 2;
    case "int8":
      return params + Math.ceil(params / (encoding.blockSize ?? params / rows)) * 2;
    case "lut": {
      const luts = encoding.perTensor ? 1 : Math.ceil(rows / (encoding.groupSize ?? groupSize));
      return Math.ceil((params * encoding.bits) / 8) + luts * 2 ** encoding.bits * 2;
    }
  }
}

/** Estimated package size of one super-block (its four layers) under an encoding. */
export function superBlockBytes(
  config: Qwen35Config,
  index: number,
  encoding: WeightQuant,
  groupSize: number,
): number {
  const perLayer = parameterCounts(config).perLayer;
  const params = config.superBlocks[index].layers.reduce((s, l) => s + perLayer[l], 0);
  // rows ≈ params / hidden: good enough for the LUT overhead term
  return bytesFor(params, encoding, Math.ceil(params / config.hiddenSize), groupSize);
}

const pad2 = (n: number) => String(n).padStart(2, "0");

export function planComponents(config: Qwen35Config, options: PlanOptions): PlannedComponent[] {
  const total = config.superBlocks.length;
  if (options.fuse !== "all" && (!Number.isInteger(options.fuse) || options.fuse < 1)) {
    throw new InvalidArgumentError(`--fuse must be a positive integer or "all", got ${options.fuse}`);
  }
  const maxPer = options.fuse === "all" ? total : options.fuse;
  const out: PlannedComponent[] = [{ kind: "embed", name: "embed", file: "embed.mlpackage" }];
  let first = 0;
  while (first < total) {
    let count = 0;
    let bytes = 0;
    while (first + count < total && count < maxPer) {
      const next = superBlockBytes(config, first + count, options.body, options.groupSize);
      // The budget splits the stack; a single super-block over budget still gets its own package
      // (the caller warns: super-blocks are the unit of conversion).
      if (count > 0 && bytes + next > options.budgetBytes) break;
      bytes += next;
      count++;
    }
    const last = first + count - 1;
    const name = count === 1 ? `sb_${pad2(first)}` : `sb_${pad2(first)}-${pad2(last)}`;
    const layers: [number, number] = [
      config.superBlocks[first].layers[0],
      config.superBlocks[last].layers[3] + 1,
    ];
    out.push({
      kind: "superblocks",
      name,
      file: `${name}.mlpackage`,
      first,
      count,
      layers,
      estimatedBytes: bytes,
    });
    first += count;
  }
  out.push({ kind: "lm_head", name: "lm_head", file: "lm_head.mlpackage" });
  return out;
}
