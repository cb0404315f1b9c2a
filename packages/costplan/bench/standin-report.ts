/**
 * The text report of the Qwen3.5-0.8B STAND-IN chain (bench/qwen35-standin.ts — shape-accurate,
 * not converter output) and two comparisons: ctx 1024 → 256, and unfused → all super-blocks fused
 * with a LUT4 head. Writes summaries (the full reports without their per-op lists, ~2 MB each)
 * to bench/results/standin-*.json.
 *
 *   pnpm --filter @anemll-qwen35/costplan exec tsx bench/standin-report.ts [--chip=m4-pro]
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  type ChipId,
  type CostReport,
  compareReports,
  costplan,
  formatComparison,
  formatReport,
} from "../src/index.js";
import { buildStandInChain, QWEN35_08B } from "./qwen35-standin.js";

const chip = (process.argv.find((a) => a.startsWith("--chip="))?.slice(7) ?? "m4-pro") as ChipId;
const dir = join(dirname(fileURLToPath(import.meta.url)), "results");

async function save(name: string, r: CostReport): Promise<void> {
  const summary = {
    note: "summary of a costplan report: per-op lists omitted (rerun bench/standin-report.ts for them)",
    ...r,
    packages: r.packages.map((p) => ({
      ...p,
      functions: p.functions.map(({ ops, interruptions, ...f }) => ({
        ...f,
        interruptions: { ...interruptions, runs: [] },
      })),
    })),
  };
  await mkdir(dir, { recursive: true });
  const file = join(dir, name);
  await writeFile(`${file}.tmp`, `${JSON.stringify(summary, null, 1)}\n`);
  await rename(`${file}.tmp`, file);
}

const unfused = await costplan(buildStandInChain(QWEN35_08B, { fuse: 1, ctx: 1024, headBits: 6 }), {
  chip,
  native: "off",
});
console.log(formatReport(unfused, { topOps: 15 }));
const ctx256 = await costplan(buildStandInChain(QWEN35_08B, { fuse: 1, ctx: 256, headBits: 6 }), {
  chip,
  native: "off",
});
console.log(formatComparison(compareReports(unfused, ctx256)));
const fused = await costplan(buildStandInChain(QWEN35_08B, { fuse: 6, ctx: 256, headBits: 4 }), {
  chip,
  native: "off",
});
console.log(formatComparison(compareReports(unfused, fused)));
await save("standin-unfused-ctx1024.json", unfused);
await save("standin-fused-ctx256-lut4.json", fused);
