/**
 * Conversion of the synthetic 0.8B checkpoint (real shapes, random weights): wall time and peak RSS
 * for an fp16 conversion and for LUT4 body + LUT6 head (targets: < 5 min and < 6 GB on 2 cores).
 * Each conversion runs in its own process so its peak RSS is its own.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/convert-synthetic.ts [--size 0.8b|9b] [--ctx 256]
 * 9B is opt-in (--size 9b): about 19 GB of synthetic weights on disk.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, freemem, loadavg, tmpdir, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type SyntheticSize, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};

if (process.argv.includes("--child")) {
  // child: one conversion, then report wall time and peak RSS on stdout
  const { convert } = await import("../src/convert.js");
  const { parseWeightQuant } = await import("../src/graph/quant.js");
  const started = performance.now();
  const r = await convert({
    model: arg("--model", ""),
    out: arg("--out", ""),
    ctx: Number(arg("--ctx", "256")),
    fuse: "all",
    body: parseWeightQuant(arg("--body", "lut4")),
    lmHead: parseWeightQuant(arg("--lmhead", "lut6")),
  });
  const seconds = (performance.now() - started) / 1000;
  const peakRssBytes = process.resourceUsage().maxRSS * 1024;
  const worst = r.weights.reduce((m, w) => Math.max(m, w.relative), 0);
  console.log(
    JSON.stringify({
      seconds,
      peakRssBytes,
      components: r.manifest.components.map((c) => c.file),
      worstRelative: worst,
    }),
  );
  process.exit(0);
}

const size = arg("--size", "0.8b") as SyntheticSize;
const ctx = arg("--ctx", "256");
const synth = await writeSyntheticCheckpoint({ size });
const configs = [
  { name: "fp16", body: "none", lmhead: "none" },
  { name: "lut4-body+lut6-head", body: "lut4", lmhead: "lut6" },
];
const runs = [];
for (const c of configs) {
  const out = join(mkdtempSync(join(tmpdir(), "convert-bench-")), "model");
  const child = spawnSync(
    process.execPath,
    [
      "--import",
      "tsx",
      fileURLToPath(import.meta.url),
      "--child",
      "--model",
      synth.dir,
      "--out",
      out,
      "--ctx",
      ctx,
      "--body",
      c.body,
      "--lmhead",
      c.lmhead,
    ],
    { encoding: "utf8", maxBuffer: 1 << 24, cwd: join(here, "..") },
  );
  rmSync(dirname(out), { recursive: true, force: true });
  if (child.status !== 0) throw new Error(`${c.name} conversion failed:\n${child.stderr}`);
  const r = JSON.parse(child.stdout.trim().split("\n").at(-1) as string);
  runs.push({ config: c.name, ...r });
  console.log(
    `${size} ${c.name.padEnd(20)} ${r.seconds.toFixed(1).padStart(7)} s   peak RSS ${(r.peakRssBytes / 2 ** 30).toFixed(2)} GiB   worst rel. weight error ${r.worstRelative.toExponential(2)}`,
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
  targets: { seconds: 300, peakRssBytes: 6 * 2 ** 30 },
  runs,
};
mkdirSync(join(here, "results"), { recursive: true });
writeFileSync(
  join(here, "results", `convert-synthetic-${size}.json`),
  `${JSON.stringify(result, null, 2)}\n`,
);
