import { createWriteStream } from "node:fs";
import {
  convert,
  DEFAULT_CTX,
  DEFAULT_LUT_GROUP_SIZE,
  DEFAULT_PREFILL_BATCH,
  defaultBuckets,
  formatWeightQuant,
  MAX_CTX,
  MIN_CTX,
  QUANT_PRESETS,
} from "@anemll-qwen35/converter";
import { type Command, Option } from "commander";
import type { Context } from "../context.js";
import { buckets, bytes, choice, fuse, int, weightQuant } from "../options.js";
import { interruptible, progressReporter } from "../progress.js";

export function registerConvert(program: Command, ctx: Context): void {
  program
    .command("convert")
    .description(
      "convert a Qwen3.5 checkpoint (folder or hf:owner/name[@rev]) into Core ML packages for the ANE",
    )
    .argument("<model>", "checkpoint folder or hf:owner/name[@revision]")
    .requiredOption(
      "-o, --out <dir>",
      "output folder: new, empty or a previous conversion (replaced only when the new one completes)",
    )
    .option(
      "--force",
      "convert into an output folder that is not a previous conversion (its other files are kept; never the checkpoint)",
    )
    .option(
      "--ctx <n>",
      `context length, ${MIN_CTX}…${MAX_CTX}, as a single bucket (default ${DEFAULT_CTX} or the model's max_position_embeddings, in the buckets ${defaultBuckets(DEFAULT_CTX).join(",")})`,
      int("--ctx", 1),
    )
    .option(
      "--buckets <a,b,c>",
      "context buckets, ascending, the last one the context: each super-block package gets decode/prefill functions at each KV length over one KV store",
      buckets,
    )
    .option("--fuse <n|all>", "super-blocks per package, or all that fit the budget", fuse, "all")
    .addOption(
      new Option("--budget <size>", "largest package size")
        .argParser(bytes("--budget"))
        .default(1.5e9, "1.5GB"),
    )
    .option(
      "--state <where>",
      "KV cache placement: io or mlstate",
      choice("--state", ["io", "mlstate"] as const),
      "io",
    )
    .option(
      "--dtype <dtype>",
      "fp16 (the ANE program) or fp32 (exact, for checks)",
      choice("--dtype", ["fp16", "fp32"] as const),
      "fp16",
    )
    .option(
      "--attention <form>",
      "attention core: matmul (Q·Kᵀ, softmax, P·V, as ANE ports ship) or sdpa (the iOS18 op)",
      choice("--attention", ["matmul", "sdpa"] as const),
      "matmul",
    )
    .option(
      "--prefill-batch <n>",
      "tokens per call of each super-block package's prefill function, beside decode over the same weights (0 = decode only)",
      int("--prefill-batch", 0, MIN_CTX),
      DEFAULT_PREFILL_BATCH,
    )
    .option(
      "--gdn-prefill <form>",
      "the prefill function's Gated DeltaNet: chunked (WY form, matmuls) or scan (the one-token rule unrolled)",
      choice("--gdn-prefill", ["chunked", "scan"] as const),
      "chunked",
    )
    .option(
      "--no-mtp",
      "leave the checkpoint's multi-token-prediction head out (kept by default when the checkpoint has mtp.* tensors: an mtp package and verify functions for --speculative mtp)",
    )
    .option(
      "--verify-tokens <k>",
      "most MTP drafts one verify call takes (its functions score k + 1 rows)",
      int("--verify-tokens", 1, 4),
      2,
    )
    .option(
      "--quant <policy>",
      `weight encodings per tensor: [preset,]pattern=encoding,… (the last matching rule wins) — presets ${Object.keys(QUANT_PRESETS).join(", ")}; ` +
        "patterns body, gdn, attn, mlp, lm_head, embed, a role (gdn.in_proj_qkv) or a tensor glob (layers.*.mlp.down_proj); " +
        `encodings none|fp16, lut2|4|6|8[,group|,per-tensor], int8[,block]. The preset default is ${QUANT_PRESETS.default.map((r) => `${r.pattern}=${formatWeightQuant(r.quant)}`).join(",")}`,
      "default",
    )
    .option(
      "--lut <bits>",
      "shorthand for the rule body=<bits>: every super-block projection 2|4|6|8[,group|,per-tensor], int8[,block] or none",
      weightQuant("--lut"),
    )
    .option("--lmhead-lut <bits>", "shorthand for the rule lm_head=<bits>", weightQuant("--lmhead-lut"))
    .option("--embed-lut <bits>", "shorthand for the rule embed=<bits>", weightQuant("--embed-lut"))
    .option("--group-size <n>", "output channels per LUT", int("--group-size", 1), DEFAULT_LUT_GROUP_SIZE)
    .option("--argmax", "lm_head returns per-piece top-1 instead of logits")
    .option(
      "--lmhead-rows <n|auto>",
      "most vocabulary rows per lm_head piece, or auto: sweep the split (Core ML timing on a Mac, costplan estimate elsewhere) and record it in model.json",
      (v: string) => (v === "auto" ? "auto" : int("--lmhead-rows", 1, 16384)(v)),
      16384,
    )
    .option("--resume", "reuse components of an interrupted conversion whose checksums match")
    .option("--workers <n>", "worker threads for k-means", int("--workers", 1))
    .option("--log <file>", "write the conversion log (per-tensor reconstruction error) to a file")
    .action(async (model: string, o) => {
      const out = ctx.output();
      const bar = progressReporter("convert", ctx.streams.stderr, { quiet: out.json });
      const log = o.log ? createWriteStream(o.log) : undefined;
      const interrupt = interruptible(bar, out.notice, "keeping the finished work for --resume");
      try {
        const r = await convert({
          model,
          out: o.out,
          ctx: o.ctx,
          buckets: o.buckets,
          fuse: o.fuse,
          budgetBytes: o.budget,
          state: o.state,
          dtype: o.dtype,
          attention: o.attention,
          prefillBatch: o.prefillBatch,
          gdnPrefill: o.gdnPrefill,
          mtp: o.mtp !== false,
          verifyTokens: o.verifyTokens,
          quant: o.quant,
          body: o.lut,
          lmHead: o.lmheadLut,
          embed: o.embedLut,
          groupSize: o.groupSize,
          argmax: Boolean(o.argmax),
          lmHeadMaxRows: o.lmheadRows,
          resume: Boolean(o.resume),
          force: Boolean(o.force),
          workers: o.workers,
          signal: interrupt.signal,
          onProgress: (e) =>
            bar.update(
              e.fraction,
              e.component ?? e.stage,
              e.tensor ? `${e.tensor}${e.reused ? " (reused)" : ""}` : undefined,
            ),
          onLog: (line) => {
            log?.write(`${line}\n`);
            if (line.startsWith("warning:")) out.notice(line);
          },
        });
        bar.stop();
        const worst = r.weights.reduce((m, w) => Math.max(m, w.relative), 0);
        out.result({
          out: r.out,
          seconds: r.seconds,
          skipped: r.skipped,
          reusedWeights: r.reusedWeights,
          components: r.manifest.components.map((c) => c.file),
          worstRelativeWeightError: worst,
        });
        out.line(`converted ${model} → ${r.out} in ${r.seconds.toFixed(1)} s`);
        for (const c of r.manifest.components)
          out.line(`  ${c.file}${r.skipped.includes(c.name) ? "  (reused)" : ""}`);
        if (r.reusedWeights.length > 0)
          out.line(`  ${r.reusedWeights.length} weight(s) reused from the interrupted conversion`);
        out.line(
          `  ctx ${r.manifest.ctx} · state ${r.manifest.state} · ${r.manifest.dtype} · attention ${r.manifest.attention} · prefill ${r.manifest.prefill ? `${r.manifest.prefill.tokens} tokens (${r.manifest.prefill.gdn})` : "off"} · quant ${r.manifest.quantization.policy} · worst relative weight error ${worst.toExponential(2)}`,
        );
      } finally {
        bar.stop();
        log?.end();
        interrupt.dispose();
      }
    });
}
