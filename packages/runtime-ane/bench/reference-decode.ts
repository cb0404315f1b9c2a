/**
 * Decode speed and memory of the reference backend (the MIL interpreter) on the tiny fixture and
 * on a conversion of the synthetic 0.8B checkpoint (real shapes; LUT4 body, LUT6 head, fp16
 * embedding, all super-blocks fused, ctx 256), in fp32 and fp16 modes, with the weights packed
 * (the default: LUT weights stay compressed, the embedding is read by row) and, as the peer
 * measured in the same run, dense (every weight expanded to fp32 once: the interpreter before
 * packed weights). Each row runs in its own process so that its peak RSS is its own.
 * Median of the per-token decode times after a warm-up step, wall clock and CPU time (all threads:
 * the machine is shared, and CPU time moves less with its load than wall time).
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/reference-decode.ts
 *     [--steps 8] [--skip-08b] [--weights packed,dense] [--precisions fp32,fp16]
 *     [--threads 2,1]   (ANEMLL_THREADS per row: matrix products split over worker threads or not)
 *     [--dir <converted chain> --name <label>]   (e.g. a 9B conversion: --weights packed)
 *
 * Writes bench/results/reference-decode.json (or --out <file>).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { availableParallelism, homedir, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import type { WeightMode } from "@anemll-qwen35/ir/mil";
import { benchMachine, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
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
  /** ANEMLL_THREADS of the run: threads sharing the matrix products. */
  threads: number;
  loadMs: number;
  /** The first step (prefill of 4 tokens): reads and packs (or expands) every weight. */
  prefillFirstMs: number;
  decodeMsMedian: number;
  decodeMs: number[];
  tokPerS: number;
  /** CPU time of the process (every thread) per decode step: median, and tokens per CPU-second. */
  decodeCpuMsMedian: number;
  tokPerCpuS: number;
  /** Resident memory after the run, and the process's peak. */
  rssBytes: number;
  peakRssBytes: number;
  /** The machine's 1-minute load average when the row finished (it is shared). */
  loadAverage1m: number;
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
  const cpu: number[] = [];
  let token = 5;
  for (let i = 0; i <= STEPS; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const out = await model.decode(token);
    const c = process.cpuUsage(c0);
    if (i > 0) {
      // step 0 warms up
      times.push(performance.now() - t0);
      cpu.push((c.user + c.system) / 1000);
    }
    token = "logits" in out ? out.logits.indexOf(Math.max(...out.logits.subarray(0, 1000))) : out.top1.id;
  }
  const rssBytes = process.memoryUsage().rss;
  model.dispose();
  const ms = median(times);
  const cpuMs = median(cpu);
  return {
    loadMs,
    prefillFirstMs,
    decodeMsMedian: ms,
    decodeMs: times,
    tokPerS: 1000 / ms,
    decodeCpuMsMedian: cpuMs,
    tokPerCpuS: 1000 / cpuMs,
    rssBytes,
  };
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
    dir: await ensureConverted("tiny-tied-default-ctx256", resolve(here, "../../../fixtures/tiny-tied")),
  });
  if (!process.argv.includes("--skip-08b")) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    targets.push({
      name: "synthetic 0.8B",
      dir: await ensureConverted("synthetic-0.8b-default-ctx256", synth.dir),
    });
  }
}
const precisions = arg("--precisions", "fp32,fp16").split(",") as ("fp32" | "fp16")[];
const modes = arg("--weights", "packed,dense").split(",") as WeightMode[];
const threadCounts = arg("--threads", String(Math.min(8, availableParallelism())))
  .split(",")
  .map(Number);
const GB = 1024 ** 3;
const rows: Row[] = [];
for (const t of targets) {
  for (const precision of precisions) {
    for (const [weights, threads] of modes.flatMap((w) => threadCounts.map((n) => [w, n] as const))) {
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
        {
          encoding: "utf8",
          stdio: ["ignore", "pipe", "inherit"],
          maxBuffer: 1 << 24,
          env: { ...process.env, ANEMLL_THREADS: String(threads) },
        },
      );
      const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "));
      if (child.status !== 0 || !line)
        throw new Error(`${t.name} ${precision} ${weights}: the run failed (exit ${child.status})`);
      const r: Row = {
        model: t.name,
        precision,
        weights,
        threads,
        ...JSON.parse(line.slice(7)),
        loadAverage1m: loadavg()[0],
      };
      rows.push(r);
      console.log(
        `${t.name.padEnd(22)} ${precision} ${weights.padEnd(6)} ${threads}T  decode ${r.decodeMsMedian.toFixed(1).padStart(8)} ms/token  ${r.tokPerS.toFixed(2).padStart(7)} tok/s  (CPU ${r.decodeCpuMsMedian.toFixed(0)} ms/token)  peak RSS ${(r.peakRssBytes / GB).toFixed(2)} GB  (load ${(r.loadMs / 1000).toFixed(1)} s, first step ${(r.prefillFirstMs / 1000).toFixed(1)} s)`,
      );
    }
  }
}
// packed against dense, same model and precision, same run
const ratios = rows
  .filter((r) => r.weights === "packed")
  .flatMap((p) => {
    const d = rows.find(
      (r) =>
        r.weights === "dense" &&
        r.model === p.model &&
        r.precision === p.precision &&
        r.threads === p.threads,
    );
    if (!d) return [];
    const ratio = {
      model: p.model,
      precision: p.precision,
      threads: p.threads,
      tokPerSSpeedup: p.tokPerS / d.tokPerS,
      tokPerCpuSSpeedup: p.tokPerCpuS / d.tokPerCpuS,
      peakRssFraction: p.peakRssBytes / d.peakRssBytes,
    };
    console.log(
      `${p.model.padEnd(22)} ${p.precision} ${p.threads}T packed vs dense: ${ratio.tokPerSSpeedup.toFixed(2)}× tok/s (${ratio.tokPerCpuSSpeedup.toFixed(2)}× per CPU-second), ${(100 * ratio.peakRssFraction).toFixed(0)}% of the peak RSS`,
    );
    return [ratio];
  });
const outFile = resolve(arg("--out", join(here, "results", "reference-decode.json")));
mkdirSync(dirname(outFile), { recursive: true });
const machine = benchMachine();
writeFileSync(
  `${outFile}.tmp`,
  `${JSON.stringify({ bench: "reference-decode", date: new Date().toISOString(), machine, steps: STEPS, rows, ratios }, null, 2)}\n`,
);
renameSync(`${outFile}.tmp`, outFile);
console.log(`wrote ${outFile}`);
