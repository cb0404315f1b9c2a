/**
 * Decode speed and memory of the reference backend (the MIL interpreter) on the tiny fixture and
 * on a conversion of the synthetic 0.8B checkpoint (real shapes; LUT4 body, LUT6 head, fp16
 * embedding, all super-blocks fused, ctx 256), in fp32 and fp16 modes, with the weights packed
 * (the default: LUT weights stay compressed, the embedding is read by row) and, as the peer
 * measured in the same run, dense (every weight expanded to fp32 once: the interpreter before
 * packed weights). Each row runs in its own process so that its peak RSS is its own.
 * Median of the per-token decode times after a warm-up step.
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/reference-decode.ts
 *     [--steps 8] [--skip-08b] [--weights packed,dense] [--precisions fp32,fp16]
 *     [--dir <converted chain> --name <label>]   (e.g. a 9B conversion: --weights packed)
 *
 * Writes bench/results/reference-decode.json (or --out <file>).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { cpus, homedir, loadavg, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import type { WeightMode } from "@anemll-qwen35/ir/mil";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const STEPS = Number(arg("--steps", "8"));
const cache = join(process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "bench");
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const peakRss = () => process.resourceUsage().maxRSS * 1024;

interface Row {
  model: string;
  precision: "fp32" | "fp16";
  weights: WeightMode;
  loadMs: number;
  /** The first step (prefill of 4 tokens): reads and packs (or expands) every weight. */
  prefillFirstMs: number;
  decodeMsMedian: number;
  decodeMs: number[];
  tokPerS: number;
  /** Resident memory after the run, and the process's peak. */
  rssBytes: number;
  peakRssBytes: number;
}

/** One measurement, in this process (the child side). */
async function measure(dir: string, precision: "fp32" | "fp16", weights: WeightMode) {
  const loadStart = performance.now();
  // the chain alone: the synthetic checkpoint has no tokenizer, and token ids are all we feed
  const model = await ChainRunner.load(dir, { backend: referenceBackend({ precision, weights }) });
  const loadMs = performance.now() - loadStart;
  const firstStart = performance.now();
  await model.prefill([1, 2, 3, 4]);
  const prefillFirstMs = performance.now() - firstStart;
  const times: number[] = [];
  let token = 5;
  for (let i = 0; i <= STEPS; i++) {
    const t0 = performance.now();
    const out = await model.decode(token);
    if (i > 0) times.push(performance.now() - t0); // step 0 warms up
    token = "logits" in out ? out.logits.indexOf(Math.max(...out.logits.subarray(0, 1000))) : out.top1.id;
  }
  const rssBytes = process.memoryUsage().rss;
  model.dispose();
  const ms = median(times);
  return { loadMs, prefillFirstMs, decodeMsMedian: ms, decodeMs: times, tokPerS: 1000 / ms, rssBytes };
}

if (process.argv[2] === "--child") {
  const [dir, precision, weights] = process.argv.slice(3) as [string, "fp32" | "fp16", WeightMode];
  const r = await measure(dir, precision, weights);
  console.log(`RESULT ${JSON.stringify({ ...r, peakRssBytes: peakRss() })}`);
  process.exit(0);
}

async function ensureConverted(name: string, model: string): Promise<string> {
  const out = join(cache, name);
  if (!existsSync(join(out, "model.json"))) {
    console.log(`converting ${name}…`);
    await convert({ model, out, ctx: 256, fuse: "all", resume: true });
  }
  return out;
}

const targets: { name: string; dir: string }[] = [];
if (process.argv.includes("--dir")) {
  targets.push({ name: arg("--name", "chain"), dir: resolve(arg("--dir", "")) });
} else {
  targets.push({
    name: "tiny-tied (fixture)",
    dir: await ensureConverted("tiny-tied-lut4", resolve(here, "../../../fixtures/tiny-tied")),
  });
  if (!process.argv.includes("--skip-08b")) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    targets.push({
      name: "synthetic 0.8B",
      dir: await ensureConverted("synthetic-0.8b-lut4-lut6-ctx256", synth.dir),
    });
  }
}
const precisions = arg("--precisions", "fp32,fp16").split(",") as ("fp32" | "fp16")[];
const modes = arg("--weights", "packed,dense").split(",") as WeightMode[];
const GB = 1024 ** 3;
const rows: Row[] = [];
for (const t of targets) {
  for (const precision of precisions) {
    for (const weights of modes) {
      // a fresh process per row: its peak RSS is this row's alone
      const child = spawnSync(
        process.execPath,
        [
          ...process.execArgv,
          fileURLToPath(import.meta.url),
          "--child",
          t.dir,
          precision,
          weights,
          "--steps",
          String(STEPS),
        ],
        { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 24 },
      );
      const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "));
      if (child.status !== 0 || !line)
        throw new Error(`${t.name} ${precision} ${weights}: the run failed (exit ${child.status})`);
      const r: Row = { model: t.name, precision, weights, ...JSON.parse(line.slice(7)) };
      rows.push(r);
      console.log(
        `${t.name.padEnd(22)} ${precision} ${weights.padEnd(6)}  decode ${r.decodeMsMedian.toFixed(1).padStart(8)} ms/token  ${r.tokPerS.toFixed(2).padStart(7)} tok/s  peak RSS ${(r.peakRssBytes / GB).toFixed(2)} GB  (load ${(r.loadMs / 1000).toFixed(1)} s, first step ${(r.prefillFirstMs / 1000).toFixed(1)} s)`,
      );
    }
  }
}
// packed against dense, same model and precision, same run
const ratios = rows
  .filter((r) => r.weights === "packed")
  .flatMap((p) => {
    const d = rows.find((r) => r.weights === "dense" && r.model === p.model && r.precision === p.precision);
    if (!d) return [];
    const ratio = {
      model: p.model,
      precision: p.precision,
      tokPerSSpeedup: p.tokPerS / d.tokPerS,
      peakRssFraction: p.peakRssBytes / d.peakRssBytes,
    };
    console.log(
      `${p.model.padEnd(22)} ${p.precision} packed vs dense: ${ratio.tokPerSSpeedup.toFixed(2)}× tok/s, ${(100 * ratio.peakRssFraction).toFixed(0)}% of the peak RSS`,
    );
    return [ratio];
  });
const outFile = resolve(arg("--out", join(here, "results", "reference-decode.json")));
mkdirSync(dirname(outFile), { recursive: true });
const machine = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model,
  memoryBytes: totalmem(),
  node: process.version,
  loadAverage: loadavg(),
};
writeFileSync(
  `${outFile}.tmp`,
  `${JSON.stringify({ bench: "reference-decode", date: new Date().toISOString(), machine, steps: STEPS, rows, ratios }, null, 2)}\n`,
);
renameSync(`${outFile}.tmp`, outFile);
console.log(`wrote ${outFile}`);
