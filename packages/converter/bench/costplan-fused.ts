/**
 * costplan on the converter's fully fused Qwen3.5-0.8B (synthetic checkpoint: real shapes, random
 * weights — costs do not depend on the values): graph interruptions and projected decode tok/s
 * (M4 Pro, static model), one hot-path change at a time, in both KV placements:
 *
 *   before   the converter before the hot-path work (`--baseline`, default the merge-base of HEAD
 *            and main): sdpa over concat(cache, new row); with the KV in a state, each attention
 *            layer reads the state, computes its int32 write bounds and writes two slice_updates;
 *   step 1   index math once per function (one state read, one write, bounds at the start; the
 *            RoPE row gathered once) — this tree, attention still sdpa;
 *   step 2   attention as matmul + softmax, the new row still joined onto the cache (matmul-joined);
 *   step 3   cache and new row scored apart (matmul, the default form);
 *   default  step 3 with the converter's default quantization policy (and, beside it, the preset
 *            "mixed" — LUT4 MLP and attention — that the default was measured against).
 * Steps before "default" keep the reference study's measured encoding (LUT4 body, LUT6 head).
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/costplan-fused.ts
 *       [--variants io:baseline:lut4,mlstate:matmul:default,…] [--ctx 256] [--baseline <commit>] [--rebuild]
 *
 * Each super-block package (all 6 super-blocks in one function) is written once into
 * ~/.cache/anemll-qwen35/bench/costplan-fused/ and reused while the graph sources are unchanged (a
 * hash of src/graph/*.ts, or the baseline commit, is part of the folder name); the embed and lm_head
 * packages are built once per lm_head encoding with this tree. The baseline's graph code is taken
 * from git (`git archive`) into that cache and run as it was. Writes bench/results/costplan-fused.json.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { costplan } from "@anemll-qwen35/costplan";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { readMlPackage } from "@anemll-qwen35/ir/mil";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import type { AttentionCore, BuildOptions, EncodedWeight, EncodedWeightStore } from "../src/graph/index.js";
import { resolveQuantSpec } from "../src/options.js";
import { formatWeightQuant, quantFor, specRules } from "../src/quant/policy.js";
import { benchCache, type ComponentBuilder, ensurePackage, graphSourceHash, shortHash } from "./packages.js";

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..", "..");
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const git = (...args: string[]) => execFileSync("git", args, { cwd: repo, encoding: "utf8" }).trim();
const ctx = Number(arg("--ctx") ?? 256);
const rebuild = process.argv.includes("--rebuild");
const baseline = git("rev-parse", arg("--baseline") ?? git("merge-base", "HEAD", "main"));

interface Variant {
  readonly name: string;
  readonly step: string;
  readonly state: "io" | "mlstate";
  /** "baseline": the earlier converter's graph (sdpa). */
  readonly attention: AttentionCore | "baseline";
  readonly quant: string;
}
const STEPS: readonly Omit<Variant, "name" | "state">[] = [
  { step: `before (converter at ${baseline.slice(0, 7)})`, attention: "baseline", quant: "lut4" },
  { step: "1: index math once per function", attention: "sdpa", quant: "lut4" },
  { step: "2: matmul + softmax attention, cache joined", attention: "matmul-joined", quant: "lut4" },
  { step: "3: cache and new row scored apart", attention: "matmul", quant: "lut4" },
  { step: "default quantization policy", attention: "matmul", quant: "default" },
  { step: "(the mixed preset, for comparison)", attention: "matmul", quant: "mixed" },
];
const only = arg("--variants")?.split(",");
const variants: Variant[] = (["io", "mlstate"] as const)
  .flatMap((state) => STEPS.map((s) => ({ ...s, state, name: `${state}:${s.attention}:${s.quant}` })))
  .filter((v) => !only || only.includes(v.name));

const graphHash = graphSourceHash();
const cache = benchCache("costplan-fused");

/** The baseline's graph builder: its src/ from git, beside a link to this package's node_modules. */
async function baselineBuilder(): Promise<ComponentBuilder> {
  const dir = join(cache, `converter-${baseline.slice(0, 10)}`);
  if (!existsSync(join(dir, "src"))) {
    const tmp = `${dir}.tmp`;
    mkdirSync(tmp, { recursive: true });
    execFileSync(
      "sh",
      ["-c", `git archive ${baseline} packages/converter/src | tar -x --strip-components=2 -C "${tmp}"`],
      {
        cwd: repo,
      },
    );
    symlinkSync(join(here, "..", "node_modules"), join(tmp, "node_modules"));
    writeFileSync(join(tmp, "package.json"), '{ "type": "module" }\n'); // its .ts files are ES modules
    renameSync(tmp, dir);
  }
  const graph = await import(pathToFileURL(join(dir, "src", "graph", "index.ts")).href);
  return graph.buildComponent as ComponentBuilder;
}

const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
await using ck = await Qwen35Checkpoint.open(synth.dir);

interface Row {
  readonly step: string;
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

async function cost(v: Variant, sbFile: string, headFile: string, embedFile: string): Promise<Row> {
  const [embed, sb, head] = await Promise.all([embedFile, sbFile, headFile].map((f) => readMlPackage(f)));
  const r = await costplan(
    {
      name: `0.8b-${v.name}`,
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
    step: v.step,
    variant: v.name,
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
/**
 * The variants share their weights: the converter's resume store, kept in memory, hands each
 * build the LUTs an earlier build of this run clustered (k-means is deterministic: the same bytes).
 */
const clustered = new Map<string, EncodedWeight>();
const store: EncodedWeightStore = {
  reuse: async (key) => clustered.get(key),
  finished: (key, _name, weight) => void clustered.set(key, weight),
};
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
  const rules = specRules(resolveQuantSpec({ quant: v.quant }));
  const head = rules.filter((r) => r.pattern === "lm_head").at(-1)?.quant;
  const body = rules.filter((r) => r.pattern === "body").at(-1)?.quant;
  const [options, build, tag]: [BuildOptions, ComponentBuilder | undefined, string] =
    v.attention === "baseline"
      ? // the earlier converter's options: one encoding for the whole body
        [
          { ctx, state: v.state, quant: { body, lmHead: head }, store } as unknown as BuildOptions,
          await baselineBuilder(),
          baseline.slice(0, 10),
        ]
      : [{ ctx, state: v.state, attention: v.attention, quant: { rules }, store }, undefined, graphHash];
  const dir = join(cache, `${v.name.replace(/[^a-z0-9]+/gi, "-")}-ctx${ctx}-${tag}-${shortHash(rules)}`);
  const sb = await ensurePackage(
    ck,
    join(dir, "sb_00-05.mlpackage"),
    { kind: "superblocks", first: 0, count: ck.config.superBlocks.length },
    options,
    rebuild,
    build,
  );
  const { embed, head: headFile } = await headFor(v.quant);
  rows.push(await cost(v, sb, headFile, embed));
  console.log(`${v.step} (${v.name}): ${rows.at(-1)?.tokPerSec.toFixed(1)} tok/s`);
}

console.log(`\ncostplan, fully fused synthetic 0.8B, ctx ${ctx}, M4 Pro (static model)\n`);
console.log(
  "| step | variant | runtime ops | CPU ops | interruptions | edge runs | super-blocks ms | tok/s |",
);
console.log("|---|---|---|---|---|---|---|---|");
for (const r of rows)
  console.log(
    `| ${r.step} | ${r.variant} | ${r.runtimeOps} | ${r.cpuOps} | ${r.interruptions} | ${r.edgeRuns} | ${r.superblockMs.toFixed(3)} | ${r.tokPerSec.toFixed(1)} |`,
  );
const file = join(here, "results", "costplan-fused.json");
mkdirSync(dirname(file), { recursive: true });
writeFileSync(
  `${file}.tmp`,
  `${JSON.stringify({ bench: "costplan-fused", date: new Date().toISOString(), ctx, chip: "m4-pro", graphHash, baseline, rows }, null, 2)}\n`,
);
renameSync(`${file}.tmp`, file);
console.log(`\nwrote ${file}`);
