/**
 * costplan on the converter's fully fused Qwen3.5-0.8B (synthetic checkpoint: real shapes, random
 * weights — costs do not depend on the values): graph interruptions and projected decode tok/s
 * (M4 Pro, static model) per KV placement × attention form × quantization policy.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/costplan-fused.ts
 *       [--variants io:matmul:default,mlstate:sdpa:lut4,…] [--ctx 256] [--rebuild]
 *
 * Each variant's super-block package (all 6 super-blocks in one function) is written once into
 * ~/.cache/anemll-qwen35/bench/costplan-fused/ and reused while the converter's graph sources are
 * unchanged (a hash of src/graph/*.ts is part of the folder name); the embed and lm_head packages
 * are built once per lm_head encoding. Folders `baseline-*` there (packages of an earlier
 * converter, written by hand) are costed too, so a before/after lands in one table.
 * Writes bench/results/costplan-fused.json.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { costplan } from "@anemll-qwen35/costplan";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { readMlPackage } from "@anemll-qwen35/ir/mil";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { resolveQuantSpec } from "../src/convert.js";
import type { AttentionForm } from "../src/graph/index.js";
import { formatWeightQuant, quantFor, specRules } from "../src/graph/quant.js";
import { benchCache, ensurePackage, graphSourceHash } from "./packages.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const ctx = Number(arg("--ctx") ?? 256);
const rebuild = process.argv.includes("--rebuild");
const variants = (
  arg("--variants") ??
  ["io", "mlstate"]
    .flatMap((s) => ["matmul:lut4", "sdpa:lut4", "matmul:default"].map((v) => `${s}:${v}`))
    .join(",")
)
  .split(",")
  .map((v) => {
    const [state, attention, quant] = v.split(":");
    return { name: v, state: state as "io" | "mlstate", attention: attention as AttentionForm, quant };
  });
const graphHash = graphSourceHash();
const cache = benchCache("costplan-fused");

const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
await using ck = await Qwen35Checkpoint.open(synth.dir);

interface Row {
  readonly variant: string;
  readonly superblocks: string;
  readonly runtimeOps: number;
  readonly cpuOps: number;
  readonly interruptions: number;
  readonly edgeRuns: number;
  readonly timeline: string;
  readonly superblockMs: number;
  readonly weightBytes: number;
  readonly msPerToken: number;
  readonly tokPerSec: number;
}

async function cost(variant: string, sbFile: string, headFile: string, embedFile: string): Promise<Row> {
  const [embed, sb, head] = await Promise.all([embedFile, sbFile, headFile].map((f) => readMlPackage(f)));
  const r = await costplan(
    {
      name: `0.8b-${variant}`,
      components: [
        { name: "embed", model: embed },
        { name: "sb_00-05", model: sb },
        { name: "lm_head", model: head },
      ],
    },
    { chip: "m4-pro", native: "off" },
  );
  const p = r.packages[1];
  const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
  return {
    variant,
    superblocks: sbFile,
    runtimeOps: f.summary.runtimeOps,
    cpuOps: f.summary.cpu,
    interruptions: f.interruptions.count,
    edgeRuns: f.interruptions.edgeRuns,
    timeline: f.interruptions.timeline,
    superblockMs: p.prediction.estimatedMs,
    weightBytes: p.weightBytesStored,
    msPerToken: r.chain?.estimatedMsPerToken ?? r.totals.estimatedMs,
    tokPerSec: r.chain?.estimatedTokPerSec ?? 1000 / r.totals.estimatedMs,
  };
}

const rows: Row[] = [];
const headFor = async (quant: string) => {
  const rules = specRules(resolveQuantSpec({ quant }));
  const enc = formatWeightQuant(quantFor({ rules }, { canonical: "lm_head", role: "lm_head" }));
  const dir = join(cache, `head-${enc}-ctx${ctx}`);
  const options = { ctx, quant: { rules } };
  return {
    embed: await ensurePackage(ck, join(dir, "embed.mlpackage"), { kind: "embed" }, options),
    head: await ensurePackage(ck, join(dir, "lm_head.mlpackage"), { kind: "lm_head" }, options),
  };
};
for (const v of variants) {
  const dir = join(cache, `${v.name.replace(/[^a-z0-9]+/gi, "-")}-ctx${ctx}-${graphHash}`);
  const rules = specRules(resolveQuantSpec({ quant: v.quant }));
  const sb = await ensurePackage(
    ck,
    join(dir, "sb_00-05.mlpackage"),
    { kind: "superblocks", first: 0, count: ck.config.superBlocks.length },
    { ctx, state: v.state, attention: v.attention, quant: { rules } },
    rebuild,
  );
  const { embed, head } = await headFor(v.quant);
  rows.push(await cost(v.name, sb, head, embed));
}
// super-block packages of an earlier converter, kept by hand for a before/after (costed with the LUT6 head)
for (const d of readdirSync(cache).filter((d) => d.startsWith("baseline-"))) {
  const sb = join(cache, d, "sb_00-05.mlpackage");
  if (!existsSync(sb)) continue;
  const { embed, head } = await headFor("lut4");
  rows.push(await cost(d, sb, head, embed));
}

console.log(`\ncostplan, fully fused synthetic 0.8B, ctx ${ctx}, M4 Pro (static model)\n`);
console.log("| variant | runtime ops | CPU ops | interruptions | edge runs | super-blocks ms | tok/s |");
console.log("|---|---|---|---|---|---|---|");
for (const r of rows)
  console.log(
    `| ${r.variant} | ${r.runtimeOps} | ${r.cpuOps} | ${r.interruptions} | ${r.edgeRuns} | ${r.superblockMs.toFixed(3)} | ${r.tokPerSec.toFixed(1)} |`,
  );
const file = join(here, "results", "costplan-fused.json");
mkdirSync(dirname(file), { recursive: true });
writeFileSync(
  `${file}.tmp`,
  `${JSON.stringify({ bench: "costplan-fused", date: new Date().toISOString(), ctx, chip: "m4-pro", graphHash, rows }, null, 2)}\n`,
);
renameSync(`${file}.tmp`, file);
console.log(`\nwrote ${file}`);
