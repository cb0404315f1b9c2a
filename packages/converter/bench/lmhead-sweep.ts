/**
 * The auto-tuned lm_head split at a real size: the sweep `convert --lmhead-rows auto` runs, on a
 * published config (no weights needed: the candidates are built over zero weights), with its
 * choice, every candidate's time and how long the sweep took; writes
 * bench/results/lmhead-sweep-<size>-<lut>.json. On a Mac with the Core ML addon the candidates are
 * timed through Core ML, elsewhere ranked by costplan's estimate.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/lmhead-sweep.ts [--size 0.8b|9b] [--lmhead lut6]
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { publishedConfigJson, type SyntheticSize } from "@anemll-qwen35/testkit";
import { parseWeightQuant } from "../src/index.js";
import { tuneLmHeadSplit } from "../src/lmhead-split.js";

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const size = arg("--size", "0.8b") as SyntheticSize;
const lut = arg("--lmhead", "lut6");
const json = publishedConfigJson(size);
const config = parseQwen35Config(json, `published ${size} config`);
const loadStart = loadavg();
const t0 = performance.now();
const split = await tuneLmHeadSplit(config, Boolean(json.tie_word_embeddings), {
  build: {
    ctx: 256,
    dtype: "fp16",
    quant: { rules: [{ pattern: "lm_head", quant: parseWeightQuant(lut, "lm-head") }] },
    workers: 1,
  },
  log: (l) => console.log(l),
});
const seconds = (performance.now() - t0) / 1000;
const out = join(dirname(fileURLToPath(import.meta.url)), "results", `lmhead-sweep-${size}-${lut}.json`);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify(
    {
      benchmark: "lmhead-sweep",
      command: `pnpm --filter @anemll-qwen35/converter exec tsx bench/lmhead-sweep.ts --size ${size} --lmhead ${lut}`,
      date: new Date().toISOString(),
      machine: {
        platform: process.platform,
        cpu: cpus()[0]?.model,
        cores: cpus().length,
        loadAverage: loadStart,
        loadAverageEnd: loadavg(),
      },
      size,
      vocab: config.vocabSize,
      hidden: config.hiddenSize,
      lmHead: lut,
      seconds,
      split,
    },
    null,
    2,
  )}\n`,
);
console.log(
  `${split.pieces} pieces (≤ ${split.maxRows} rows) by ${split.chosenBy} in ${seconds.toFixed(1)} s → ${out}`,
);
