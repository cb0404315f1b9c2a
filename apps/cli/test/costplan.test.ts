import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");

describe("costplan", () => {
  it(
    "reports a converted model, saves it, and compares two contexts",
    async () => {
      const work = mkdtempSync(join(tmpdir(), "costplan-"));
      for (const ctx of ["128", "512"]) {
        const r = await cli("convert", FIXTURE, "-o", join(work, ctx), "--ctx", ctx, "--fuse", "1");
        expect(r.code, r.stderr).toBe(0);
      }
      const a = await cli("costplan", join(work, "128"), "--chip", "m4-pro", "--save", join(work, "a.json"));
      expect(a.code, a.stderr).toBe(0);
      expect(a.stdout).toMatch(/tok\/s/);
      expect(a.stdout).toMatch(/estimated/i);
      const b = await cli("costplan", join(work, "512"), "--save", join(work, "b.json"));
      expect(b.code, b.stderr).toBe(0);
      expect(JSON.parse(readFileSync(join(work, "a.json"), "utf8")).source).toBe("static-estimate");
      const c = await cli("--json", "costplan", "compare", join(work, "a.json"), join(work, "b.json"));
      expect(c.code, c.stderr).toBe(0);
      expect(JSON.parse(c.stdout)).toBeTypeOf("object");
      const bad = await cli("costplan", join(work, "128"), "--chip", "z80");
      expect(bad.code).toBe(2);
      // the reference tool's -j FILE, and the library options the README documents
      const j = await cli(
        "costplan",
        join(work, "128"),
        "-j",
        join(work, "j.json"),
        "--calibration",
        "none",
        "--compute-units",
        "cpuOnly",
      );
      expect(j.code, j.stderr).toBe(0);
      const saved = JSON.parse(readFileSync(join(work, "j.json"), "utf8"));
      expect(saved.computeUnits).toBe("cpuOnly");
      expect(saved.notes.join(" ")).toMatch(/calibration: none/);

      // calibrate from a report whose predictions were "measured" 1.5× slower, then plan with it
      const measured = JSON.parse(readFileSync(join(work, "a.json"), "utf8"));
      expect(measured.packages.some((p: { name: string }) => /embed/.test(p.name))).toBe(false); // read on the host
      for (const p of measured.packages) p.prediction.measuredMs = p.prediction.estimatedMs * 1.5;
      writeFileSync(join(work, "m.json"), JSON.stringify(measured));
      const cal = await cli(
        "costplan",
        "calibrate",
        "--from",
        join(work, "m.json"),
        "-o",
        join(work, "cal.json"),
      );
      expect(cal.code, cal.stderr).toBe(0);
      expect(cal.stdout).toMatch(/fitted on \d+ measurements/);
      expect(cal.stdout).toMatch(/leave-one-out/);
      expect(JSON.parse(readFileSync(join(work, "cal.json"), "utf8")).schema).toBe(
        "anemll-qwen35.costplan-calibration",
      );
      const withCal = await cli(
        "costplan",
        join(work, "128"),
        "--calibration",
        join(work, "cal.json"),
        "-j",
        join(work, "c.json"),
      );
      expect(withCal.code, withCal.stderr).toBe(0);
      expect(withCal.stdout).toMatch(/band/);
      const planned = JSON.parse(readFileSync(join(work, "c.json"), "utf8"));
      // the fit reproduces the measurements it was given
      const ratio =
        planned.totals.estimatedMs /
        measured.packages.reduce(
          (s: number, p: { prediction: { measuredMs: number } }) => s + p.prediction.measuredMs,
          0,
        );
      expect(ratio).toBeGreaterThan(0.8);
      expect(ratio).toBeLessThan(1.25);
      const missing = await cli("costplan", join(work, "128"), "--calibration", join(work, "nope.json"));
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toMatch(/nope\.json/);
    },
    timeLimit(180_000),
  );
});
