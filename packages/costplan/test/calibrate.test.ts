/**
 * Calibration round trip: measurements made from known runtime figures → costplan's fit recovers
 * them → a calibration file → projections of another program under it match the known figures.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MilBuilder, type MlModel, tensorType } from "@anemll-qwen35/ir/mil";
import { afterAll, describe, expect, it } from "vitest";
import {
  ANE_OP_MS_RANGE,
  type Calibration,
  callEstimate,
  costplan,
  DEFAULT_RUNTIME,
  FITTED_BAND,
  fitCalibration,
  MEASUREMENTS_SCHEMA,
  type RuntimeFigures,
  readCalibration,
  readMeasurements,
  samplesFromReport,
  writeCalibration,
} from "../src/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);
const zeros = (n: number) => new Uint16Array(n);

/**
 * A super-block-like program: `proj` projections of d×d weights, `mms` small matmuls (kernels that
 * move little, like a chunked prefill's), a KV cache of `ctx` rows read by attention (the names
 * the converter's mlstate packages use), and `extraIn` fp16 values of I/O passed per prediction.
 */
function program(o: { d: number; proj: number; mms: number; ctx: number; extraIn: number }): MlModel {
  const b = new MilBuilder();
  let x = b.input("hidden", f16([1, o.d]));
  for (let i = 0; i < o.proj; i++) {
    const w = b.const(zeros(o.d * o.d), "fp16", [o.d, o.d], { name: `w${i}` });
    x = b.linear({ x, weight: w, name: `proj${i}` });
  }
  let m = b.input("small", f16([1, 4, 16, 16]));
  for (let i = 0; i < o.mms; i++) m = b.matmul({ x: m, y: m, name: `mm${i}` });
  b.output("m_out", m);
  const q = b.reshape({ x, shape: [1, 2, 1, o.d / 2], name: "q" });
  const k = b.readState({ input: b.state("kv", f16([2, 2, o.ctx, o.d / 2])), name: "kv_all" });
  const kk = b.sliceByIndex({ x: k, begin: [0, 0, 0, 0], end: [1, 2, o.ctx, o.d / 2], name: "k" });
  b.output("o", b.scaledDotProductAttention({ query: q, key: kk, value: kk, name: "att" }));
  if (o.extraIn > 0)
    b.output("pass", b.identity({ x: b.input("pass_in", f16([1, o.extraIn])), name: "pass" }));
  return b.model();
}

/** The figures the measurements are made from. */
const fig = (value: number) => ({ value, kind: "assumed" as const, source: "test: known figure" });
const KNOWN: RuntimeFigures = {
  dispatchMs: fig(0.7),
  bandwidthFraction: fig(0.6),
  switchMs: DEFAULT_RUNTIME.switchMs,
  aneOpMs: fig(0.03),
  ioMsPerMB: fig(0.25),
  kvMsPerMB: fig(0.9),
  kvKneeRows: fig(512),
};
const known: Calibration = { runtime: KNOWN, band: { low: KNOWN, high: KNOWN, source: "test" } };

const SHAPES = [
  { d: 1024, proj: 8, mms: 0, ctx: 256, extraIn: 0 },
  { d: 1024, proj: 8, mms: 0, ctx: 1024, extraIn: 0 },
  { d: 512, proj: 4, mms: 40, ctx: 256, extraIn: 200_000 },
  { d: 2048, proj: 4, mms: 5, ctx: 128, extraIn: 0 },
  { d: 1024, proj: 2, mms: 80, ctx: 512, extraIn: 1_000_000 },
  { d: 512, proj: 12, mms: 10, ctx: 2048, extraIn: 500_000 },
  { d: 2048, proj: 2, mms: 20, ctx: 1024, extraIn: 50_000 },
];

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("costplan calibrate: round trip", () => {
  it("fits the figures a synthetic measurement file was made from, and projects with them", async () => {
    const dir = await mkdtemp(join(tmpdir(), "costplan-cal-"));
    dirs.push(dir);
    // measurements: each program's prediction under the known figures
    const samples = [];
    for (const [i, s] of SHAPES.entries()) {
      const model = program(s);
      const truth = await costplan(model, { native: "off", calibration: known });
      const plain = await costplan(model, { native: "off", calibration: "none" });
      samples.push(
        samplesFromReport(plain, { id: `p${i}`, measuredMs: truth.packages[0].prediction.estimatedMs }),
      );
    }
    const file = join(dir, "measurements.json");
    await writeFile(file, JSON.stringify({ schema: MEASUREMENTS_SCHEMA, schemaVersion: 1, samples }));

    const { samples: read, skipped } = await readMeasurements([file]);
    expect(read).toHaveLength(SHAPES.length);
    expect(skipped).toEqual([]);
    const fit = fitCalibration(read);
    const rt = fit.calibration.runtime;
    // the measurements vary kernels, bytes, I/O and KV independently: every figure is pinned
    expect(fit.opCost).toBe("fitted");
    expect(rt.dispatchMs.value).toBeCloseTo(0.7, 2);
    expect(rt.bandwidthFraction.value).toBeCloseTo(0.6, 3);
    expect(rt.ioMsPerMB?.value).toBeCloseTo(0.25, 2);
    expect(rt.kvMsPerMB?.value).toBeCloseTo(0.9, 2);
    expect(rt.aneOpMs.value).toBeCloseTo(0.03, 3);
    expect(fit.rmsLogError).toBeLessThan(1e-3);
    for (const r of fit.rows) {
      expect(Math.abs(r.error)).toBeLessThan(2e-3);
      expect(Math.abs(r.leaveOneOutError ?? 1)).toBeLessThan(2e-2);
      expect(r.lowMs).toBeLessThanOrEqual(r.predictedMs + 1e-9);
      expect(r.highMs).toBeGreaterThanOrEqual(r.predictedMs - 1e-9);
    }

    // the calibration file, written atomically, read back, projects a program the fit never saw
    const calFile = join(dir, "calibration.json");
    await writeCalibration(calFile, fit, [file]);
    expect(JSON.parse(await readFile(calFile, "utf8")).schema).toBe("anemll-qwen35.costplan-calibration");
    const cal = await readCalibration(calFile);
    const unseen = program({ d: 1536, proj: 6, mms: 30, ctx: 768, extraIn: 300_000 });
    const want = await costplan(unseen, { native: "off", calibration: known });
    const got = await costplan(unseen, { native: "off", calibration: cal });
    const ms = got.packages[0].prediction.estimatedMs;
    expect(ms / want.packages[0].prediction.estimatedMs).toBeCloseTo(1, 2);
    const band = got.packages[0].prediction.band;
    expect(band).toBeDefined();
    expect(band?.lowMs).toBeLessThanOrEqual(ms + 1e-9);
    expect(band?.highMs).toBeGreaterThanOrEqual(ms - 1e-9);
  });

  it("decode-like measurements do not pin the per-op cost: the band spans the published range", async () => {
    // bytes and kernels grow together (the reference study's rows): per-op cost and bandwidth trade off
    const samples = [];
    for (const [i, n] of [2, 4, 8, 12].entries()) {
      const model = program({ d: 1024, proj: n, mms: 0, ctx: 256 * (i + 1), extraIn: 0 });
      const truth = await costplan(model, { native: "off", calibration: known });
      const plain = await costplan(model, { native: "off", calibration: "none" });
      samples.push(
        samplesFromReport(plain, { id: `d${n}`, measuredMs: truth.packages[0].prediction.estimatedMs }),
      );
    }
    const fit = fitCalibration(samples);
    expect(fit.opCost).toBe("published-range");
    expect(fit.calibration.band.low.aneOpMs.value).toBe(ANE_OP_MS_RANGE.low);
    expect(fit.calibration.band.high.aneOpMs.value).toBe(ANE_OP_MS_RANGE.high);
    // a prefill-like program (many kernels, few bytes) projects a wide band; the decode rows a narrow one
    const fitted = { runtime: fit.calibration.runtime, band: fit.calibration.band };
    const prefill = await costplan(program({ d: 512, proj: 2, mms: 100, ctx: 256, extraIn: 0 }), {
      native: "off",
      calibration: fitted,
    });
    const e = callEstimate(prefill, prefill.packages[0].name);
    expect(e.highMs / e.lowMs).toBeGreaterThan(1.3);
    for (const r of fit.rows) expect(r.highMs / r.lowMs).toBeLessThan(1.1);
  });

  it("the default calibration projects a band and prints it", async () => {
    const r = await costplan(program(SHAPES[0]), { native: "off" });
    expect(r.runtimeBand).toEqual(FITTED_BAND);
    const p = r.packages[0].prediction;
    expect(p.band?.lowMs).toBeLessThanOrEqual(p.band?.highMs ?? 0);
    expect(r.totals.estimatedMsBand).toEqual({ low: p.band?.lowMs, high: p.band?.highMs });
    const none = await costplan(program(SHAPES[0]), { native: "off", calibration: "none" });
    expect(none.runtimeBand).toBeUndefined();
    expect(none.packages[0].prediction.band).toBeUndefined();
  });

  it("a measurements file of another kind is refused by name", async () => {
    const dir = await mkdtemp(join(tmpdir(), "costplan-cal-"));
    dirs.push(dir);
    const bad = join(dir, "x.json");
    await writeFile(bad, JSON.stringify({ schema: "something-else" }));
    await expect(readMeasurements([bad])).rejects.toThrow(/x\.json.*schema "something-else"/);
  });
});
