import { formatProfile, profile } from "@anemll-qwen35/costplan";
import type { Command } from "commander";
import { checkConverted } from "../chain-check.js";
import type { Context } from "../context.js";
import { addChipOptions, chipChoice, choice, int } from "../options.js";
import { saveJson } from "../output.js";

export function registerProfile(program: Command, ctx: Context): void {
  const cmd = program
    .command("profile")
    .description(
      "measured time per op and per package (reference interpreter; Core ML per prediction on a Mac), joined with costplan's estimate and placement, and the ops where they disagree most",
    )
    .argument("<path>", "a .mlpackage, or a folder written by `convert`")
    .option("--runs <n>", "timed runs per package (median reported)", int("--runs", 1), 3)
    .option("--warmup <n>", "untimed runs first", int("--warmup", 0), 1)
    .option(
      "--precision <p>",
      "interpreter arithmetic: fp16 (rounds like the ANE) or fp32",
      choice("--precision", ["fp16", "fp32"] as const),
      "fp16",
    );
  addChipOptions(cmd, { chip: "chip profile of the estimate", units: "Core ML compute units" })
    .option("--no-coreml", "skip Core ML timing and MLComputePlan even where available")
    .option("--top <n>", "ops listed where measurement and estimate disagree most", int("--top", 0), 10)
    .option("-j, --save <file>", "also write the JSON report to a file (anemll-profile's -j FILE)")
    .action(async (path: string, o) => {
      const out = ctx.output();
      await checkConverted(path, out.notice); // as `run` would, before reading the packages
      const report = await profile(path, {
        runs: o.runs,
        warmup: o.warmup,
        precision: o.precision,
        ...chipChoice(o),
        coreml: o.coreml === false ? "off" : "auto",
        top: o.top,
        onProgress: (e) => out.notice(`profile: ${e.stage} ${e.component} (${e.index + 1}/${e.total})`),
      });
      await saveJson(o.save, report);
      out.result(report);
      out.line(formatProfile(report));
      if (o.save) out.line(`wrote ${o.save}`);
    });
}
