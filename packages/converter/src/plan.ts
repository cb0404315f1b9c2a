/**
 * Which packages a conversion writes: the embedding, the super-blocks grouped `fuse` at a time
 * (as many as fit the per-package size budget with `fuse: "all"`; an explicit `fuse` is kept even
 * over the budget, with a warning), and the lm_head — and what to warn about before converting.
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
  /** Encodings of the embedding table and the lm_head (for their size estimates; default none). */
  embed?: WeightQuant;
  lmHead?: WeightQuant;
}

export type PlannedComponent =
  | { readonly kind: "embed"; readonly name: string; readonly file: string; readonly estimatedBytes: number }
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
  | {
      readonly kind: "lm_head";
      readonly name: string;
      readonly file: string;
      readonly estimatedBytes: number;
    };

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
  const vocabBytes = (q: WeightQuant | undefined) =>
    bytesFor(
      config.vocabSize * config.hiddenSize,
      q ?? { kind: "none" },
      config.vocabSize,
      options.groupSize,
    );
  const out: PlannedComponent[] = [
    { kind: "embed", name: "embed", file: "embed.mlpackage", estimatedBytes: vocabBytes(options.embed) },
  ];
  let first = 0;
  while (first < total) {
    let count = 0;
    let bytes = 0;
    const maxPer = options.fuse === "all" ? total : options.fuse;
    while (first + count < total && count < maxPer) {
      const next = superBlockBytes(config, first + count, options.body, options.groupSize);
      // "all" fills packages up to the budget; a single super-block over budget still gets its
      // own package (super-blocks are the unit of conversion). An explicit fuse is kept as asked.
      if (options.fuse === "all" && count > 0 && bytes + next > options.budgetBytes) break;
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
  out.push({
    kind: "lm_head",
    name: "lm_head",
    file: "lm_head.mlpackage",
    estimatedBytes: vocabBytes(options.lmHead),
  });
  return out;
}

/** "812 kB", "1.52 GB": decimal units, as the budget is given. */
export function formatBytes(n: number): string {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let u = 0;
  let v = n;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return `${u === 0 ? v : v.toPrecision(3)} ${units[u]}`;
}

/** Packages of a plan that exceed the budget, as warnings saying what to change (one per cause). */
export function planWarnings(plan: readonly PlannedComponent[], options: PlanOptions): string[] {
  const budget = formatBytes(options.budgetBytes);
  const over = plan.filter((c) => c.estimatedBytes > options.budgetBytes);
  const list = (cs: readonly PlannedComponent[]) =>
    cs.map((c) => `${c.name} (~${formatBytes(c.estimatedBytes)})`).join(", ");
  const warnings: string[] = [];
  const blocks = over.filter((c) => c.kind === "superblocks");
  if (blocks.length > 0) {
    const fused = blocks.filter((c) => c.kind === "superblocks" && c.count > 1);
    warnings.push(
      fused.length > 0
        ? `warning: --fuse ${options.fuse} makes ${list(blocks)} larger than the ${budget} budget; use a smaller --fuse (or --fuse all, which fills packages up to the budget) or raise --budget`
        : `warning: ${list(blocks)} exceed${blocks.length === 1 ? "s" : ""} the ${budget} budget and cannot be split further (one super-block is the smallest package); use a smaller --lut or raise --budget`,
    );
  }
  for (const c of over) {
    if (c.kind === "superblocks") continue;
    const q = c.kind === "embed" ? options.embed : options.lmHead;
    const advice =
      q && q.kind !== "none"
        ? "fewer LUT bits or a larger --budget would fit it"
        : `${c.kind === "embed" ? "--embed-lut 8" : "--lmhead-lut 6"} (or int8) would shrink it`;
    warnings.push(
      `warning: ${c.file} is ~${formatBytes(c.estimatedBytes)}${q && q.kind !== "none" ? "" : " (unquantized)"}, over the ${budget} budget; ${advice}`,
    );
  }
  return warnings;
}
