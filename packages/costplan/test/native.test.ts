/**
 * The MLComputePlan path. Everywhere: availability says why it is off, "require" fails loudly, and
 * merging a plan into the static analysis (pure TypeScript) is checked on a synthetic plan. On a
 * Mac with the addon built, the real addon runs on a small package.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MilBuilder, type MlModel, tensorType, writeMlPackage } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import {
  analyzeModel,
  buildReport,
  CHIPS,
  costplan,
  DEFAULT_RUNTIME,
  formatReport,
  mergePlan,
  type NativePlan,
  NativePlanUnavailableError,
  nativeAvailability,
} from "../src/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);

function small(): MlModel {
  const b = new MilBuilder();
  const x = b.input("x", f16([1, 16]));
  const w = b.const(new Uint16Array(16 * 16), "fp16", [16, 16], { name: "w" });
  const y = b.linear({ x, weight: w, name: "proj" });
  const s = b.sigmoid({ x: y, name: "act" });
  b.output("y", b.mul({ x: s, y, name: "gate" }));
  return b.model();
}

const status = nativeAvailability();

describe("MLComputePlan (native)", () => {
  it.skipIf(process.platform === "darwin")(
    "is unavailable off macOS, with a reason, and 'require' says so",
    async () => {
      expect(status.available).toBe(false);
      expect(status.reason).toMatch(/macOS 14\.4/);
      await expect(costplan(small(), { native: "require" })).rejects.toThrow(NativePlanUnavailableError);
      const r = await costplan(small(), { measure: true });
      expect(r.source).toBe("static-estimate");
      expect(r.notes.join("\n")).toMatch(/Measured predictions skipped/);
      expect(r.packages[0].prediction.measuredMs).toBeUndefined();
    },
  );

  it("merging a plan replaces predicted placement with Core ML's, keeps load-time ops, appends unknown ops", () => {
    const analysis = analyzeModel(small(), "cpuAndNeuralEngine");
    const plan: NativePlan = {
      functions: [
        {
          name: "main",
          operations: [
            { operatorName: "const", outputs: ["w"], preferred: null, supported: [], cost: null },
            {
              operatorName: "ios17.linear",
              outputs: ["proj"],
              preferred: "ANE",
              supported: ["ANE", "CPU"],
              cost: 0.7,
            },
            {
              operatorName: "ios17.sigmoid",
              outputs: ["act"],
              preferred: "CPU",
              supported: ["CPU", "ANE"],
              cost: 0.1,
            },
            { operatorName: "ios17.mul", outputs: ["y"], preferred: "ANE", supported: ["ANE"], cost: 0.1 },
            {
              operatorName: "ios17.identity",
              outputs: ["extra"],
              preferred: "GPU",
              supported: ["GPU"],
              cost: 0.1,
            },
          ],
        },
      ],
    };
    const merged = mergePlan(analysis, plan);
    const ops = merged.functions[0].ops;
    const by = (n: string) => ops.find((o) => o.name === n);
    expect(by("w")?.device).toBe("load");
    expect(by("proj")).toMatchObject({
      device: "ANE",
      rule: "mlcomputeplan",
      planCost: 0.7,
      supportedDevices: ["ANE", "CPU"],
    });
    expect(by("act")).toMatchObject({ device: "CPU", rule: "mlcomputeplan" });
    expect(by("act")?.reason).toBe("MLComputePlan: preferred CPU; supported CPU, ANE");
    expect(by("extra")).toMatchObject({ type: "identity", device: "GPU", flops: 0 });
    // static work is kept: the linear still reads its 16×16 fp16 weight (+ default bias)
    expect(by("proj")?.bytesRead.weights).toBe(16 * 16 * 2 + 16 * 2);

    const report = buildReport({
      target: { kind: "model", name: "small" },
      components: [{ name: "small", analysis: merged, decodeFunction: "main", source: "mlcomputeplan" }],
      chip: CHIPS["m4-pro"],
      runtime: DEFAULT_RUNTIME,
      computeUnits: "cpuAndNeuralEngine",
      chain: false,
      notes: [],
    });
    expect(report.source).toBe("mlcomputeplan");
    const f = report.packages[0].functions[0];
    expect(f.interruptions.count).toBe(1); // proj (ANE) → act (CPU) → mul (ANE)
    expect(f.interruptions.runs[0].softOps).toBe(1); // the ANE supports it; Core ML preferred the CPU
    const fb = report.fallbacks.find((x) => x.name === "act");
    expect(fb?.soft).toBe(true);
    expect(formatReport(report)).toContain("[soft]");
  });

  it.skipIf(!status.available)(
    `runs Core ML's compute plan and a measured loop on a real package (skipped: ${status.reason ?? "available"})`,
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "costplan-native-"));
      try {
        const path = join(dir, "small.mlpackage");
        await writeMlPackage(path, small());
        const r = await costplan(path, { native: "require", measure: { warmup: 1, runs: 3 } });
        expect(r.source).toBe("mlcomputeplan");
        const ops = r.packages[0].functions[0].ops.filter((o) => o.device !== "load");
        expect(ops.every((o) => o.rule === "mlcomputeplan" || o.reason.includes("MLComputePlan"))).toBe(true);
        expect(r.packages[0].prediction.measuredRuns).toBe(3);
        expect(r.packages[0].prediction.measuredMs).toBeGreaterThan(0);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
