/**
 * Which packages a conversion writes: the embedding, the super-blocks grouped `fuse` at a time
 * (as many as fit the per-package size budget with `fuse: "all"`; an explicit `fuse` is kept even
 * over the budget, with a warning), and the lm_head — and what to warn about before converting.
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { checkPlanOptions } from "./options.js";
import type { QuantPlan } from "./quant/plan.js";

export interface PlanOptions {
  /** Super-blocks per package, or "all" (as many as the budget allows). */
  fuse: number | "all";
  /** Largest package size in bytes (default 1.5 GB: single ANE blobs of ~2 GB fell back to CPU). */
  budgetBytes: number;
  /** How each weight is stored (sizes follow it tensor by tensor): planQuant(config, policy). */
  quant: QuantPlan;
  /** Add the MTP head's package (model.json's speculative.mtp), after the lm_head. */
  mtp?: boolean;
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
      readonly kind: "lm_head" | "mtp";
      readonly name: string;
      readonly file: string;
      readonly estimatedBytes: number;
    };

/** Estimated package size of one super-block (its four layers), tensor by tensor as the plan stores them. */
export function superBlockBytes(config: Qwen35Config, index: number, plan: QuantPlan): number {
  const layers = new Set(config.superBlocks[index].layers);
  return plan.tensors.reduce((n, t) => (layers.has(t.layer) ? n + t.bytes : n), 0);
}

const pad2 = (n: number) => String(n).padStart(2, "0");

export function planComponents(config: Qwen35Config, options: PlanOptions): PlannedComponent[] {
  checkPlanOptions(options.fuse, options.budgetBytes);
  const total = config.superBlocks.length;
  const out: PlannedComponent[] = [
    {
      kind: "embed",
      name: "embed",
      file: "embed.mlpackage",
      estimatedBytes: options.quant.tensor("embed").bytes,
    },
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
    estimatedBytes: options.quant.tensor("lm_head").bytes,
  });
  if (options.mtp) {
    const bytes = options.quant.tensors.reduce(
      (n, t) => (t.canonical.startsWith("mtp.") ? n + t.bytes : n),
      0,
    );
    out.push({ kind: "mtp", name: "mtp", file: "mtp.mlpackage", estimatedBytes: bytes });
  }
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
    if (c.kind === "superblocks" || c.kind === "mtp") continue;
    const q = options.quant.tensor(c.kind === "embed" ? "embed" : "lm_head").encoding;
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
