/**
 * Conversion of a synthetic checkpoint (real 0.8B/9B shapes, random bf16 weights), before and
 * after in one run: the converter of a baseline commit ("before", from git, run from source) and
 * this tree's ("after"), on the same checkpoint and machine, with the same encodings (LUT4 body,
 * LUT6 lm_head: the defaults when this benchmark was written). Each conversion runs in its own
 * process so its peak RSS is its own. Reports wall and CPU seconds, peak RSS, the worst
 * reconstruction error over all weights (MSE, relative, max abs vs the stored weights) and whether
 * the packages are byte-identical, then writes bench/results/convert-synthetic-<size>.json.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/convert-synthetic.ts [--size 0.8b|9b]
 *     [--ctx 256] [--before <git rev>] [--variants before,after] [--repeat N] [--body lut4] [--lmhead lut6]
 *
 * 9B is opt-in: ~19 GB of synthetic weights on disk, and "before" takes most of an hour there
 * (use --variants after).
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { cpus, freemem, loadavg, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type SyntheticSize, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};

/** main before the weight-pipeline work (exact-DP k-means on sorted elements, threads per tensor). */
const BASELINE_REV = "274770bca5dab4c050f53418ec49ef33e584a2b9";

interface ChildResult {
  seconds: number;
  cpuSeconds: number;
  peakRssBytes: number;
  components: { file: string; sha256: string }[];
  weights: { name: string; encoding: string; mse: number; relative: number; maxAbs: number }[];
}

if (process.argv.includes("--child")) {
  // one conversion with the converter at --converter, then its figures as JSON on stdout
  const { convert } = await import(pathToFileURL(arg("--converter", "")).href);
  const started = performance.now();
  const lut = (spec: string) => {
    const m = /^lut(\d)$/.exec(spec);
    return m ? { kind: "lut", bits: Number(m[1]) } : { kind: "none" };
  };
  // the baseline reports per package, this tree per weight: a line every 30 s at most
  let last = 0;
  const r = await convert({
    model: arg("--model", ""),
    out: arg("--out", ""),
    ctx: Number(arg("--ctx", "256")),
    fuse: "all",
    body: lut(arg("--body", "lut4")),
    lmHead: lut(arg("--lmhead", "lut6")),
    onProgress: (e: { fraction: number; stage: string; component?: string }) => {
      const now = performance.now();
      if (now - last < 30_000) return;
      last = now;
      const s = ((now - started) / 1000).toFixed(0);
      process.stderr.write(`progress: ${Math.floor(e.fraction * 100)}% ${e.component ?? e.stage} (${s} s)\n`);
    },
  });
  const seconds = (performance.now() - started) / 1000;
  const usage = process.resourceUsage();
  const result: ChildResult = {
    seconds,
    cpuSeconds: (usage.userCPUTime + usage.systemCPUTime) / 1e6,
    peakRssBytes: usage.maxRSS * 1024,
    components: r.manifest.components.map((c: { file: string; sha256: string }) => ({
      file: c.file,
      sha256: c.sha256,
    })),
    weights: r.weights.map((w: ChildResult["weights"][number]) => ({
      name: w.name,
      encoding: w.encoding,
      mse: w.mse,
      relative: w.relative,
      maxAbs: w.maxAbs,
    })),
  };
  console.log(JSON.stringify(result));
  process.exit(0);
}

/**
 * The converter sources at `rev` (ir + converter, from git) in a temp folder wired to this
 * repo's installed dependencies; returns its convert.ts (run with `--conditions source`).
 */
function checkoutBaseline(rev: string, into: string): string {
  const tar = execFileSync("git", ["-C", repo, "archive", rev, "packages/ir", "packages/converter"], {
    maxBuffer: 1 << 30,
  });
  execFileSync("tar", ["-x", "-C", into], { input: tar });
  symlinkSync(join(repo, "packages/ir/node_modules"), join(into, "packages/ir/node_modules"));
  mkdirSync(join(into, "packages/converter/node_modules/@anemll-qwen35"), { recursive: true });
  symlinkSync(join(into, "packages/ir"), join(into, "packages/converter/node_modules/@anemll-qwen35/ir"));
  return join(into, "packages/converter/src/convert.ts");
}

const size = arg("--size", "0.8b") as SyntheticSize;
const ctx = arg("--ctx", "256");
const body = arg("--body", "lut4");
const lmHead = arg("--lmhead", "lut6");
const before = arg("--before", BASELINE_REV);
const variants = arg("--variants", "before,after").split(",") as ("before" | "after")[];
const repeat = Number(arg("--repeat", "1"));

const synth = await writeSyntheticCheckpoint({ size });
const work = mkdtempSync(join(tmpdir(), "convert-bench-"));
const converters = {
  before: variants.includes("before") ? checkoutBaseline(before, work) : "",
  after: join(here, "../src/convert.ts"),
};

function convertOnce(variant: "before" | "after"): Promise<ChildResult> {
  const out = join(work, `out-${variant}`);
  const args = [
    ...(variant === "before" ? ["--conditions", "source"] : []),
    "--import",
    "tsx",
    fileURLToPath(import.meta.url),
    "--child",
    ...["--converter", converters[variant], "--model", synth.dir, "--out", out],
    ...["--ctx", ctx, "--body", body, "--lmhead", lmHead],
  ];
  return new Promise((ok, fail) => {
    const child = spawn(process.execPath, args, { cwd: join(here, ".."), stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => {
      stderr += d;
      for (const line of String(d).split("\n"))
        if (line.startsWith("progress:")) console.log(`  ${variant} ${line}`);
    });
    child.on("close", (code) => {
      rmSync(out, { recursive: true, force: true });
      if (code !== 0) fail(new Error(`${variant} conversion failed (exit ${code}):\n${stderr.slice(-4000)}`));
      else ok(JSON.parse(stdout.trim().split("\n").at(-1) as string) as ChildResult);
    });
  });
}

const worst = (r: ChildResult) => ({
  mse: Math.max(...r.weights.map((w) => w.mse)),
  relative: Math.max(...r.weights.map((w) => w.relative)),
  maxAbs: Math.max(...r.weights.map((w) => w.maxAbs)),
});
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const results: Record<string, ChildResult[]> = { before: [], after: [] };
try {
  // alternate the variants so that a change in the machine's load hits both alike
  for (let i = 0; i < repeat; i++) {
    for (const v of variants) {
      const r = await convertOnce(v);
      results[v].push(r);
      const w = worst(r);
      console.log(
        `${size} ${v.padEnd(6)} ${r.seconds.toFixed(1).padStart(7)} s (CPU ${r.cpuSeconds.toFixed(0)} s)   peak RSS ${(r.peakRssBytes / 2 ** 30).toFixed(2)} GiB   worst weight error: rel ${w.relative.toExponential(3)}, MSE ${w.mse.toExponential(3)}, max ${w.maxAbs.toExponential(3)}`,
      );
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

const summary = (rs: ChildResult[]) =>
  rs.length === 0
    ? undefined
    : {
        seconds: median(rs.map((r) => r.seconds)),
        cpuSeconds: median(rs.map((r) => r.cpuSeconds)),
        peakRssBytes: Math.max(...rs.map((r) => r.peakRssBytes)),
        worstError: worst(rs[0]),
        components: rs[0].components,
        runs: rs.map(({ seconds, cpuSeconds, peakRssBytes }) => ({ seconds, cpuSeconds, peakRssBytes })),
      };
const b = results.before[0];
const a = results.after[0];
let comparison: Record<string, unknown> | undefined;
if (a && b) {
  const byName = new Map(b.weights.map((w) => [w.name, w]));
  // per weight, after against before (reported errors are sums in different orders: allow 1e-9)
  const worse = a.weights.filter((w) => {
    const o = byName.get(w.name);
    return !o || w.mse > o.mse * (1 + 1e-9) || w.maxAbs > o.maxAbs * (1 + 1e-9);
  });
  const identical =
    a.components.length === b.components.length &&
    a.components.every((c, i) => c.file === b.components[i].file && c.sha256 === b.components[i].sha256);
  const sb = summary(results.before);
  const sa = summary(results.after);
  comparison = {
    speedup: (sb?.seconds ?? 0) / (sa?.seconds ?? 1),
    cpuSpeedup: (sb?.cpuSeconds ?? 0) / (sa?.cpuSeconds ?? 1),
    identicalPackages: identical,
    weightsCompared: a.weights.length,
    weightsWorse: worse.map((w) => w.name),
  };
  console.log(
    `after vs before: ${(comparison.speedup as number).toFixed(2)}× wall, ${(comparison.cpuSpeedup as number).toFixed(2)}× CPU; packages ${identical ? "byte-identical" : "DIFFER"}; weights with a larger error: ${worse.length} of ${a.weights.length}`,
  );
}
const result = {
  bench: "convert-synthetic",
  date: new Date().toISOString(),
  machine: {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    memoryBytes: totalmem(),
    freeBytes: freemem(),
    node: process.version,
    loadAverage: loadavg(),
  },
  size,
  ctx: Number(ctx),
  encodings: { body, lmHead },
  baseline: { rev: before },
  targets: size === "9b" ? { seconds: 900 } : { speedup: 3 },
  before: summary(results.before),
  after: summary(results.after),
  comparison,
};
mkdirSync(join(here, "results"), { recursive: true });
const file = join(here, "results", `convert-synthetic-${size}.json`);
if (existsSync(file) && !(result.before && result.after) && size !== "9b") {
  console.log(`(one variant only: not overwriting ${file})`);
} else {
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
}
