/**
 * The converter's packages of the synthetic Qwen3.5-0.8B that costplan's calibration costs
 * (packages/costplan/bench/calibrate.ts --packages DIR): the measured configurations of the
 * reference study — io KV, every super-block projection LUT4 g8 — at the context lengths the
 * measurements name or assume.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/calibration-packages.ts [--rebuild]
 *   pnpm --filter @anemll-qwen35/costplan calibrate --packages ~/.cache/anemll-qwen35/bench/calibration/<hash>
 *
 * Writes (once; reused while the converter's graph sources are unchanged) into
 * ~/.cache/anemll-qwen35/bench/calibration/<graph hash>/: embed, lm_head-lut6, lm_head-lut4,
 * sb1-ctx256, sb1-ctx1024, sb2-ctx1024, sb6-ctx256 (.mlpackage), and prints the folder.
 */
import { join } from "node:path";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { QUANT_PRESETS, type QuantRule } from "../src/index.js";
import { benchCache, ensurePackage, graphSourceHash } from "./packages.js";

const rebuild = process.argv.includes("--rebuild");
const dir = join(benchCache("calibration"), graphSourceHash());
const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
await using ck = await Qwen35Checkpoint.open(synth.dir);

const lut4: readonly QuantRule[] = QUANT_PRESETS.lut4; // LUT4 body, LUT6 head
const head = (bits: 4 | 6) => ({ rules: [{ pattern: "lm_head", quant: { kind: "lut", bits } as const }] });
await ensurePackage(ck, join(dir, "embed.mlpackage"), { kind: "embed" }, { ctx: 256 }, rebuild);
for (const bits of [6, 4] as const)
  await ensurePackage(
    ck,
    join(dir, `lm_head-lut${bits}.mlpackage`),
    { kind: "lm_head" },
    { ctx: 256, quant: head(bits) },
    rebuild,
  );
for (const [count, ctx] of [
  [1, 256],
  [1, 1024],
  [2, 1024],
  [6, 256],
] as const) {
  await ensurePackage(
    ck,
    join(dir, `sb${count}-ctx${ctx}.mlpackage`),
    { kind: "superblocks", first: 0, count },
    { ctx, quant: { rules: lut4 } },
    rebuild,
  );
}
console.log(dir);
