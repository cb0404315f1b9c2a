/**
 * Writes a synthetic full-size Qwen3.5 checkpoint (random weights, real config, official VL layout).
 *
 *   pnpm --filter @anemll-qwen35/ir synth -- --size 0.8b|2b|4b|9b|35b-a3b [--out DIR]
 *        [--seed N] [--tokenizer DIR] [--max-shard-gb N] [--no-vision] [--no-mtp] [--force]
 *
 * Default output: $ANEMLL_QWEN35_CACHE/synthetic/<size> or ~/.cache/anemll-qwen35/synthetic/<size>.
 * Refuses to write inside this repository.
 */
import { resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import {
  defaultSyntheticDir,
  SYNTHETIC_SIZES,
  type SyntheticResult,
  type SyntheticSize,
  writeSyntheticCheckpoint,
} from "../src/synthetic.js";

const REPO_ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));

export async function synth(argv: string[]): Promise<SyntheticResult> {
  const { values } = parseArgs({
    args: argv.filter((a) => a !== "--"),
    options: {
      size: { type: "string" },
      out: { type: "string" },
      seed: { type: "string" },
      tokenizer: { type: "string" },
      "max-shard-gb": { type: "string" },
      "no-vision": { type: "boolean" },
      "no-mtp": { type: "boolean" },
      force: { type: "boolean" },
    },
  });
  const size = values.size as SyntheticSize | undefined;
  if (!size || !SYNTHETIC_SIZES.includes(size)) {
    throw new Error(`--size must be one of ${SYNTHETIC_SIZES.join(", ")} (got ${size ?? "nothing"})`);
  }
  const out = resolve(values.out ?? defaultSyntheticDir(size));
  if (out === REPO_ROOT || out.startsWith(REPO_ROOT + sep)) {
    throw new Error(
      `refusing to write a multi-GB checkpoint inside the repository (${out}); pick a folder outside ${REPO_ROOT}`,
    );
  }
  let lastPrint = 0;
  const result = await writeSyntheticCheckpoint({
    size,
    out,
    seed: values.seed === undefined ? 0 : Number(values.seed),
    tokenizerDir: values.tokenizer,
    maxShardBytes:
      values["max-shard-gb"] === undefined ? undefined : Number(values["max-shard-gb"]) * 2 ** 30,
    vision: !values["no-vision"],
    mtp: !values["no-mtp"],
    force: values.force,
    onProgress: (p) => {
      const now = performance.now();
      if (now - lastPrint < 1000 && p.fraction < 1) return;
      lastPrint = now;
      const gb = (p.bytes / 1e9).toFixed(2);
      process.stderr.write(
        `\r${p.stage} ${(p.fraction * 100).toFixed(1)}% (${gb} / ${(p.totalBytes / 1e9).toFixed(2)} GB)   `,
      );
    },
  });
  process.stderr.write("\n");
  if (result.skipped)
    console.log(`${result.dir}: identical synthetic ${size} checkpoint already present (skipped)`);
  else {
    const gbps = result.bytes / 1e9 / result.seconds;
    console.log(
      `${result.dir}: wrote ${result.tensors} tensors, ${(result.bytes / 1e9).toFixed(2)} GB in ${result.files.length} shard(s), ${result.seconds.toFixed(1)} s (${gbps.toFixed(2)} GB/s)`,
    );
  }
  return result;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  synth(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
