import { parseQwen35Config, qwen35Parameters } from "@anemll-qwen35/ir/checkpoint";
import { publishedConfigJson } from "@anemll-qwen35/testkit";
import { describe, expect, it } from "vitest";
import { formatBytes, planComponents, planWarnings, superBlockBytes } from "../src/plan.js";
import { planQuant } from "../src/quant/plan.js";
import { DEFAULT_QUANT_RULES } from "../src/quant/policy.js";

const cfg08 = parseQwen35Config(publishedConfigJson("0.8b"));
const cfg9 = parseQwen35Config(publishedConfigJson("9b"));
const lut4 = { rules: [{ pattern: "body", quant: { kind: "lut", bits: 4 } }] } as const;
const LUT4 = planQuant(cfg08, lut4);
const LUT4_9B = planQuant(cfg9, lut4);
const NONE_9B = planQuant(cfg9, { rules: [] });

describe("planComponents", () => {
  it("puts one super-block per package with fuse 1", () => {
    const plan = planComponents(cfg08, { fuse: 1, budgetBytes: 1.5e9, quant: LUT4 });
    expect(plan.map((c) => c.name)).toEqual([
      "embed",
      "sb_00",
      "sb_01",
      "sb_02",
      "sb_03",
      "sb_04",
      "sb_05",
      "lm_head",
    ]);
    const sb = plan[1];
    expect(sb.kind === "superblocks" && sb.layers).toEqual([0, 4]);
  });

  it("fuses the whole 0.8B stack into one package within the budget", () => {
    const plan = planComponents(cfg08, { fuse: "all", budgetBytes: 1.5e9, quant: LUT4 });
    expect(plan.map((c) => c.name)).toEqual(["embed", "sb_00-05", "lm_head"]);
    const sb = plan[1];
    if (sb.kind !== "superblocks") throw new Error("expected super-blocks");
    expect(sb.layers).toEqual([0, 24]);
    // 0.8B layers hold ~0.5 B params: LUT4 ≈ 0.25 GB
    expect(sb.estimatedBytes).toBeGreaterThan(0.2e9);
    expect(sb.estimatedBytes).toBeLessThan(0.3e9);
  });

  it("lets the budget split a large model, never exceeding it", () => {
    const budget = 1e9;
    const plan = planComponents(cfg9, { fuse: "all", budgetBytes: budget, quant: LUT4_9B });
    const sbs = plan.filter((c) => c.kind === "superblocks");
    expect(sbs.length).toBeGreaterThan(1);
    for (const c of sbs) if (c.kind === "superblocks") expect(c.estimatedBytes).toBeLessThanOrEqual(budget);
    const covered = sbs.reduce((n, c) => n + (c.kind === "superblocks" ? c.count : 0), 0);
    expect(covered).toBe(cfg9.superBlocks.length);
    // 9B super-block ≈ 4 layers × ~0.22 B params: fp16 ≈ 1.7 GB, LUT4 ≈ 0.43 GB → two per 1 GB package
    expect(superBlockBytes(cfg9, 0, NONE_9B)).toBeGreaterThan(1.5e9);
    expect(sbs.length).toBe(4);
  });

  it("keeps an explicit fuse even over the budget, and says so once", () => {
    const options = { fuse: 4, budgetBytes: 1e9, quant: NONE_9B } as const;
    const plan = planComponents(cfg9, options);
    expect(plan.map((c) => c.name)).toEqual(["embed", "sb_00-03", "sb_04-07", "lm_head"]);
    const warnings = planWarnings(plan, options);
    expect(warnings.filter((w) => w.includes("--fuse 4"))).toHaveLength(1);
    expect(warnings[0]).toMatch(
      /sb_00-03 \(~6\.\d\d GB\), sb_04-07 \(~6\.\d\d GB\) larger than the 1\.00 GB budget/,
    );
    // the 9B embedding (2.03 GB in fp16) is over the budget too
    expect(warnings).toContainEqual(expect.stringMatching(/embed\.mlpackage is ~2\.03 GB \(unquantized\)/));
    expect(
      planWarnings(planComponents(cfg08, { ...options, budgetBytes: 1.5e9, quant: LUT4 }), {
        ...options,
        budgetBytes: 1.5e9,
        quant: LUT4,
      }),
    ).toEqual([]);
  });

  it("formats sizes in decimal units", () => {
    expect([formatBytes(999), formatBytes(1500), formatBytes(1.5e9), formatBytes(2.03e9)]).toEqual([
      "999 B",
      "1.50 kB",
      "1.50 GB",
      "2.03 GB",
    ]);
  });

  it("groups fuse N at a time with a shorter last package", () => {
    const plan = planComponents(cfg08, { fuse: 4, budgetBytes: 1.5e9, quant: LUT4 });
    expect(plan.map((c) => c.name)).toEqual(["embed", "sb_00-03", "sb_04-05", "lm_head"]);
    expect(() => planComponents(cfg08, { fuse: 0, budgetBytes: 1, quant: LUT4 })).toThrow(/--fuse/);
  });
});

describe("superBlockBytes", () => {
  it("sizes each tensor as the plan stores it: the default's LUT6 projections and fp16 GDN a/b against uniform LUT4", () => {
    const uniform = superBlockBytes(cfg08, 0, LUT4);
    const policy = superBlockBytes(cfg08, 0, planQuant(cfg08, { rules: DEFAULT_QUANT_RULES }));
    // a 0.8B super-block's projections, less the 6 GDN a/b ones (3 layers × 2 × 16×1024), take 6
    // instead of 4 bits (+2 bits each); those 6 take 16 bits (+12 each)
    const projections = qwen35Parameters(cfg08, { tied: true })
      .filter((p) => p.kind === "projection" && p.layer < 4)
      .reduce((n, p) => n + p.shape[0] * p.shape[1], 0);
    const ab = 3 * 2 * 16 * 1024;
    const extra = (2 * (projections - ab) + 12 * ab) / 8;
    expect(policy - uniform).toBeGreaterThan(extra * 0.98);
    expect(policy - uniform).toBeLessThan(extra * 1.1);
  });
});
