import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { runSelftest } from "../src/selftest.js";
import {
  formatSelftest,
  parseSelftest,
  RunDetailsSchema,
  SELFTEST_SCHEMA_VERSION,
} from "../src/selftest-report.js";
import { cli } from "./helpers.js";

const work = mkdtempSync(join(tmpdir(), "cli-selftest-"));
const predict = coreMLAvailability("predict");
const plan = coreMLAvailability("computePlan");

describe("doctor --selftest", () => {
  it(
    "converts the bundled model, runs every backend it can, and writes a versioned report and a summary",
    async () => {
      const out = join(work, "report.json");
      const r = await cli("--json", "doctor", "--selftest", "--out", out, "--steps", "2");
      expect(r.code, r.stderr).toBe(0);
      const report = parseSelftest(JSON.parse(readFileSync(out, "utf8")));
      expect(report.schemaVersion).toBe(SELFTEST_SCHEMA_VERSION);
      expect(JSON.parse(r.stdout)).toEqual(report);
      expect(report.model).toMatchObject({ ctx: 128, decodeSteps: 2 });
      expect(report.model.promptTokens).toBeGreaterThan(0);
      const byId = new Map(report.steps.map((s) => [s.id, s]));
      for (const kv of ["io", "mlstate"] as const) {
        expect(byId.get(`convert:${kv}`)?.status).toBe("ok");
        for (const run of ["reference-fp32", "reference-fp16"]) {
          const s = byId.get(`run:${kv}:${run}`);
          expect(s?.status, s?.reason).toBe("ok");
          const d = RunDetailsSchema.parse(s?.details);
          expect(d.perStep).toHaveLength(3);
          expect(d.resetMatches).toBe(true);
          expect(d.transfersPerToken.bytesIn).toBeGreaterThan(0);
          // KV rows are written inside the backend only when the KV cache is I/O
          if (kv === "io") expect(d.transfersPerToken.bytesKept).toBeGreaterThan(0);
          else expect(d.transfersPerToken.bytesKept).toBe(0);
          if (run === "reference-fp32") expect(d.minCosine).toBeCloseTo(1, 12);
          else expect(d.minCosine).toBeGreaterThan(0.99);
        }
        for (const units of ["cpuOnly", "cpuAndNeuralEngine"]) {
          const s = byId.get(`run:${kv}:coreml-${units}`);
          if (predict.available) expect(s?.status, s?.reason).toBe("ok");
          else expect(s).toMatchObject({ status: "skipped", reason: predict.reason });
        }
      }
      // the first-run checks: a 64 + 9 token prompt through both paths, finite, within rounding
      for (const kv of ["io", "mlstate"] as const) {
        for (const b of ["reference-fp32", "reference-fp16"]) {
          const s = byId.get(`prompt:${kv}:${b}`);
          expect(s?.status, s?.reason).toBe("ok");
          expect(s?.details).toMatchObject({
            promptTokens: 73,
            prefillTokens: 64,
            finite: { prefill: true, tokenByToken: true },
          });
          expect(s?.details?.minCosine as number).toBeGreaterThan(0.999);
          // fp32: the chunked WY form and the recurrence agree to rounding
          if (b === "reference-fp32") expect(s?.details?.maxAbsDiff as number).toBeLessThan(1e-2);
        }
        const macOnly = [`prompt:${kv}:coreml`, `prefill-check:${kv}`, `memory:${kv}`, `kv-readback:${kv}`];
        for (const id of macOnly) {
          const s = byId.get(id);
          if (predict.available && plan.available) expect(s?.status, s?.reason).toBe("ok");
          else expect(s?.status).toBe("skipped");
          if (!predict.available) expect(s?.reason).toBe(predict.reason);
        }
      }
      const contexts = byId.get("decode:contexts");
      expect(contexts?.status, contexts?.reason).toBe("ok");
      const rows = contexts?.details?.contexts as { ctx: number; maxAbsDiff: number; ioMs: number }[];
      expect(rows.map((r) => r.ctx)).toEqual([1024, 4096]);
      for (const r of rows) {
        expect(r.maxAbsDiff).toBeLessThan(1e-2); // io and mlstate KV: the same program
        expect(r.ioMs).toBeGreaterThan(0);
      }
      const devices = byId.get("devices");
      if (coreMLAvailability("devices").available) {
        expect(devices?.status).toBe("ok");
        expect(report.platform.neuralEngine).toBeDefined();
      } else {
        expect(devices).toMatchObject({ status: "skipped", reason: coreMLAvailability("devices").reason });
        expect(report.platform.neuralEngine).toBeUndefined();
      }
      // a Mac without a Neural Engine says so at the top of the summary
      const virtual = { ...report, platform: { ...report.platform, neuralEngine: { present: false } } };
      expect(formatSelftest(virtual)).toMatch(/\*\*No Neural Engine: Core ML sees none on this Mac/);
      expect(formatSelftest(report)).not.toMatch(/No Neural Engine/);
      expect(byId.get("placement:static")?.status).toBe("ok");
      expect(byId.get("placement:static")?.details?.chains).toHaveLength(2);
      for (const id of ["placement:mlcomputeplan", "timing:measured"]) {
        if (plan.available) expect(byId.get(id)?.status, byId.get(id)?.reason).toBe("ok");
        else expect(byId.get(id)).toMatchObject({ status: "skipped", reason: plan.reason });
      }
      expect(report.totals.failed).toBe(0);
      expect(report.totals.ok + report.totals.skipped).toBe(report.steps.length);
      const md = readFileSync(join(work, "report.md"), "utf8");
      expect(md).toBe(formatSelftest(report));
      expect(md).toContain("| step | status | detail |");
      if (!predict.available)
        expect(md).toMatch(/Core ML cpuAndNeuralEngine \(KV as I\/O\) \| skipped \| .*macOS 15/);
    },
    timeLimit(10 * 60_000),
  );

  it("reports a step that fails, skips what depends on it, and says so", async () => {
    // in-process: the self-test is given a model folder and a backend list no CLI flag selects
    const bad = join(work, "not-a-model");
    const report = await runSelftest({
      model: bad,
      modelSource: "a folder that does not exist",
      version: "test",
      backends: [],
      steps: 1,
    });
    const byId = new Map(report.steps.map((s) => [s.id, s]));
    expect(byId.get("convert:io")).toMatchObject({ status: "failed" });
    expect(byId.get("convert:io")?.reason).toMatch(/not-a-model/);
    expect(byId.get("placement:static")).toMatchObject({
      status: "skipped",
      reason: "no conversion succeeded",
    });
    expect(report.totals.failed).toBe(2);
    expect(formatSelftest(report)).toContain("**0 ok, 2 failed");
    expect(existsSync(bad)).toBe(false);
  });

  it("refuses a report of another schema version", () => {
    expect(() => parseSelftest({ schema: "anemll-qwen35.selftest", schemaVersion: 99 })).toThrow();
  });
});
