/**
 * Peak memory of the reference backend with the prompt's prefill counted: the synthetic 0.8B
 * default conversion (ctx 256, all super-blocks fused, as reference-decode.ts), each row in its own
 * process so that its peak RSS is its own:
 *   - a 4-token prompt (token by token: below T/8 of the prefill function) + decode steps: the
 *     condition of reference-decode.ts's "peak RSS" figure;
 *   - a --tokens-token prompt (default 198) through the prefill function (T tokens a call) + decode;
 *   - the same prompt token by token through the decode function + decode.
 * The peak is read after load, after the prefill and at the end (process.resourceUsage().maxRSS).
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/prefill-memory.ts
 *     [--tokens 198] [--steps 4] [--precision fp32] [--dir <converted chain>]
 *
 * Writes bench/results/prefill-memory.json (or --out <file>).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { homedir, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { argValue, benchMachine, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const TOKENS = Number(argValue("--tokens", "198"));
const STEPS = Number(argValue("--steps", "4"));
const precision = argValue("--precision", "fp32") as "fp32" | "fp16";
const cache = join(process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "bench");
const peak = () => process.resourceUsage().maxRSS * 1024;

if (process.argv[2] === "--child") {
  const [dir, tokens, batched] = [process.argv[3], Number(process.argv[4]), process.argv[5] === "batched"];
  const t0 = performance.now();
  const model = await ChainRunner.load(dir, {
    backend: referenceBackend({ precision }),
    prefillFunction: batched,
  });
  const loadMs = performance.now() - t0;
  const peakAfterLoad = peak();
  const t1 = performance.now();
  await model.prefill(Array.from({ length: tokens }, (_, i) => 1 + ((i * 37) % 1000)));
  const prefillMs = performance.now() - t1;
  const peakAfterPrefill = peak();
  for (let i = 0; i < STEPS; i++) await model.decode(5 + i);
  const r = {
    loadMs,
    prefillMs,
    prefillTokensPerCall: batched ? model.prefillTokens : 1,
    peakAfterLoad,
    peakAfterPrefill,
    peakRssBytes: peak(),
    rssBytes: process.memoryUsage().rss,
  };
  model.dispose();
  console.log(`RESULT ${JSON.stringify(r)}`);
  process.exit(0);
}

let dir = argValue("--dir");
if (!dir) {
  dir = join(cache, "synthetic-0.8b-default-ctx256"); // reference-decode.ts's conversion
  if (!existsSync(join(dir, "model.json"))) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    console.log("converting the synthetic 0.8B (default encodings, ctx 256, fused)…");
    await convert({ model: synth.dir, out: dir, ctx: 256, fuse: "all", quant: "default", resume: true });
  }
}
dir = resolve(dir);
const GB = 1024 ** 3;
const rows = [];
for (const [tokens, mode] of [
  [4, "token-by-token"],
  [TOKENS, "batched"],
  [TOKENS, "token-by-token"],
] as const) {
  const child = spawnSync(
    process.execPath,
    [...process.execArgv, fileURLToPath(import.meta.url), "--child", dir, String(tokens), mode],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
  );
  const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  if (child.status !== 0 || !line)
    throw new Error(`${tokens} tokens ${mode}: the run failed (exit ${child.status})`);
  const r = {
    promptTokens: tokens,
    mode,
    precision,
    ...JSON.parse(line.slice(7)),
    loadAverage1m: loadavg()[0],
  };
  rows.push(r);
  console.log(
    `${String(tokens).padStart(4)}-token prompt ${mode.padEnd(14)} peak RSS: after load ${(r.peakAfterLoad / GB).toFixed(2)} GB, after prefill ${(r.peakAfterPrefill / GB).toFixed(2)} GB, end ${(r.peakRssBytes / GB).toFixed(2)} GB  (prefill ${(r.prefillMs / 1000).toFixed(1)} s)`,
  );
}
const outFile = resolve(argValue("--out", join(here, "results", "prefill-memory.json")));
mkdirSync(dirname(outFile), { recursive: true });
writeFileSync(
  `${outFile}.tmp`,
  `${JSON.stringify({ bench: "prefill-memory", date: new Date().toISOString(), machine: benchMachine(), chain: dir, steps: STEPS, rows }, null, 2)}\n`,
);
renameSync(`${outFile}.tmp`, outFile);
console.log(`wrote ${outFile}`);
