/**
 * The prefill function on the synthetic 0.8B checkpoint (real shapes, random weights), in one run:
 *   conversion: time and package size with the prefill function (--prefill-batch 64) and without
 *               (0), same checkpoint, same policy (the converter's default);
 *   prefill:    a prompt of --tokens tokens through the same chain folder on the same reference
 *               interpreter, batched (the prefill function, T a call) and token by token (the decode
 *               function), tok/s and their ratio.
 * Prints a table and writes bench/results/prefill-synthetic-0.8b.json.
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/prefill.ts [--tokens 64] [--precision fp32]
 *
 * Conversions are cached under $TMPDIR/anemll-prefill-bench (delete it to convert again; the
 * conversion figures are those of the run that converted, kept in the cache's timing.json).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { argValue, benchMachine, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const TOKENS = Number(argValue("--tokens", "64"));
const precision = argValue("--precision", "fp32") as "fp32" | "fp16";
const cache = join(tmpdir(), "anemll-prefill-bench");
mkdirSync(cache, { recursive: true });

function folderBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    n += e.isDirectory() ? folderBytes(p) : statSync(p).size;
  }
  return n;
}

interface Conversion {
  readonly prefillBatch: number;
  readonly seconds: number;
  readonly superBlockBytes: number;
  readonly totalBytes: number;
}

async function converted(model: string, prefillBatch: number): Promise<{ dir: string; c: Conversion }> {
  const dir = join(cache, `synthetic-0.8b-prefill${prefillBatch}`);
  const timing = join(cache, `synthetic-0.8b-prefill${prefillBatch}.timing.json`);
  if (!existsSync(join(dir, "model.json")) || !existsSync(timing)) {
    console.log(`converting the synthetic 0.8B with --prefill-batch ${prefillBatch} …`);
    const r = await convert({ model, out: dir, ctx: 256, fuse: "all", prefillBatch, force: true });
    writeFileSync(timing, JSON.stringify({ seconds: r.seconds }));
  }
  const { seconds } = JSON.parse(readFileSync(timing, "utf8")) as { seconds: number };
  const sb = readdirSync(dir).filter((f) => f.startsWith("sb_"));
  return {
    dir,
    c: {
      prefillBatch,
      seconds,
      superBlockBytes: sb.reduce((n, f) => n + folderBytes(join(dir, f)), 0),
      totalBytes: folderBytes(dir),
    },
  };
}

const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
const decodeOnly = await converted(synth.dir, 0);
const batched = await converted(synth.dir, 64);

// the same prompt, the same folder, the same interpreter: batched, then token by token
const prompt = Array.from({ length: TOKENS }, (_, i) => (i * 7919 + 13) % 240_000);
async function prefillRun(prefillFunction: boolean) {
  const backend = referenceBackend({ precision });
  const model = await ChainRunner.load(batched.dir, { backend, prefillFunction });
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const out = await model.prefill(prompt);
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const predictions = backend.transfers().predictions;
  model.dispose();
  const logits = "logits" in out ? out.logits : new Float32Array(0);
  return {
    prefillFunction,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    tokensPerSecond: TOKENS / seconds,
    predictions,
    logits,
  };
}
const runs = [await prefillRun(true), await prefillRun(false)];
const [fast, slow] = runs;
let maxDiff = 0;
for (let i = 0; i < fast.logits.length; i++)
  maxDiff = Math.max(maxDiff, Math.abs(fast.logits[i] - slow.logits[i]));

const result = {
  bench: "prefill-synthetic",
  date: new Date().toISOString(),
  machine: benchMachine(),
  model: "synthetic 0.8B (real shapes, random bf16 weights), ctx 256, the converter's default quantization",
  conversion: {
    decodeOnly: decodeOnly.c,
    withPrefill: batched.c,
    sizeRatio: batched.c.superBlockBytes / decodeOnly.c.superBlockBytes,
    timeRatio: batched.c.seconds / decodeOnly.c.seconds,
  },
  prefill: {
    interpreter: `reference backend, ${precision}, packed weights`,
    tokens: TOKENS,
    batch: 64,
    batched: { ...fast, logits: undefined },
    tokenByToken: { ...slow, logits: undefined },
    speedup: slow.seconds / fast.seconds,
    lastLogitsMaxAbsDiff: maxDiff,
  },
};
const out = join(here, "results", "prefill-synthetic-0.8b.json");
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;
console.log(`| | decode only | with prefill (T 64) | ratio |`);
console.log(`|---|---|---|---|`);
console.log(
  `| super-block packages | ${mb(decodeOnly.c.superBlockBytes)} | ${mb(batched.c.superBlockBytes)} | ${result.conversion.sizeRatio.toFixed(4)}× |`,
);
console.log(
  `| conversion | ${decodeOnly.c.seconds.toFixed(0)} s | ${batched.c.seconds.toFixed(0)} s | ${result.conversion.timeRatio.toFixed(2)}× |`,
);
console.log(
  `prefill of ${TOKENS} tokens (${precision}): batched ${fast.tokensPerSecond.toFixed(2)} tok/s (${fast.predictions} predictions), ` +
    `token by token ${slow.tokensPerSecond.toFixed(2)} tok/s (${slow.predictions}) — ${result.prefill.speedup.toFixed(2)}× · last logits max |Δ| ${maxDiff.toExponential(2)}`,
);
console.log(`wrote ${out}`);
