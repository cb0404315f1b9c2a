/**
 * Decode speed of the reference backend (the MIL interpreter): tok/s on the tiny fixture and on a
 * conversion of the synthetic 0.8B checkpoint (real shapes; LUT4 body, LUT6 head, all super-blocks
 * fused, ctx 256), in fp32 and fp16 modes. Median of the per-token decode times after a warm-up.
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/reference-decode.ts [--steps 8] [--skip-08b]
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus, homedir, loadavg, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const STEPS = Number(arg("--steps", "8"));
const cache = join(process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "bench");

async function ensureConverted(name: string, model: string): Promise<string> {
  const out = join(cache, name);
  if (!existsSync(join(out, "model.json"))) {
    console.log(`converting ${name}…`);
    await convert({ model, out, ctx: 256, fuse: "all", resume: true });
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(dir: string, precision: "fp32" | "fp16") {
  const loadStart = performance.now();
  // the chain alone: the synthetic checkpoint has no tokenizer, and token ids are all we feed
  const model = await ChainRunner.load(dir, { backend: referenceBackend({ precision }) });
  const loadMs = performance.now() - loadStart;
  const firstStart = performance.now();
  await model.prefill([1, 2, 3, 4]);
  const firstMs = performance.now() - firstStart; // includes one-time LUT expansion
  const times: number[] = [];
  let token = 5;
  for (let i = 0; i < STEPS; i++) {
    const t0 = performance.now();
    const out = await model.decode(token);
    times.push(performance.now() - t0);
    token = "logits" in out ? out.logits.indexOf(Math.max(...out.logits.subarray(0, 1000))) : out.top1.id;
  }
  model.dispose();
  const ms = median(times);
  return {
    precision,
    loadMs,
    prefillFirstMs: firstMs,
    decodeMsMedian: ms,
    decodeMs: times,
    tokPerS: 1000 / ms,
  };
}

const targets: { name: string; dir: string }[] = [
  {
    name: "tiny-tied (fixture)",
    dir: await ensureConverted("tiny-tied-lut4", resolve(here, "../../../fixtures/tiny-tied")),
  },
];
if (!process.argv.includes("--skip-08b")) {
  const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
  targets.push({
    name: "synthetic 0.8B",
    dir: await ensureConverted("synthetic-0.8b-lut4-lut6-ctx256", synth.dir),
  });
}
const rows = [];
for (const t of targets) {
  for (const precision of ["fp32", "fp16"] as const) {
    const r = await measure(t.dir, precision);
    rows.push({ model: t.name, ...r });
    console.log(
      `${t.name.padEnd(22)} ${precision}  decode ${r.decodeMsMedian.toFixed(1).padStart(8)} ms/token  ${r.tokPerS.toFixed(2).padStart(7)} tok/s  (load ${(r.loadMs / 1000).toFixed(1)} s, first step ${(r.prefillFirstMs / 1000).toFixed(1)} s)`,
    );
  }
}
mkdirSync(join(here, "results"), { recursive: true });
writeFileSync(
  join(here, "results", "reference-decode.json"),
  `${JSON.stringify({ bench: "reference-decode", date: new Date().toISOString(), machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model, memoryBytes: totalmem(), node: process.version, loadAverage: loadavg() }, steps: STEPS, rows }, null, 2)}\n`,
);
