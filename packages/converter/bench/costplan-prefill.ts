/**
 * costplan's projection of the prefill function (M4 Pro, static model, fitted runtime figures)
 * for Qwen3.5-0.8B and 9B shapes (synthetic checkpoints: costs do not depend on the weights'
 * values), and the comparison of the two Gated DeltaNet forms (chunked WY vs unrolled scan) at
 * T = 8 and 64 that picks the converter's default (notes/prefill-gdn-forms.md).
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/costplan-prefill.ts [--sizes 0.8b,9b] [--ctx 1024]
 *
 * One package per size holds super-block 0 with the converter's default quantization and several
 * functions over the same weights (decode; prefill in each form and T), written once into
 * ~/.cache/anemll-qwen35/bench/costplan-prefill/ (keyed by a hash of the graph sources). Every
 * super-block of a Qwen3.5 model has the same shapes, so the model's super-block time is the
 * per-super-block time × the super-block count (one prediction per package adds the fitted
 * dispatch once per package: the converter's 0.8B plan fuses all 6 super-blocks, 9B's plan makes
 * 4 packages), plus the lm_head once per prompt. TTFT of a P-token prompt = ⌈P/T⌉ prefill calls
 * (the last one masked) + one lm_head; token by token = P decode steps + one lm_head.
 * Writes bench/results/costplan-prefill.json.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { costplan, FITTED_RUNTIME } from "@anemll-qwen35/costplan";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { MilProgramBuilder, type MilVar, MlPackageWriter, readMlPackage } from "@anemll-qwen35/ir/mil";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import {
  buildSuperblocks,
  DEFAULT_WY_CHUNK,
  type GdnPrefillForm,
  GraphWeights,
  type PrefillShape,
} from "../src/graph/index.js";
import { DEFAULT_BUDGET_BYTES, resolveBuildOptions, resolveQuantSpec } from "../src/options.js";
import { planComponents } from "../src/plan.js";
import { planQuant } from "../src/quant/plan.js";
import { specRules } from "../src/quant/policy.js";
import { benchCache, ensurePackage, graphSourceHash } from "./packages.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const ctx = Number(arg("--ctx", "1024"));
const sizes = arg("--sizes", "0.8b,9b").split(",") as ("0.8b" | "9b")[];
const PROMPT = 1000;
const cache = benchCache("costplan-prefill");
const hash = graphSourceHash();

/** Figures quoted by the issue from the anchors (see the issue text for their sources). */
const ANCHORS = [
  {
    source: "reference study (decode rate; prefill = one decode step per token today)",
    model: "0.8B",
    decodeTokPerSec: 66.7,
  },
  { source: "reference study", model: "9B", decodeTokPerSec: 11.4 },
  {
    source: "Qwen3.5-4B ANE port, chunked gated-delta prefill",
    model: "4B",
    prompt: 256,
    batchedMs: 1685,
    sequentialMs: 19801,
  },
  { source: "ANEMLL", note: "converts a prefill function of 64 tokens a call" },
];

const functions: { name: string; shape?: PrefillShape }[] = [
  { name: "decode" },
  ...(["chunked", "scan"] as GdnPrefillForm[]).flatMap((gdnForm) =>
    [64, 8].map((tokens) => ({
      name: `prefill_${gdnForm}_${tokens}`,
      shape: { tokens, gdnForm, wyChunk: DEFAULT_WY_CHUNK },
    })),
  ),
];

const rows = [];
for (const size of sizes) {
  const synth = await writeSyntheticCheckpoint({ size });
  await using ck = await Qwen35Checkpoint.open(synth.dir);
  const rules = specRules(resolveQuantSpec({}));
  const file = join(cache, `${size}-sb0-ctx${ctx}-${hash}`, "sb_00.mlpackage");
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    const w = await MlPackageWriter.create(file);
    const program = new MilProgramBuilder({ blobSink: w.blobs });
    const shared = new Map<string, MilVar>();
    const spec = { kind: "superblocks", first: 0, count: 1 } as const;
    const o = resolveBuildOptions(ck.config, spec, { ctx, quant: { rules } });
    for (const f of functions) {
      const gw = new GraphWeights(program.function(f.name), ck, {
        dtype: "fp16",
        quant: o.quant,
        shared,
        workers: 2,
      });
      await buildSuperblocks(gw, 0, 1, o, f.shape);
      console.log(`  ${size}: built ${f.name}`);
    }
    await w.finish(program.model({ defaultFunctionName: "decode" }));
  }
  const headFile = await ensurePackage(
    ck,
    join(cache, `${size}-head-ctx${ctx}`, "lm_head.mlpackage"),
    { kind: "lm_head" },
    { ctx, quant: { rules } },
  );
  const report = await costplan(
    {
      name: size,
      components: [
        { name: "sb_00", model: await readMlPackage(file) },
        { name: "lm_head", model: await readMlPackage(headFile) },
      ],
    },
    { chip: "m4-pro", native: "off" },
  );
  const [sb, head] = report.packages;
  const dispatch = sb.prediction.dispatchMs;
  const ioMsPerMB = FITTED_RUNTIME.ioMsPerMB?.value ?? 0;
  const superBlocks = ck.config.superBlocks.length;
  const packages = planComponents(ck.config, {
    fuse: "all",
    budgetBytes: DEFAULT_BUDGET_BYTES,
    quant: planQuant(ck.config, { rules }),
  }).filter((c) => c.kind === "superblocks").length;
  const headMs = head.prediction.estimatedMs;
  const callMs = (name: string) => {
    const f = sb.functions.find((x) => x.name === name);
    if (!f) throw new Error(`no function ${name}`);
    const io = ((f.io?.inputBytes ?? 0) + (f.io?.outputBytes ?? 0)) / 1e6;
    // one call of the whole model's super-blocks: per-super-block op time × count, dispatch and I/O per package
    return {
      f,
      ms: f.summary.estimatedMs * superBlocks + packages * (dispatch + io * ioMsPerMB),
    };
  };
  const decode = callMs("decode");
  const tokenByTokenTtft = PROMPT * decode.ms + headMs;
  for (const fn of functions) {
    const { f, ms } = callMs(fn.name);
    const T = fn.shape?.tokens ?? 1;
    const calls = Math.ceil(PROMPT / T);
    const ttft = fn.shape ? calls * ms + headMs : tokenByTokenTtft;
    rows.push({
      size,
      function: fn.name,
      tokens: T,
      gdn: fn.shape?.gdnForm ?? "decode",
      runtimeOps: f.summary.runtimeOps,
      cpuOps: f.summary.cpu,
      gpuOps: f.summary.gpu,
      interruptions: f.interruptions.count,
      matmuls: f.ops.filter((o) => o.type === "matmul").length,
      perSuperBlockMs: f.summary.estimatedMs,
      callMs: ms,
      prefillTokPerSec: (T * 1000) / ms,
      ttft1000Ms: ttft,
      ttftSpeedupVsTokenByToken: tokenByTokenTtft / ttft,
    });
  }
}

console.log(`\ncostplan, M4 Pro (static model, fitted runtime), ctx ${ctx}, ${PROMPT}-token prompt\n`);
console.log(
  "| model | function | runtime ops | CPU ops | interruptions | call ms (model) | prefill tok/s | TTFT 1000 | vs token by token |",
);
console.log("|---|---|---|---|---|---|---|---|---|");
for (const r of rows)
  console.log(
    `| ${r.size} | ${r.function} | ${r.runtimeOps} | ${r.cpuOps} | ${r.interruptions} | ${r.callMs.toFixed(2)} | ${r.prefillTokPerSec.toFixed(0)} | ${(r.ttft1000Ms / 1000).toFixed(2)} s | ${r.ttftSpeedupVsTokenByToken.toFixed(1)}× |`,
  );
const out = join(here, "results", "costplan-prefill.json");
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify({ bench: "costplan-prefill", date: new Date().toISOString(), chip: "m4-pro", ctx, prompt: PROMPT, graphHash: hash, anchors: ANCHORS, rows }, null, 2)}\n`,
);
console.log(`wrote ${out}`);
