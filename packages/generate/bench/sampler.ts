/**
 * Sampler cost per token over Qwen3.5's 248,320-wide logits row, for the sampling settings people
 * use. Prints a table and writes bench/results/sampler.json (atomically).
 *
 * The logits are synthetic (the Sampler's cost depends on the vocabulary size and on how peaked the
 * row is, not on the model): "peaked" mimics an LM row (a few strong candidates, a long tail ~15
 * nats below), "flat" is the worst case for top-p (the nucleus spans tens of thousands of ids).
 *
 * Usage: pnpm --filter @anemll-qwen35/generate bench   (or: npx tsx bench/sampler.ts)
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Sampler, type SamplingOptions } from "../src/index.js";
import { Xoshiro128 } from "../src/sampler.js";

const VOCAB = 248_320;
const ITERS = 200;

function rows(): Record<string, Float32Array> {
  const g = new Xoshiro128(1234);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - g.next())) * Math.cos(2 * Math.PI * g.next());
  const peaked = Float32Array.from({ length: VOCAB }, () => gauss() * 2 - 15);
  for (let i = 0; i < 20; i++) peaked[Math.floor(g.next() * VOCAB)] = 5 - i * 0.4;
  const flat = Float32Array.from({ length: VOCAB }, () => (g.next() - 0.5) * 4);
  return { peaked, flat };
}

const configs: Array<[string, SamplingOptions]> = [
  ["greedy", { temperature: 0 }],
  ["temperature 0.8", { temperature: 0.8 }],
  ["qwen non-thinking (T0.7 k20 p0.8)", { temperature: 0.7, topK: 20, topP: 0.8 }],
  ["top-p 0.95 (no top-k)", { temperature: 1, topP: 0.95 }],
  ["min-p 0.05", { temperature: 1, minP: 0.05 }],
  ["T0.7 k20 p0.8 + presence 1.5", { temperature: 0.7, topK: 20, topP: 0.8, presencePenalty: 1.5 }],
];

const history = Array.from({ length: 64 }, (_, i) => (i * 3877) % VOCAB);
const results: Array<{ config: string; logits: string; msPerToken: number; options: SamplingOptions }> = [];
for (const [rowName, logits] of Object.entries(rows())) {
  for (const [name, options] of configs) {
    const s = new Sampler({ ...options, seed: 7 });
    for (let i = 0; i < 10; i++) s.sample(logits, history); // warm up the JIT
    const t = performance.now();
    for (let i = 0; i < ITERS; i++) s.sample(logits, history);
    const ms = (performance.now() - t) / ITERS;
    results.push({ config: name, logits: rowName, msPerToken: Number(ms.toFixed(4)), options });
    console.log(`${rowName.padEnd(7)} ${name.padEnd(34)} ${ms.toFixed(3).padStart(8)} ms/token`);
  }
}

const out = join(dirname(fileURLToPath(import.meta.url)), "results", "sampler.json");
await mkdir(dirname(out), { recursive: true });
const tmp = `${out}.${process.pid}.tmp`;
await writeFile(
  tmp,
  `${JSON.stringify(
    {
      bench: "sampler",
      vocab: VOCAB,
      iterations: ITERS,
      node: process.version,
      date: new Date().toISOString(),
      results,
    },
    null,
    2,
  )}\n`,
);
await rename(tmp, out);
console.log(`wrote ${out}`);
