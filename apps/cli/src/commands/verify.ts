import { join } from "node:path";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, hasGolden, loadGolden, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { loadModel } from "@anemll-qwen35/models";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { memoryLine, memoryStats } from "../generation-options.js";
import { choice, UsageError } from "../options.js";

export interface Agreement {
  readonly steps: number;
  readonly top1Agreement: number;
  readonly maxAbsLogitDiff: number;
  readonly minCosine: number;
  readonly tokensIdentical: boolean;
}

export function registerVerify(program: Command, ctx: Context): void {
  program
    .command("verify")
    .description(
      "run a converted chain on the reference backend against golden outputs and print the agreement",
    )
    .argument("<model>", "folder written by `convert`")
    .option(
      "--golden <dir>",
      "folder with golden.safetensors (default: the source checkpoint named in model.json)",
    )
    .option(
      "--precision <p>",
      "interpreter precision",
      choice("--precision", ["fp32", "fp16"] as const),
      "fp32",
    )
    .action(async (dir: string, o) => {
      const out = ctx.output();
      const manifest = await readChainManifest(dir);
      const goldenDir =
        o.golden ?? (manifest.source.model.startsWith("hf:") ? undefined : manifest.source.model);
      if (!goldenDir || !hasGolden(goldenDir)) {
        throw new UsageError(
          `no golden outputs found${goldenDir ? ` in ${goldenDir}` : ""}: pass --golden <dir> with a golden.safetensors written by tools/oracle`,
        );
      }
      const g = await loadGolden(goldenDir);
      const loaded = await loadModel(dir, { backend: "reference", precision: o.precision, tokenizer: false });
      const model = loaded.model;
      try {
        // teacher-forced: feed the golden tokens, compare every step's output with the golden logits
        const refs = [g.promptLogits.at(-1)!, ...g.decodeLogits];
        const feeds = [g.promptIds, ...g.generatedIds.slice(0, g.decodeLogits.length).map((t) => [t])];
        let agree = 0;
        let maxDiff = 0;
        let minCos = 1;
        let decodeMs = 0;
        for (const [i, ids] of feeds.entries()) {
          const t0 = performance.now();
          const step = i === 0 ? await model.prefill(ids) : await model.decode(ids[0]);
          if (i > 0) decodeMs += performance.now() - t0;
          const want = g.generatedIds[i];
          if ("logits" in step) {
            if (argmax(step.logits) === want) agree++;
            maxDiff = Math.max(maxDiff, maxAbsDiff(step.logits, refs[i]));
            minCos = Math.min(minCos, cosine(step.logits, refs[i]));
          } else if (step.top1.id === want) agree++;
        }
        const hasLogits = !manifest.argmax;
        const a: Agreement = {
          steps: feeds.length,
          top1Agreement: agree / feeds.length,
          maxAbsLogitDiff: hasLogits ? maxDiff : Number.NaN,
          minCosine: hasLogits ? minCos : Number.NaN,
          tokensIdentical: agree === feeds.length,
        };
        const decodeTokensPerSecond = feeds.length > 1 ? (1000 * (feeds.length - 1)) / decodeMs : Number.NaN;
        const memory = memoryStats();
        out.result({
          model: dir,
          golden: join(goldenDir, "golden.safetensors"),
          precision: o.precision,
          ...a,
          decodeTokensPerSecond,
          ...memory,
        });
        out.line(`verify ${dir} against ${goldenDir} (reference backend, ${o.precision})`);
        out.line(
          `  greedy top-1 agreement ${agree}/${feeds.length}${a.tokensIdentical ? " (identical)" : ""}`,
        );
        if (hasLogits)
          out.line(`  max |Δlogit| ${maxDiff.toExponential(3)} · min cosine ${minCos.toFixed(6)}`);
        out.line(`  decode ${decodeTokensPerSecond.toFixed(2)} tok/s · ${memoryLine(memory)}`);
        if (!a.tokensIdentical) process.exitCode = 1;
      } finally {
        await loaded.dispose();
      }
    });
}
