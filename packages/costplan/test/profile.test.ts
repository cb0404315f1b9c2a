/** profile(): interpreter timings per op joined with the estimate, by share of each package. */
import { MilBuilder, type MlModel, tensorType } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import { CostplanOptionError, formatProfile, parseProfile, profile } from "../src/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);

/** A cheap elementwise chain next to a matmul that costs the interpreter far more. */
function sample(): MlModel {
  const b = new MilBuilder();
  const x = b.input("x", f16([1, 8]));
  const y = b.add({ x, y: x, name: "tiny_add" });
  b.output("y", b.mul({ x: y, y }));
  const m = b.input("m", f16([1, 128, 128]));
  const n = b.input("n", f16([1, 128, 128]));
  b.output("mm", b.matmul({ x: m, y: n }));
  return b.model();
}

describe("profile", () => {
  it("times every op, joins the estimate and ranks the disagreements", async () => {
    const p = await profile(sample(), { runs: 3, warmup: 1, top: 3 });
    expect(p.packages).toHaveLength(1);
    const pkg = p.packages[0];
    expect(pkg.interpreterRunsMs).toHaveLength(3);
    expect(pkg.ops.map((o) => o.name).sort()).toEqual(["mm", "tiny_add", "y"]);
    const share = pkg.ops.reduce((s, o) => s + o.measuredShare, 0);
    expect(share).toBeCloseTo(1, 6);
    expect(pkg.ops.reduce((s, o) => s + o.estimatedShare, 0)).toBeCloseTo(1, 6);
    const big = pkg.ops.find((o) => o.name === "mm");
    // 128³ multiply-adds against 8 adds: the interpreter spends nearly all its time there
    expect(big?.measuredShare).toBeGreaterThan(0.5);
    expect(big?.flops).toBeGreaterThan(1e6);
    expect(p.disagreements.length).toBe(3);
    const gaps = p.disagreements.map((d) => Math.abs(d.shareGap));
    expect([...gaps].sort((a, b) => b - a)).toEqual(gaps);
    expect(p.chain.interpreterMsPerToken).toBeCloseTo(pkg.interpreterMs, 9);
    // the untimed runs beside the timed ones: the profiler's own share is printed
    expect(pkg.uninstrumentedMs).toBeGreaterThan(0);
    expect(p.chain.uninstrumentedMsPerToken).toBeCloseTo(pkg.uninstrumentedMs!, 9);
    expect(formatProfile(p)).toMatch(
      /instrumentation: the same runs without per-op timing take .* a token, so .* of the interpreter's figure is this profiler's own timing/,
    );
    if (process.platform !== "darwin") {
      expect(p.coreml.timed).toBe(false);
      expect(p.coreml.reason).toMatch(/macOS|darwin|linux/i);
      expect(pkg.coremlMs).toBeUndefined();
      expect(formatProfile(p)).toMatch(/Core ML timing: unavailable/);
    }
    // a saved report reads back; a damaged one is named
    expect(parseProfile(JSON.parse(JSON.stringify(p))).packages[0].name).toBe(pkg.name);
    expect(() => parseProfile({ ...p, schemaVersion: 9 })).toThrow(/schemaVersion/);
  });

  it("rejects bad options with a typed error", async () => {
    await expect(profile(sample(), { runs: 0 })).rejects.toBeInstanceOf(CostplanOptionError);
    await expect(profile(sample(), { precision: "fp8" as "fp16" })).rejects.toThrow(/precision/);
  });
});
