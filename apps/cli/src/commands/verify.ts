import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, hasGolden, loadGolden, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { loadModel, type MlxVerifyReport, verifyAgainstMlx } from "@anemll-qwen35/models";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { memoryLine, memoryStats } from "../generation-options.js";
import { choice, int, num, UsageError } from "../options.js";

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
      "check a converted chain against golden outputs, or against its source checkpoint run on MLX (float32), and print the agreement",
    )
    .argument("<model>", "folder written by `convert`")
    .option(
      "--against <what>",
      "golden (golden.safetensors from tools/oracle) or mlx (the source checkpoint on runtime-mlx); default: golden when there are goldens, else mlx where MLX is available",
      choice("--against", ["golden", "mlx"] as const),
    )
    .option(
      "--golden <dir>",
      "folder with golden.safetensors (default: the source checkpoint named in model.json)",
    )
    .option(
      "--checkpoint <dir|hf:ref>",
      "--against mlx: the checkpoint the chain was converted from (default: the source named in model.json)",
    )
    .option(
      "--backend <b>",
      "--against mlx: the chain's backend (auto: coreml where it runs, else reference); against goldens it is reference",
      choice("--backend", ["auto", "coreml", "reference"] as const),
    )
    .option(
      "--precision <p>",
      "interpreter precision",
      choice("--precision", ["fp32", "fp16"] as const),
      "fp32",
    )
    .option(
      "--decode-steps <n>",
      "--against mlx: greedy tokens fed after each prompt",
      int("--decode-steps", 0, 1024),
      8,
    )
    .option(
      "--max-drift <d>",
      "--against mlx: fail when a super-block's output is further than this from MLX's (relative L2; default 1e-3 for fp32 arithmetic, 5e-2 for fp16)",
      num("--max-drift", 0),
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
      const goldens = goldenDir !== undefined && hasGolden(goldenDir);
      const against: "golden" | "mlx" | undefined =
        o.against ??
        (goldens || o.golden !== undefined ? "golden" : mlxAvailable().available ? "mlx" : undefined);
      if (against === "mlx") return verifyMlx(ctx, dir, o, o.against === undefined);
      if (o.backend !== undefined && o.backend !== "reference") {
        throw new UsageError(
          `--backend ${o.backend} is for --against mlx: verify against goldens runs the reference backend`,
        );
      }
      if (!goldens) {
        const mlx = mlxAvailable();
        throw new UsageError(
          `no golden outputs found${goldenDir ? ` in ${goldenDir}` : ""}: pass --golden <dir> with a golden.safetensors written by tools/oracle` +
            (mlx.available ? "" : `, or install MLX for --against mlx (${mlx.reason ?? "unavailable"})`),
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

/** verify --against mlx: the chain against its source checkpoint on MLX in float32. */
async function verifyMlx(
  ctx: Context,
  dir: string,
  o: {
    checkpoint?: string;
    backend?: "auto" | "coreml" | "reference";
    precision: "fp32" | "fp16";
    tokenByToken?: boolean;
    decodeSteps: number;
    minAgreement: number;
    minCosine: number;
    maxDrift?: number;
  },
  defaulted: boolean,
): Promise<void> {
  const out = ctx.output();
  const r: MlxVerifyReport = await verifyAgainstMlx(dir, {
    checkpoint: o.checkpoint,
    backend: o.backend,
    precision: o.precision,
    prefillFunction: !o.tokenByToken,
    decodeSteps: o.decodeSteps,
    minAgreement: o.minAgreement,
    minCosine: o.minCosine,
    maxDrift: o.maxDrift,
  });
  const memory = memoryStats();
  out.result({ model: dir, against: "mlx", defaulted, mlxDtype: "float32", ...r, ...memory });
  const hasLogits = !Number.isNaN(r.minCosine);
  out.line(`verify ${dir} against ${r.checkpoint} on MLX (float32)`);
  if (defaulted)
    out.line("  no golden outputs found: checking against the source checkpoint on MLX (--against mlx)");
  out.line(
    `  chain on ${r.backend.detail}, ${r.arithmetic} arithmetic · ${r.prompts.length} prompt(s) of ${r.prompts.map((p) => p.tokens).join(", ")} tokens, ${o.decodeSteps} greedy step(s) each`,
  );
  const agree = Math.round(r.top1Agreement * r.steps);
  out.line(`  greedy top-1 agreement ${agree}/${r.steps}${r.tokensIdentical ? " (identical)" : ""}`);
  if (hasLogits)
    out.line(`  max |Δlogit| ${r.maxAbsLogitDiff.toExponential(3)} · min cosine ${r.minCosine.toFixed(6)}`);
  out.line("  hidden-state drift after each super-block package (relative L2, worst position; min cosine):");
  for (const b of r.superBlocks) {
    const mark = b.name === r.firstDrifting ? "  ← drifts first" : "";
    out.line(
      `    ${b.name.padEnd(10)} layers ${b.layers[0]}–${b.layers[1]}  ${b.maxDrift.toExponential(2)} · ${b.minCosine.toFixed(6)}${mark}`,
    );
  }
  out.line(`  ${memoryLine(memory)}`);
  const needs = `agreement ≥ ${o.minAgreement}${hasLogits ? `, cosine ≥ ${o.minCosine}` : ""} and drift ≤ ${r.thresholds.maxDrift}`;
  out.line(`  ${r.passed ? "pass" : "FAIL"}: needs ${needs} (--min-agreement, --min-cosine, --max-drift)`);
  if (!r.passed) {
    const where = r.firstDrifting
      ? `; ${r.firstDrifting} is the first super-block package that drifts from the checkpoint`
      : "";
    throw new VerifyError(
      `agreement ${r.top1Agreement.toFixed(3)}${hasLogits ? `, min cosine ${r.minCosine.toFixed(4)}` : ""}${where} (needs ${needs})`,
    );
  }
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
