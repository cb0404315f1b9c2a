/**
 * Which packages a conversion writes: the embedding, the super-blocks grouped `fuse` at a time
 * (as many as fit the per-package size budget with `fuse: "all"`; an explicit `fuse` is kept even
 * over the budget, with a warning), and the lm_head — and what to warn about before converting.
 */
import { InvalidArgumentError, numel } from "@anemll-qwen35/core";
import { type Qwen35Config, qwen35Parameters } from "@anemll-qwen35/ir/checkpoint";
import { lutGroupSize, type QuantPolicy, quantFor, type WeightQuant } from "./graph/quant.js";

export interface PlanOptions {
  /** Super-blocks per package, or "all" (as many as the budget allows). */
  fuse: number | "all";
  /** Largest package size in bytes (default 1.5 GB: single ANE blobs of ~2 GB fell back to CPU). */
  budgetBytes: number;
  /** How each weight is stored (sizes follow it tensor by tensor). */
  quant: QuantPolicy;
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

/** Estimated package size of one super-block (its four layers), tensor by tensor as `quant` stores them. */
export function superBlockBytes(config: Qwen35Config, index: number, quant: QuantPolicy): number {
  const layers = new Set(config.superBlocks[index].layers);
  let bytes = 0;
  for (const p of qwen35Parameters(config, { tied: true })) {
    if (!layers.has(p.layer)) continue;
    const n = numel(p.shape);
    const q = p.kind === "projection" ? quantFor(quant, p) : { kind: "none" as const };
    bytes += bytesFor(n, q, p.shape[0], q.kind === "lut" ? lutGroupSize(quant, q) : 0);
  }
  return bytes;
}

/** The encoding of the embedding table or the lm_head under a policy. */
function vocabQuant(quant: QuantPolicy, role: "embed" | "lm_head"): WeightQuant {
  return quantFor(quant, { canonical: role, role });
}

const pad2 = (n: number) => String(n).padStart(2, "0");

export function planComponents(config: Qwen35Config, options: PlanOptions): PlannedComponent[] {
  const total = config.superBlocks.length;
  if (options.fuse !== "all" && (!Number.isInteger(options.fuse) || options.fuse < 1)) {
    throw new InvalidArgumentError(`--fuse must be a positive integer or "all", got ${options.fuse}`);
  }
  const vocabBytes = (role: "embed" | "lm_head") => {
    const q = vocabQuant(options.quant, role);
    const group = q.kind === "lut" ? lutGroupSize(options.quant, q) : 0;
    return bytesFor(config.vocabSize * config.hiddenSize, q, config.vocabSize, group);
  };
  const out: PlannedComponent[] = [
    { kind: "embed", name: "embed", file: "embed.mlpackage", estimatedBytes: vocabBytes("embed") },
  ];
  let first = 0;
  while (first < total) {
    let count = 0;
    let bytes = 0;
    const maxPer = options.fuse === "all" ? total : options.fuse;
    while (first + count < total && count < maxPer) {
      const next = superBlockBytes(config, first + count, options.quant);
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
    estimatedBytes: vocabBytes("lm_head"),
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
    const q = vocabQuant(options.quant, c.kind === "embed" ? "embed" : "lm_head");
    const advice =
      q.kind !== "none"
        ? "fewer LUT bits or a larger --budget would fit it"
        : `${c.kind === "embed" ? "--embed-lut 8" : "--lmhead-lut 6"} (or int8) would shrink it`;
    warnings.push(
      `warning: ${c.file} is ~${formatBytes(c.estimatedBytes)}${q.kind !== "none" ? "" : " (unquantized)"}, over the ${budget} budget; ${advice}`,
    );
  }
  return warnings;
}
