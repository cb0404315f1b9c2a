import { mkdtempSync, readFileSync } from "node:fs";
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
    },
    timeLimit(120_000),
  );
});
