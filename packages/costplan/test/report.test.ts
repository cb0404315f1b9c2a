/** The report: schema round trip, roofline times, re-timing, text sections, compare. */
import { MilBuilder, type MlModel, tensorType } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import {
  CHIPS,
  compareReports,
  costplan,
  formatComparison,
  formatReport,
  parseReport,
  REPORT_SCHEMA_VERSION,
  ReportSchemaError,
  retime,
} from "../src/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);

/** x → conv (weights) → int32 detour → add; plus a compute-bound matmul. */
function sample(): MlModel {
  const b = new MilBuilder();
  const x = b.input("x", f16([1, 64, 1, 1]));
  const w = b.const(new Uint16Array(128 * 64), "fp16", [128, 64, 1, 1], { name: "w" });
  const y = b.conv({ x, weight: w, name: "proj" });
  const i = b.cast({ x: y, dtype: "int32", name: "to_int" });
  const back = b.cast({ x: i, dtype: "fp16", name: "to_fp" });
  b.output("y", b.add({ x: back, y, name: "sum" }));
  const m = b.input("m", f16([1, 1024, 1024]));
  const n = b.input("n", f16([1, 1024, 1024]));
  b.output("mm", b.matmul({ x: m, y: n, name: "big" }));
  return b.model();
}

/** One attention layer reading a KV state of length `ctx`. */
function attention(ctx: number): MlModel {
  const [H, D] = [2, 64];
  const b = new MilBuilder();
  const q = b.input("q", f16([1, H, 1, D]));
  const mask = b.input("mask", f16([1, 1, 1, ctx]));
  const k = b.readState({ input: b.state("k", f16([1, H, ctx, D])), name: "k_all" });
  const v = b.readState({ input: b.state("v", f16([1, H, ctx, D])), name: "v_all" });
  b.output("o", b.scaledDotProductAttention({ query: q, key: k, value: v, attnMask: mask, name: "att" }));
  return b.model();
}

describe("report", () => {
  it("validates against the schema after a JSON round trip, and rejects a broken one naming the field", async () => {
    const r = await costplan(sample(), { native: "off" });
    expect(r.schemaVersion).toBe(REPORT_SCHEMA_VERSION);
    expect(r.source).toBe("static-estimate");
    const back = parseReport(JSON.parse(JSON.stringify(r)));
    expect(back).toEqual(JSON.parse(JSON.stringify(r)));
    const broken = JSON.parse(JSON.stringify(r));
    broken.packages[0].functions[0].ops[2].device = "TPU";
    expect(() => parseReport(broken, "r.json")).toThrow(ReportSchemaError);
    expect(() => parseReport(broken, "r.json")).toThrow(/r\.json: packages\.0\.functions\.0\.ops\.2\.device/);
    const noTotals = { ...JSON.parse(JSON.stringify(r)), totals: undefined };
    expect(() => parseReport(noTotals)).toThrow(/totals/);
  });

  it("times ops by the roofline: memory-bound by bytes / bandwidth, compute-bound by FLOPs / peak", async () => {
    const r = await costplan(sample(), { chip: "m4-pro", calibration: "none", native: "off" });
    const ops = r.packages[0].functions[0].ops;
    const chip = CHIPS["m4-pro"];
    const conv = ops.find((o) => o.name === "proj");
    const bytes = 128 * 64 * 2 + 64 * 2 + 128 * 2;
    expect(conv?.bound).toBe("memory");
    expect(conv?.estimatedMs).toBeCloseTo((bytes / (chip.aneGBps.value * 1e9)) * 1e3, 12);
    const big = ops.find((o) => o.name === "mm");
    expect(big?.bound).toBe("compute");
    expect(big?.estimatedMs).toBeCloseTo(((2 * 1024 ** 3) / (chip.aneFp16Tflops.value * 1e12)) * 1e3, 12);
    const cast = ops.find((o) => o.name === "to_int");
    expect(cast?.device).toBe("CPU");
    expect(cast?.estimatedMs).toBeCloseTo(((128 * 2 + 128 * 4) / (chip.cpuGBps.value * 1e9)) * 1e3, 12);
    // one prediction: Σ ops + 2 switches + dispatch
    const p = r.packages[0];
    const opMs = ops.reduce((s, o) => s + o.estimatedMs, 0);
    expect(p.prediction.estimatedMs).toBeCloseTo(
      opMs + 2 * r.runtime.switchMs.value + r.runtime.dispatchMs.value,
      12,
    );
    expect(r.runtime.dispatchMs.kind).toBe("measured");
  });

  it("re-times for another chip: memory-bound ANE time scales with the ANE bandwidth", async () => {
    const r = await costplan(sample(), { chip: "m4-pro", calibration: "none", native: "off" });
    const m1 = retime(r, { chip: CHIPS.m1 });
    const conv = (x: typeof r) =>
      x.packages[0].functions[0].ops.find((o) => o.name === "proj")?.estimatedMs ?? 0;
    expect(conv(m1) / conv(r)).toBeCloseTo(CHIPS["m4-pro"].aneGBps.value / CHIPS.m1.aneGBps.value, 10);
    expect(m1.chip.id).toBe("m1");
    expect(r.chip.id).toBe("m4-pro"); // the original is untouched
    const slow = retime(r, { runtime: { dispatchMs: { value: 5, kind: "assumed", source: "test" } } });
    expect(slow.totals.estimatedMs - r.totals.estimatedMs).toBeCloseTo(5 - r.runtime.dispatchMs.value, 10);
  });

  it("a prediction pays for passing its inputs and outputs (ioMsPerMB), states excluded — why io KV grows with ctx", async () => {
    const io = (ctx: number) => {
      const b = new MilBuilder();
      const q = b.input("q", f16([1, 2, 1, 64]));
      const k = b.input("k_cache", f16([1, 2, ctx, 64]));
      const s = b.state("v", f16([1, 2, ctx, 64]));
      const v = b.readState({ input: s, name: "v_all" });
      b.output("o", b.scaledDotProductAttention({ query: q, key: k, value: v, name: "att" }));
      return b.model();
    };
    const rate = { value: 0.5, kind: "assumed" as const, source: "test" };
    for (const ctx of [256, 1024]) {
      const r = await costplan(io(ctx), { calibration: "none", native: "off", runtime: { ioMsPerMB: rate } });
      const f = r.packages[0].functions[0];
      const bytes = 2 * 64 * 2 + 2 * ctx * 64 * 2 + 2 * 64 * 2; // q and the k cache in, o out; the state is no I/O
      expect(f.io).toEqual({ inputBytes: 2 * 64 * 2 + 2 * ctx * 64 * 2, outputBytes: 2 * 64 * 2 });
      expect(r.packages[0].prediction.ioMs).toBeCloseTo((bytes / 1e6) * 0.5, 12);
      expect(r.packages[0].prediction.estimatedMs).toBeCloseTo(
        f.summary.estimatedMs + r.runtime.dispatchMs.value + (bytes / 1e6) * 0.5,
        12,
      );
    }
    const free = await costplan(io(256), { calibration: "none", native: "off" });
    expect(free.packages[0].prediction.ioMs).toBe(0); // the physics-only model passes I/O for free
  });

  it("the calibrated default uses the fitted figures and says so", async () => {
    const r = await costplan(sample(), { native: "off" });
    expect(r.runtime.dispatchMs.kind).toBe("fitted");
    expect(r.runtime.bandwidthFraction.kind).toBe("fitted");
    expect(r.runtime.ioMsPerMB?.kind).toBe("fitted");
    expect(r.notes.join("\n")).toMatch(/fitted/);
    expect(r.notes.join("\n")).toMatch(/not measurements/);
  });

  it("text report: summary, op types, top ops, interruptions, fallbacks with reasons, figures", async () => {
    const text = formatReport(await costplan(sample(), { native: "off" }));
    for (const s of [
      "Summary",
      "Op types",
      "Top ",
      "Graph interruptions",
      "CPU/GPU fallbacks (2)",
      "Figures the times rest on",
    ]) {
      expect(text).toContain(s);
    }
    expect(text).toContain("int32-tensor: the ANE has no int32 tensors");
    expect(text).toContain("INT#1 CPU");
    expect(text).toContain("PREDICTED");
  });

  it("compare: per-op-type and total deltas of ctx 64 → 256", async () => {
    const a = await costplan(attention(64), { native: "off" });
    const b = await costplan(attention(256), { native: "off" });
    const c = compareReports(a, b);
    const sdpa = c.opTypes.find((o) => o.type === "scaled_dot_product_attention");
    // K and V [1, 2, ctx, 64] fp16 plus the [1, 1, 1, ctx] fp16 mask grow by 192 positions
    expect(sdpa?.bytes.delta).toBe(2 * (2 * 192 * 64 * 2) + 192 * 2);
    expect(c.totals.estimatedMs.delta).toBeGreaterThan(0);
    expect(c.totals.estimatedMs.delta).toBeCloseTo(b.totals.estimatedMs - a.totals.estimatedMs, 12);
    expect(c.totals.predictions.delta).toBe(0);
    expect(c.opTypes[0].type).toBe("scaled_dot_product_attention"); // largest |Δ time| first
    const text = formatComparison(c);
    expect(text).toContain("Totals");
    expect(text).toContain("scaled_dot_product_attention");
    expect(text).toMatch(/estimated per step .* \+/);
  });
});
