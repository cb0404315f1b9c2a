import { readFile } from "node:fs/promises";
import {
  type Calibration,
  compareReports,
  costplan,
  fitCalibration,
  formatComparison,
  formatReport,
  parseReport,
  readCalibration,
  readMeasurements,
  writeCalibration,
} from "@anemll-qwen35/costplan";
import type { Command } from "commander";
import { checkConverted } from "../chain-check.js";
import type { Context } from "../context.js";
import { addChipOptions, chipChoice, int, UsageError } from "../options.js";
import { saveJson } from "../output.js";

/** --calibration: fitted, none, or a file `costplan calibrate` wrote. */
export const CALIBRATION_HELP =
  "fitted (the figures fitted to the reference study's Mac measurements), none (physics only), or a file written by `costplan calibrate`";

/** The --calibration value as costplan's option (a file is read and validated). */
export async function calibrationOf(v: string | undefined): Promise<"fitted" | "none" | Calibration> {
  if (v === undefined || v === "fitted" || v === "none") return v ?? "fitted";
  return readCalibration(v);
}

export function registerCostplan(program: Command, ctx: Context): void {
  const cmd = program
    .command("costplan")
    .description(
      "what a package or converted model costs on the ANE: placement per op, time, projected tok/s",
    )
    .argument("<path>", "a .mlpackage, or a folder written by `convert`");
  addChipOptions(cmd, { chip: "chip profile", units: "Core ML compute units the placement assumes" })
    .option("--calibration <c|file>", CALIBRATION_HELP, "fitted")
    .option("-j, --save <file>", "also write the JSON report to a file (for `costplan compare`)")
    .option("--top <n>", "top ops to list", int("--top", 0), 15)
    .action(async (path: string, o) => {
      const out = ctx.output();
      await checkConverted(path, out.notice); // as `run` would, before reading the packages
      const report = await costplan(path, {
        ...chipChoice(o),
        calibration: await calibrationOf(o.calibration),
      });
      await saveJson(o.save, report);
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
  cmd
    .command("calibrate")
    .description(
      "refit the runtime figures from measured reports (profile -j, doctor --selftest, costplan -j with measured predictions) and write a calibration file for --calibration",
    )
    .requiredOption("--from <file...>", "measured reports (JSON)")
    .option("-o, --out <file>", "calibration file to write", "costplan-calibration.json")
    .action(async (o: { from: string[]; out: string }) => {
      const out = ctx.output();
      const { samples, skipped } = await readMeasurements(o.from);
      for (const s of skipped) out.notice(`skipped: ${s}`);
      if (samples.filter((s) => (s.role ?? "fit") === "fit").length < 2)
        throw new UsageError(
          `costplan calibrate needs at least 2 measured predictions; found ${samples.length} in ${o.from.join(", ")}`,
        );
      const fit = fitCalibration(samples, { from: o.from.join(", ") });
      await writeCalibration(o.out, fit, o.from);
      const rt = fit.calibration.runtime;
      const pct = (e: number | undefined) =>
        e === undefined ? "—" : `${e >= 0 ? "+" : ""}${(e * 100).toFixed(1)}%`;
      out.result({
        file: o.out,
        runtime: rt,
        band: fit.calibration.band,
        rmsLogError: fit.rmsLogError,
        opCost: fit.opCost,
        rows: fit.rows,
      });
      out.line(
        `fitted on ${fit.rows.filter((r) => r.role === "fit").length} measurements: dispatch ${rt.dispatchMs.value} ms, bandwidth fraction ${rt.bandwidthFraction.value}, ` +
          `I/O ${rt.ioMsPerMB?.value} ms/MB, ctx term ${rt.kvMsPerMB?.value} ms/MB (≤ ${rt.kvKneeRows?.value} rows), per-op ${(rt.aneOpMs.value * 1e3).toFixed(1)} µs; RMS log error ${fit.rmsLogError.toFixed(3)}`,
      );
      out.line(`band (${fit.opCost}): ${fit.calibration.band.source}`);
      out.line("measurement                       measured   fitted     err   leave-one-out     err   band");
      for (const r of fit.rows)
        out.line(
          `${r.id.slice(-32).padEnd(32)}  ${r.measuredMs.toFixed(3).padStart(8)}  ${r.predictedMs.toFixed(3).padStart(8)}  ${pct(r.error).padStart(6)}  ${(r.leaveOneOutMs?.toFixed(3) ?? "—").padStart(14)}  ${pct(r.leaveOneOutError).padStart(6)}   ${r.lowMs.toFixed(3)}–${r.highMs.toFixed(3)}${r.role === "fit" ? "" : ` (${r.role})`}`,
        );
      out.line(`wrote ${o.out} (use it with --calibration ${o.out})`);
    });
}
