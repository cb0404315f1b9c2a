/**
 * Decode speed and memory of the reference backend (the MIL interpreter) on the tiny fixture and
 * on conversions of the synthetic 0.8B checkpoint (real shapes; all super-blocks fused, ctx 256):
 * the converter's default encodings (LUT6 projections but GDN a/b, LUT6 head, fp16 embedding) and,
 * with `--quants default,lut4`, the preset lut4 (LUT4 body, LUT6 head: the default before the
 * quantization measurement). fp32 and fp16 modes, with the weights packed (the default: LUT
 * weights stay compressed, the embedding is read by row) and dense (every weight expanded to fp32
 * once), as peers measured in the same run. Each row runs in its own process so that its peak
 * RSS is its own. Median of the per-token decode times after a warm-up step, wall clock and CPU
 * time (all threads: the machine may be shared, and CPU time moves less with its load).
 *
 * `--baseline-checkout <dir>`: also runs bench/decode-baseline.ts inside that checkout (a built
 * older commit of this repository: its converter, its interpreter, its default conversion) in
 * the same run, and reports today's packed rows against it.
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/reference-decode.ts
 *     [--steps 8] [--skip-08b] [--quants default,lut4] [--weights packed,dense]
 *     [--precisions fp32,fp16] [--threads 2,1]   (ANEMLL_THREADS per row)
 *     [--baseline-checkout <dir>]
 *     [--dir <converted chain> --name <label>]   (e.g. a 9B conversion: --weights packed)
 *
 * Writes bench/results/reference-decode.json (or --out <file>).
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { availableParallelism, homedir, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import type { WeightMode } from "@anemll-qwen35/ir/mil";
import { argValue, benchMachine, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { measureDecode } from "./decode-baseline.js";

const here = dirname(fileURLToPath(import.meta.url));
const STEPS = Number(argValue("--steps", "8"));
const cache = join(process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "bench");

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

if (process.argv[2] === "--child") {
  const [dir, precision, weights] = process.argv.slice(3) as [string, "fp32" | "fp16", WeightMode];
  const r = await measureDecode(dir, precision, STEPS, { weights });
  console.log(`RESULT ${JSON.stringify(r)}`);
  process.exit(0);
}

async function ensureConverted(name: string, model: string, quant = "default"): Promise<string> {
  const out = join(cache, name);
  if (!existsSync(join(out, "model.json"))) {
    console.log(`converting ${name}…`);
    await convert({ model, out, ctx: 256, fuse: "all", quant, resume: true });
  }
  return out;
}

const targets: { name: string; dir: string }[] = [];
if (process.argv.includes("--dir")) {
  targets.push({ name: argValue("--name", "chain"), dir: resolve(argValue("--dir", "")) });
} else {
  targets.push({
    name: "tiny-tied (fixture)",
    dir: await ensureConverted("tiny-tied-default-ctx256", resolve(here, "../../../fixtures/tiny-tied")),
  });
  if (!process.argv.includes("--skip-08b")) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    for (const quant of argValue("--quants", "default").split(",")) {
      targets.push({
        name: quant === "default" ? "synthetic 0.8B" : `synthetic 0.8B (${quant})`,
        dir: await ensureConverted(`synthetic-0.8b-${quant}-ctx256`, synth.dir, quant),
      });
    }
  }
}
const precisions = argValue("--precisions", "fp32,fp16").split(",") as ("fp32" | "fp16")[];
const modes = argValue("--weights", "packed,dense").split(",") as WeightMode[];
const threadCounts = argValue("--threads", String(Math.min(8, availableParallelism())))
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
// the interpreter of an older checkout on its own default conversion, same run
interface BaselineRow {
  commit: string;
  precision: "fp32" | "fp16";
  loadMs: number;
  decodeMsMedian: number;
  decodeMs: number[];
  tokPerS: number;
  decodeCpuMsMedian: number;
  tokPerCpuS: number;
  peakRssBytes: number;
  loadAverage1m: number;
}
const baseline: BaselineRow[] = [];
const baselineRatios: object[] = [];
if (process.argv.includes("--baseline-checkout")) {
  const checkout = resolve(argValue("--baseline-checkout", ""));
  const git = spawnSync("git", ["-C", checkout, "rev-parse", "--short", "HEAD"], { encoding: "utf8" });
  const commit = git.stdout?.trim();
  if (git.status !== 0 || !commit) throw new Error(`--baseline-checkout ${checkout}: not a git checkout`);
  const pkg = join(checkout, "packages", "runtime-ane");
  copyFileSync(join(here, "decode-baseline.ts"), join(pkg, "bench", "decode-baseline.ts"));
  const chain = join(cache, `baseline-${commit}-synthetic-0.8b-ctx256`);
  for (const precision of precisions) {
    const child = spawnSync("npx", ["tsx", "bench/decode-baseline.ts", chain, precision, String(STEPS)], {
      cwd: pkg,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      maxBuffer: 1 << 24,
    });
    const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "));
    if (child.status !== 0 || !line) throw new Error(`baseline ${commit} ${precision}: the run failed`);
    const b: BaselineRow = { commit, ...JSON.parse(line.slice(7)), loadAverage1m: loadavg()[0] };
    baseline.push(b);
    console.log(
      `baseline ${commit} (its default conversion, synthetic 0.8B) ${precision}  decode ${b.decodeMsMedian.toFixed(1).padStart(8)} ms/token  ${b.tokPerS.toFixed(2).padStart(7)} tok/s  (CPU ${b.decodeCpuMsMedian.toFixed(0)} ms/token)  peak RSS ${(b.peakRssBytes / GB).toFixed(2)} GB`,
    );
    for (const p of rows) {
      if (p.weights !== "packed" || p.precision !== precision || !p.model.startsWith("synthetic 0.8B"))
        continue;
      const ratio = {
        model: p.model,
        precision,
        threads: p.threads,
        against: `baseline ${commit}`,
        tokPerSSpeedup: p.tokPerS / b.tokPerS,
        tokPerCpuSSpeedup: p.tokPerCpuS / b.tokPerCpuS,
        peakRssFraction: p.peakRssBytes / b.peakRssBytes,
      };
      baselineRatios.push(ratio);
      console.log(
        `${p.model.padEnd(22)} ${precision} ${p.threads}T packed vs baseline ${commit}: ${ratio.tokPerSSpeedup.toFixed(2)}× tok/s (${ratio.tokPerCpuSSpeedup.toFixed(2)}× per CPU-second), ${(100 * ratio.peakRssFraction).toFixed(0)}% of the peak RSS`,
      );
    }
  }
}
const outFile = resolve(argValue("--out", join(here, "results", "reference-decode.json")));
mkdirSync(dirname(outFile), { recursive: true });
const machine = benchMachine();
writeFileSync(
  `${outFile}.tmp`,
  `${JSON.stringify({ bench: "reference-decode", date: new Date().toISOString(), machine, steps: STEPS, rows, ratios, baseline, baselineRatios }, null, 2)}\n`,
);
renameSync(`${outFile}.tmp`, outFile);
console.log(`wrote ${outFile}`);
