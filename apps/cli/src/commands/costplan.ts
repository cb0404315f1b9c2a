import { readFile } from "node:fs/promises";
import {
  compareReports,
  costplan,
  formatComparison,
  formatReport,
  parseReport,
} from "@anemll-qwen35/costplan";
import { writeFileAtomic } from "@anemll-qwen35/ir/checkpoint";
import type { Command } from "commander";
import { checkConverted } from "../chain-check.js";
import type { Context } from "../context.js";
import { addChipOptions, choice, int } from "../options.js";

export function registerCostplan(program: Command, ctx: Context): void {
  const cmd = program
    .command("costplan")
    .description(
      "what a package or converted model costs on the ANE: placement per op, time, projected tok/s",
    )
    .argument("<path>", "a .mlpackage, or a folder written by `convert`");
  addChipOptions(cmd, { chip: "chip profile", units: "Core ML compute units the placement assumes" })
    .option(
      "--calibration <c>",
      "fitted (dispatch and bandwidth fitted to Mac measurements) or none (physics only)",
      choice("--calibration", ["fitted", "none"] as const),
      "fitted",
    )
    .option("-j, --save <file>", "also write the JSON report to a file (for `costplan compare`)")
    .option("--top <n>", "top ops to list", int("--top", 0), 15)
    .action(async (path: string, o) => {
      const out = ctx.output();
      await checkConverted(path, out.notice); // as `run` would, before reading the packages
      const report = await costplan(path, {
        chip: o.chip,
        computeUnits: o.computeUnits,
        calibration: o.calibration,
      });
      if (o.save) await writeFileAtomic(o.save, `${JSON.stringify(report, null, 2)}\n`);
      out.result(report);
      out.line(formatReport(report, { topOps: o.top }));
    });
  cmd
    .command("compare")
    .description("compare two saved reports (before/after an option such as --ctx or --fuse)")
    .argument("<a>", "report JSON (costplan --save)")
    .argument("<b>", "report JSON")
    .action(async (a: string, b: string) => {
      const out = ctx.output();
      const read = async (f: string) => parseReport(JSON.parse(await readFile(f, "utf8")));
      const c = compareReports(await read(a), await read(b));
      out.result(c);
      out.line(formatComparison(c));
    });
}
