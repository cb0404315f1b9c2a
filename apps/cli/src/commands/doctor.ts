import { mkdir, rename, writeFile } from "node:fs/promises";
import { release } from "node:os";
import { dirname, resolve } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { computeDevices, coreMLAvailability } from "@anemll-qwen35/coreml";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { int, UsageError } from "../options.js";
import type { Output } from "../output.js";
import { runSelftest } from "../selftest.js";
import { formatSelftest } from "../selftest-report.js";
import { BUNDLED_ABOUT, bundledFixture } from "./demo.js";

export interface BackendStatus {
  readonly name: "reference" | "coreml" | "mlx";
  readonly available: boolean;
  readonly detail: string;
}

export function backendStatus(): BackendStatus[] {
  const coreml = coreMLAvailability();
  const mlx = mlxAvailable();
  return [
    {
      name: "reference",
      available: true,
      detail: "MIL interpreter in TypeScript (fp32 and fp16 modes), every OS",
    },
    {
      name: "coreml",
      available: coreml.available,
      detail: coreml.available ? "Core ML on the Apple Neural Engine" : (coreml.reason ?? "unavailable"),
    },
    {
      name: "mlx",
      available: mlx.available,
      detail: mlx.available ? `MLX ${mlx.version}` : (mlx.reason ?? "unavailable"),
    },
  ];
}

/**
 * Whether Core ML sees a Neural Engine here (MLAllComputeDevices): virtual Macs, hosted CI runners
 * included, have none, and Core ML then runs every op on the CPU or GPU without a word.
 */
export async function neuralEngineStatus(): Promise<{ present: boolean | null; detail: string }> {
  const devices = coreMLAvailability("devices");
  if (!devices.available) return { present: null, detail: devices.reason ?? "unknown" };
  const ane = (await computeDevices()).find((d) => d.kind === "neuralEngine");
  return ane
    ? { present: true, detail: `${ane.totalCoreCount} cores (MLAllComputeDevices)` }
    : {
        present: false,
        detail:
          "none: MLAllComputeDevices lists no Neural Engine (a virtual Mac, e.g. a hosted CI runner?); Core ML runs every op on the CPU or GPU here",
      };
}

export function registerDoctor(program: Command, ctx: Context, version: string): void {
  program
    .command("doctor")
    .description(
      "show the platform, Node, and which backends are available (and why not); --selftest runs the bundled tiny model on every backend and reports what works",
    )
    .option(
      "--selftest",
      "convert the bundled tiny model, run it on the reference backend and Core ML (cpuOnly, cpuAndNeuralEngine), compare logits per step, read placement per op, time predictions",
    )
    .option(
      "--out <file>",
      "--selftest: where to write the JSON report (a Markdown summary goes beside it)",
      "anemll-qwen35-selftest.json",
    )
    .option("--steps <n>", "--selftest: decode steps after the prompt", int("--steps", 1), 8)
    .action(async (o: { selftest?: boolean; out: string; steps: number }) => {
      const out = ctx.output();
      const backends = backendStatus();
      const platform = {
        os: process.platform,
        arch: process.arch,
        release: release(),
        node: process.version,
      };
      if (o.selftest) return selftest(out, { version, out: o.out, steps: o.steps, backends });
      const neuralEngine = await neuralEngineStatus();
      out.result({ platform, backends, neuralEngine });
      out.line(`platform  ${platform.os} ${platform.arch} ${platform.release} · Node ${platform.node}`);
      out.line(`neural engine  ${neuralEngine.present === null ? "unknown: " : ""}${neuralEngine.detail}`);
      out.line("backends");
      for (const b of backends) {
        out.line(`  ${b.name.padEnd(10)} ${b.available ? "available  " : "unavailable"}  ${b.detail}`);
      }
    });
}

/** Some self-test steps failed (the report says which and why). */
export class SelftestFailedError extends AnemllError {
  constructor(message: string) {
    super("E_SELFTEST_FAILED", message);
  }
}

async function selftest(
  out: Output,
  o: { version: string; out: string; steps: number; backends: BackendStatus[] },
): Promise<void> {
  const model = bundledFixture();
  if (!model)
    throw new UsageError("the bundled tiny model was not found (dist/fixture); reinstall anemll-qwen35");
  const report = await runSelftest({
    model,
    modelSource: `the bundled model: ${BUNDLED_ABOUT}`,
    version: o.version,
    backends: o.backends,
    steps: o.steps,
    onStep: (s) =>
      out.notice(
        `selftest: ${s.status.padEnd(7)} ${s.title}${s.reason ? ` — ${s.reason}` : ""} (${s.seconds.toFixed(1)} s)`,
      ),
  });
  const summary = formatSelftest(report);
  const json = resolve(o.out);
  const md = `${json.replace(/\.json$/i, "")}.md`;
  await writeAtomically(json, `${JSON.stringify(report, null, 2)}\n`);
  await writeAtomically(md, summary);
  out.result(report);
  out.line(summary);
  out.notice(`selftest: wrote ${json} and ${md}`);
  if (report.totals.failed > 0) {
    const failed = report.steps.filter((s) => s.status === "failed").map((s) => s.title);
    throw new SelftestFailedError(
      `${failed.length} self-test step(s) failed: ${failed.join("; ")} (see ${json})`,
    );
  }
}

async function writeAtomically(file: string, text: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, text);
  await rename(tmp, file);
}
