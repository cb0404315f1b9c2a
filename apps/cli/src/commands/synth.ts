import { readFile } from "node:fs/promises";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import {
  planSyntheticCheckpoint,
  SYNTHETIC_SIZES,
  type SyntheticOptions,
  type SyntheticPlan,
  type SyntheticSize,
  scaledConfigJson,
  writeSyntheticCheckpoint,
} from "@anemll-qwen35/ir/checkpoint";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { bytes, choice, int, UsageError } from "../options.js";
import { interruptible, progressReporter } from "../progress.js";

const billions = (n: number) => `${(n / 1e9).toFixed(2)} B`;
const gb = (n: number) => `${(n / 1e9).toFixed(2)} GB`;

/** What the checkpoint is, in a few lines: its parameters, bytes and layers, and that it is a stand-in. */
export function describePlan(plan: SyntheticPlan, name: string): string[] {
  const c = plan.config;
  const { text, mtp, vision, total } = plan.parameters;
  const attention = c.layerTypes.filter((t) => t === "full_attention").length;
  const ffn = c.moe
    ? `MoE ${c.moe.numExperts} experts × ${c.moe.moeIntermediateSize}, top-${c.moe.numExpertsPerTok}, shared ${c.moe.sharedExpertIntermediateSize}`
    : `dense FFN ${c.intermediateSize}`;
  const parts = [`text model ${billions(text)}`];
  if (mtp) parts.push(`MTP head ${billions(mtp)}`);
  if (vision) parts.push(`vision tower ${billions(vision)} (shape-plausible only)`);
  return [
    `synthetic ${name}: random weights with the real shapes (a stand-in for speed, memory and conversion work; its output is noise)`,
    `  ${billions(total)} parameters: ${parts.join(", ")}`,
    `  ${gb(plan.bytes)} in ${plan.tensors.length} tensors (BF16; F32 for A_log and the GDN norms)`,
    `  ${c.numHiddenLayers} layers (${c.numHiddenLayers - attention} Gated DeltaNet, ${attention} full attention) · hidden ${c.hiddenSize} · ${ffn} · vocab ${c.vocabSize} · lm_head ${c.tieWordEmbeddings ? "tied" : "untied"}`,
  ];
}

async function readConfig(file: string): Promise<Record<string, unknown>> {
  try {
    return JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    throw new InvalidArgumentError(`--config ${file}: cannot read a config.json (${(err as Error).message})`);
  }
}

export function registerSynth(program: Command, ctx: Context): void {
  program
    .command("synth")
    .description(
      "write a synthetic Qwen3.5 checkpoint: a published size's config and real tensor shapes with random weights (official VL layout, sharded safetensors)",
    )
    .option(
      "--size <size>",
      `published size: ${SYNTHETIC_SIZES.join(", ")}`,
      choice("--size", SYNTHETIC_SIZES),
    )
    .option("--config <file>", "a config.json of its own instead of a published size (e.g. a tiny model)")
    .requiredOption(
      "-o, --out <dir>",
      "output folder: new or empty (written atomically: temp folder, then rename)",
    )
    .option("--force", "replace the output folder even when it holds other files")
    .option(
      "--layers <n>",
      "keep only the first n layers (a multiple of 4), every other dimension as published",
      int("--layers", 4),
    )
    .option("--experts <n>", "MoE sizes: keep n experts (at least top-k)", int("--experts", 1))
    .option(
      "--seed <n>",
      "random seed (each tensor's values depend on it and its name only)",
      int("--seed", 0),
      0,
    )
    .option("--tokenizer <dir>", "copy the tokenizer files found in this folder")
    .option("--max-shard <size>", "largest shard file (default 1 GiB)", bytes("--max-shard"))
    .option("--no-vision", "leave out the vision tower")
    .option("--no-mtp", "leave out the MTP head")
    .option("--dry-run", "say what would be written, and write nothing")
    .action(async (o) => {
      const out = ctx.output();
      if (Boolean(o.size) === Boolean(o.config)) throw new UsageError("pass one of --size or --config");
      if ((o.layers !== undefined || o.experts !== undefined) && !o.size)
        throw new UsageError("--layers and --experts scale a published --size");
      const size = o.size as SyntheticSize | undefined;
      const config = o.config
        ? await readConfig(o.config)
        : o.layers !== undefined || o.experts !== undefined
          ? scaledConfigJson(size!, { layers: o.layers, experts: o.experts })
          : undefined;
      const options: SyntheticOptions = {
        size: config ? undefined : size,
        config,
        out: o.out,
        seed: o.seed,
        tokenizerDir: o.tokenizer,
        maxShardBytes: o.maxShard,
        vision: o.vision,
        mtp: o.mtp,
        replace: "empty",
        force: Boolean(o.force),
      };
      const plan = planSyntheticCheckpoint(options);
      const name = o.config
        ? o.config
        : `Qwen3.5-${size!.toUpperCase()}${config ? ` (${plan.config.numHiddenLayers} layers)` : ""}`;
      for (const line of describePlan(plan, name)) out.line(line);
      const summary = {
        name,
        parameters: plan.parameters,
        bytes: plan.bytes,
        tensors: plan.tensors.length,
        layers: plan.config.numHiddenLayers,
      };
      if (o.dryRun) {
        out.result({ ...summary, out: o.out, written: false });
        out.line(`dry run: nothing written (would write ${o.out})`);
        return;
      }
      const bar = progressReporter("synth", ctx.streams.stderr, { quiet: out.json });
      const interrupt = interruptible(bar, out.notice, "removing the partial checkpoint");
      try {
        const r = await writeSyntheticCheckpoint({
          ...options,
          signal: interrupt.signal,
          onProgress: (e) => bar.update(e.fraction, e.stage, e.tensor),
        });
        bar.stop();
        out.result({ ...summary, out: r.dir, written: !r.skipped, files: r.files, seconds: r.seconds });
        if (r.skipped) out.line(`${r.dir} already holds this checkpoint: nothing written`);
        else
          out.line(
            `wrote ${r.dir}: ${r.files.length} shard(s), ${gb(r.bytes)} in ${r.seconds.toFixed(1)} s (${(r.bytes / 1e9 / Math.max(r.seconds, 1e-3)).toFixed(2)} GB/s)`,
          );
      } finally {
        bar.stop();
        interrupt.dispose();
      }
    });
}
