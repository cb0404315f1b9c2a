/**
 * Decode speed and peak memory of the reference backend as the source tree this file sits in has
 * it, on that tree's default conversion of the synthetic 0.8B checkpoint (ctx 256, all
 * super-blocks fused). reference-decode.ts copies it into an older checkout
 * (`--baseline-checkout <dir>`) and runs it there, so that the interpreter before a change is
 * measured in the same run as after it; it only uses APIs both trees have.
 *
 *   tsx bench/decode-baseline.ts <chain folder> <fp32|fp16> [steps]
 *
 * Converts into <chain folder> when it holds no model.json, then prints one `RESULT {json}` line.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const [dir, precisionArg, stepsArg] = process.argv.slice(2);
if (!dir) throw new Error("usage: decode-baseline.ts <chain folder> <fp32|fp16> [steps]");
const precision = precisionArg === "fp16" ? "fp16" : "fp32";
const steps = Number(stepsArg ?? 8);
if (!existsSync(join(dir, "model.json"))) {
  const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
  await convert({ model: synth.dir, out: dir, ctx: 256, fuse: "all", resume: true });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const loadStart = performance.now();
const model = await ChainRunner.load(dir, { backend: referenceBackend({ precision }) });
const loadMs = performance.now() - loadStart;
await model.prefill([1, 2, 3, 4]);
const times: number[] = [];
const cpu: number[] = [];
let token = 5;
for (let i = 0; i <= steps; i++) {
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
const ms = median(times);
const cpuMs = median(cpu);
const result = {
  precision,
  loadMs,
  decodeMsMedian: ms,
  decodeMs: times,
  tokPerS: 1000 / ms,
  decodeCpuMsMedian: cpuMs,
  tokPerCpuS: 1000 / cpuMs,
  peakRssBytes: process.resourceUsage().maxRSS * 1024,
};
console.log(`RESULT ${JSON.stringify(result)}`);
process.exit(0);
