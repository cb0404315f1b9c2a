/** Chip profiles carry a number, its kind and its source; the fitted figures match calibrate's output. */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  CHIP_IDS,
  CHIPS,
  DEFAULT_RUNTIME,
  FITTED_BAND,
  FITTED_RUNTIME,
  TOOL_NAME,
  TOOL_VERSION,
} from "../src/index.js";

const pkgDir = join(import.meta.dirname, "..");

describe("chips", () => {
  it("M1–M5 with Pro and Max variants, every figure with a kind and a source", () => {
    for (const gen of ["m1", "m2", "m3", "m4", "m5"]) {
      for (const v of ["", "-pro", "-max"]) expect(CHIP_IDS).toContain(`${gen}${v}`);
    }
    for (const c of Object.values(CHIPS)) {
      for (const key of [
        "aneTops",
        "aneFp16Tflops",
        "aneGBps",
        "memoryGBps",
        "cpuGflops",
        "cpuGBps",
        "gpuTflops",
        "gpuGBps",
      ] as const) {
        const f = c[key];
        expect(f.value, `${c.id}.${key}`).toBeGreaterThan(0);
        expect(["measured", "published", "derived", "assumed"], `${c.id}.${key}`).toContain(f.kind);
        expect(f.source.length, `${c.id}.${key}`).toBeGreaterThan(10);
      }
    }
  });

  it("ANE bandwidths follow anemll-bench's measured table, not the memory bus", () => {
    const ane = (id: keyof typeof CHIPS) => CHIPS[id].aneGBps;
    expect(ane("m1-pro").value).toBe(55);
    expect(ane("m1-max").value).toBe(55);
    for (const id of ["m1", "m2", "m2-pro", "m2-max", "m3", "m4"] as const) {
      expect(ane(id).value).toBeGreaterThanOrEqual(60);
      expect(ane(id).value).toBeLessThanOrEqual(64);
      expect(ane(id).kind).toBe("measured");
    }
    for (const id of ["m3-max", "m4-pro", "m4-max"] as const) {
      expect(ane(id).value).toBeGreaterThanOrEqual(119);
      expect(ane(id).value).toBeLessThanOrEqual(126);
    }
    expect([ane("m5").value, ane("m5").kind]).toEqual([70, "measured"]);
    expect([ane("m5-max").value, ane("m5-max").kind]).toEqual([148, "measured"]);
    expect(ane("m5-pro").kind).toBe("assumed");
    expect(ane("m3-pro").kind).toBe("assumed");
    expect(CHIPS["m4-pro"].memoryGBps.value).toBe(273);
  });

  it("the default runtime marks its dispatch figure measured and the rest assumed", () => {
    expect(DEFAULT_RUNTIME.dispatchMs).toMatchObject({ value: 1, kind: "measured" });
    expect(DEFAULT_RUNTIME.bandwidthFraction.kind).toBe("assumed");
    expect(DEFAULT_RUNTIME.aneOpMs.value).toBe(0);
  });

  const calibration = join(pkgDir, "bench", "results", "calibration.json");
  it.skipIf(!existsSync(calibration))(
    "calibration.ts holds the figures bench/calibrate.ts last fitted (skipped when bench/results/calibration.json is absent: run `pnpm calibrate`)",
    () => {
      const file = JSON.parse(readFileSync(calibration, "utf8"));
      expect(file.schema).toBe("anemll-qwen35.costplan-calibration");
      const values = (rt: Record<string, { value: number }>) =>
        Object.fromEntries(Object.entries(rt).map(([k, f]) => [k, f.value]));
      expect(values(FITTED_RUNTIME as never)).toEqual(values(file.runtime));
      expect(values(FITTED_BAND.low as never)).toEqual(values(file.band.low));
      expect(values(FITTED_BAND.high as never)).toEqual(values(file.band.high));
      expect(FITTED_RUNTIME.bandwidthFraction.value).toBeLessThanOrEqual(1);
    },
  );

  it("the tool name and version in reports match package.json", () => {
    const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
    expect([TOOL_NAME, TOOL_VERSION]).toEqual([pkg.name, pkg.version]);
  });
});
