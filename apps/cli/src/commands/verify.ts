import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, hasGolden, loadGolden, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { loadModel } from "@anemll-qwen35/models";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { memoryLine, memoryStats } from "../generation-options.js";
import { choice, num, UsageError } from "../options.js";

/** The chain does not agree with the goldens well enough, or the goldens are another model's. */
export class VerifyError extends AnemllError {
  constructor(message: string) {
    super("E_VERIFY", message);
  }
}

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
    .option(
      "--token-by-token",
      "prefill the prompt through the decode function (default: the prefill function when the chain has one)",
    )
    .option(
      "--min-agreement <fraction>",
      "fail below this greedy top-1 agreement (0…1)",
      num("--min-agreement", 0),
      0.9,
    )
    .option(
      "--min-cosine <c>",
      "fail below this cosine of the logits (chains with a logits head)",
      num("--min-cosine", -1),
      0.99,
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
      checkGoldenIsThisModel(goldenDir, manifest);
      const g = await loadGolden(goldenDir);
      if (g.promptLogits[0]?.length !== manifest.model.vocabSize) {
        throw new VerifyError(
          `the goldens in ${goldenDir} have ${g.promptLogits[0]?.length} logits per token, the model ${manifest.model.vocabSize}: they belong to another model`,
        );
      }
      const prefillFunction = !o.tokenByToken;
      const loaded = await loadModel(dir, {
        backend: "reference",
        precision: o.precision,
        tokenizer: false,
        prefillFunction,
      });
      const model = loaded.model;
      const batch = prefillFunction ? manifest.prefill?.tokens : undefined;
      const prefill = batch
        ? `the prefill function, ${batch} tokens a call (a ${g.promptIds.length}-token prompt: ${Math.ceil(g.promptIds.length / batch)} call(s) per package)`
        : `token by token through decode${manifest.prefill ? " (--token-by-token)" : " (the chain has no prefill function)"}`;
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
        const passed = a.top1Agreement >= o.minAgreement && (!hasLogits || minCos >= o.minCosine);
        out.result({
          model: dir,
          golden: join(goldenDir, "golden.safetensors"),
          precision: o.precision,
          prefill: { function: batch !== undefined, tokens: batch ?? 1 },
          ...a,
          decodeTokensPerSecond,
          ...memory,
          thresholds: { minAgreement: o.minAgreement, ...(hasLogits ? { minCosine: o.minCosine } : {}) },
          passed,
        });
        out.line(`verify ${dir} against ${goldenDir} (reference backend, ${o.precision})`);
        out.line(`  prompt prefilled by ${prefill}`);
        out.line(
          `  greedy top-1 agreement ${agree}/${feeds.length}${a.tokensIdentical ? " (identical)" : ""}`,
        );
        if (hasLogits)
          out.line(`  max |Δlogit| ${maxDiff.toExponential(3)} · min cosine ${minCos.toFixed(6)}`);
        out.line(`  decode ${decodeTokensPerSecond.toFixed(2)} tok/s · ${memoryLine(memory)}`);
        out.line(
          `  ${passed ? "pass" : "FAIL"}: needs agreement ≥ ${o.minAgreement}${hasLogits ? ` and cosine ≥ ${o.minCosine}` : ""} (--min-agreement, --min-cosine)`,
        );
        if (!passed) {
          throw new VerifyError(
            `agreement ${a.top1Agreement.toFixed(3)}${hasLogits ? `, min cosine ${minCos.toFixed(4)}` : ""} is below the threshold ` +
              `(agreement ≥ ${o.minAgreement}${hasLogits ? `, cosine ≥ ${o.minCosine}` : ""})`,
          );
        }
      } finally {
        await loaded.dispose();
      }
    });
}

/** Goldens next to a config.json are that checkpoint's: it must be the one the chain was converted from. */
function checkGoldenIsThisModel(goldenDir: string, manifest: { source: { configSha256: string } }): void {
  const config = join(goldenDir, "config.json");
  if (!existsSync(config)) return;
  const sha = createHash("sha256").update(readFileSync(config)).digest("hex");
  if (sha !== manifest.source.configSha256) {
    throw new VerifyError(
      `the goldens in ${goldenDir} belong to another model: its config.json is not the one this chain was converted from`,
    );
  }
}
