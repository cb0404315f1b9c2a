/**
 * Decode speed and peak memory of the reference backend as the source tree this file sits in has
 * it. `measureDecode` is reference-decode.ts's measurement; run as a script, this file measures
 * that tree's default conversion of the synthetic 0.8B checkpoint (ctx 256, all super-blocks
 * fused). reference-decode.ts copies it into an older checkout (`--baseline-checkout <dir>`) and
 * runs it there, so that the interpreter before a change is measured in the same run as after it;
 * it only uses APIs both trees have.
 *
 *   tsx bench/decode-baseline.ts <chain folder> <fp32|fp16> [steps]
 *
 * Converts into <chain folder> when it holds no model.json, then prints one `RESULT {json}` line.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Loads the chain at `dir` on the reference backend, prefills 4 tokens, then times `steps`
 * decode steps after one warm-up step: wall clock and CPU time (every thread) per step.
 */
export async function measureDecode(
  dir: string,
  precision: "fp32" | "fp16",
  steps: number,
  backend: Omit<Parameters<typeof referenceBackend>[0] & object, "precision"> = {},
) {
  const loadStart = performance.now();
  // the chain alone: the synthetic checkpoint has no tokenizer, and token ids are all we feed
  const model = await ChainRunner.load(dir, { backend: referenceBackend({ ...backend, precision }) });
  const loadMs = performance.now() - loadStart;
  const firstStart = performance.now();
  await model.prefill([1, 2, 3, 4]);
  const prefillFirstMs = performance.now() - firstStart;
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
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const [dir, precisionArg, stepsArg] = process.argv.slice(2);
  if (!dir) throw new Error("usage: decode-baseline.ts <chain folder> <fp32|fp16> [steps]");
  if (!existsSync(join(dir, "model.json"))) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    await convert({ model: synth.dir, out: dir, ctx: 256, fuse: "all", resume: true });
  }
  const result = await measureDecode(dir, precisionArg === "fp16" ? "fp16" : "fp32", Number(stepsArg ?? 8));
  console.log(
    `RESULT ${JSON.stringify({ precision: precisionArg === "fp16" ? "fp16" : "fp32", ...result })}`,
  );
  process.exit(0);
}
