/**
 * Calibration from measurements: the runtime figures the physics leaves free — dispatch per
 * prediction, the attainable fraction of the ANE's bandwidth, passing inputs/outputs (ms per MB),
 * the ctx term (ms per MB of KV rows up to the knee) and the per-op ANE cost — fitted to measured
 * prediction times, with leave-one-out errors and the projections' band.
 *
 * A measurement (`CalibrationSample`) is a measured time and the work of the predictions it
 * covers (`PredictionWork`: each ANE op's FLOPs and bytes, what does not depend on the figures, the
 * bytes passed, the KV read). `samplesFromReport` makes them from a costplan report;
 * `readMeasurements` reads them from `profile -j` / `doctor --selftest` reports, costplan reports
 * with measured predictions, or a measurements file (`MEASUREMENTS_SCHEMA`).
 *
 * The fit: least squares of the relative error (≈ ln(predicted / measured) for small errors) over
 * a grid of bandwidth fractions in (0, 1], the other figures solved exactly for each fraction
 * within their bounds (every combination of free / at-bound figures tried); the fraction whose
 * solution has the least log error wins. The per-op cost is nearly collinear with the bandwidth
 * fraction on decode measurements (op count and bytes grow together), so unless the measurements
 * pin it (the free fit and every leave-one-out fit agree within 2×), it is taken over
 * ANE_OP_MS_RANGE: one fit with it at each end, the band of the projections.
 */
import { readFile } from "node:fs/promises";
import { z } from "zod";
import { kvChargedMB } from "./assemble.js";
import {
  ANE_OP_MS_RANGE,
  CHIPS,
  type ChipId,
  DEFAULT_RUNTIME,
  type Figure,
  type RuntimeFigures,
} from "./chips.js";
import { ReportSchemaError } from "./errors.js";
import { ANE_KERNEL_OPS } from "./op-table.js";
import { type CostReport, FigureSchema, parseReport, type RuntimeBand } from "./report.js";
import { deviceRates } from "./roofline.js";
import { writeJsonAtomic } from "./units.js";
import { TOOL_NAME, TOOL_VERSION } from "./version.js";

const nonneg = z.number().finite().nonnegative();

export const PredictionWorkSchema = z.object({
  package: z.string().optional(),
  /** Identical predictions this entry stands for (default 1). */
  count: z.number().int().positive().optional(),
  /** CPU/GPU op time at the sample's chip: no fitted figure touches it. */
  fixedMs: nonneg,
  /** ANE ↔ other-device boundaries (each costs runtime switchMs). */
  switches: z.number().int().nonnegative(),
  /** Bytes of the inputs and outputs a prediction passes (states excluded). */
  ioBytes: nonneg,
  kv: z
    .object({
      parts: z.number().int().nonnegative(),
      rows: z.number().int().nonnegative(),
      bytesPerRow: nonneg,
    })
    .optional(),
  /** ANE kernel ops (pay the per-op cost). */
  kernels: z.number().int().nonnegative(),
  /** [FLOPs, bytes moved] of every ANE op that does work. */
  ane: z.array(z.tuple([nonneg, nonneg])),
});

export const CalibrationSampleSchema = z.object({
  id: z.string().min(1),
  what: z.string().optional(),
  chip: z.string(),
  /** Measured ms (divided by `divisor`: e.g. ms per super-block of a package of `divisor`). */
  measuredMs: z.number().finite().positive(),
  divisor: z.number().positive().optional(),
  /** "fit" (default) goes into the fit; "held-out" and "reference" are only predicted. */
  role: z.enum(["fit", "held-out", "reference"]).optional(),
  predictions: z.array(PredictionWorkSchema).min(1),
});

export type PredictionWork = z.infer<typeof PredictionWorkSchema>;
export type CalibrationSample = z.infer<typeof CalibrationSampleSchema>;

export const MEASUREMENTS_SCHEMA = "anemll-qwen35.costplan-measurements";
export const MeasurementsSchema = z.object({
  schema: z.literal(MEASUREMENTS_SCHEMA),
  schemaVersion: z.literal(1),
  samples: z.array(CalibrationSampleSchema).min(1),
});

export const CALIBRATION_SCHEMA = "anemll-qwen35.costplan-calibration";
export const CALIBRATION_SCHEMA_VERSION = 1;

const RuntimeFileSchema = z.object({
  dispatchMs: FigureSchema,
  bandwidthFraction: FigureSchema,
  switchMs: FigureSchema,
  aneOpMs: FigureSchema,
  ioMsPerMB: FigureSchema,
  kvMsPerMB: FigureSchema,
  kvKneeRows: FigureSchema,
});

const FitRowSchema = z.object({
  id: z.string(),
  role: z.enum(["fit", "held-out", "reference"]),
  measuredMs: nonneg,
  predictedMs: nonneg,
  error: z.number(),
  leaveOneOutMs: nonneg.optional(),
  leaveOneOutError: z.number().optional(),
  lowMs: nonneg,
  highMs: nonneg,
});

export const CalibrationFileSchema = z.object({
  schema: z.literal(CALIBRATION_SCHEMA),
  schemaVersion: z.literal(CALIBRATION_SCHEMA_VERSION),
  createdAt: z.string(),
  tool: z.object({ name: z.string(), version: z.string() }),
  from: z.array(z.string()),
  runtime: RuntimeFileSchema,
  band: z.object({ low: RuntimeFileSchema, high: RuntimeFileSchema, source: z.string() }),
  fit: z.object({
    samples: z.number().int().nonnegative(),
    rmsLogError: nonneg,
    /** "fitted": the measurements pinned the per-op cost; "published-range": they did not. */
    opCost: z.enum(["fitted", "published-range"]),
    rows: z.array(FitRowSchema),
  }),
});

export type FitRow = z.infer<typeof FitRowSchema>;
export type CalibrationFile = z.infer<typeof CalibrationFileSchema>;

/** Runtime figures and the band: what `costplan({ calibration })` takes. */
export interface Calibration {
  readonly runtime: RuntimeFigures;
  readonly band: RuntimeBand;
}

export interface CalibrationFit {
  readonly calibration: Calibration;
  readonly rows: readonly FitRow[];
  readonly rmsLogError: number;
  readonly opCost: "fitted" | "published-range";
  /** The figures of each leave-one-out fit, by sample id. */
  readonly leaveOneOut: ReadonlyMap<string, Figures>;
}

/** The fitted numbers. */
export interface Figures {
  readonly dispatchMs: number;
  readonly bandwidthFraction: number;
  readonly ioMsPerMB: number;
  readonly kvMsPerMB: number;
  readonly aneOpMs: number;
}

export interface FitOptions {
  /** The per-op cost's range when the measurements do not pin it (default ANE_OP_MS_RANGE). */
  readonly opRange?: { readonly low: number; readonly high: number; readonly source: string };
  /** KV rows per layer past which the ctx term is flat (default DEFAULT_RUNTIME's 512). */
  readonly kneeRows?: number;
  /** Where the measurements came from (recorded in sources). */
  readonly from?: string;
}

// --- work from a report --------------------------------------------------------------------------

const moved = (op: CostReport["packages"][number]["functions"][number]["ops"][number]) =>
  op.bytesRead.weights +
  op.bytesRead.activations +
  op.bytesRead.state +
  op.bytesWritten.activations +
  op.bytesWritten.state;

/** The work of one prediction of `functionName` (default: the decode function) of a report's package. */
export function workOf(report: CostReport, packageName: string, functionName?: string): PredictionWork {
  const pkg = report.packages.find((p) => p.name === packageName);
  const f = pkg?.functions.find((x) => x.name === (functionName ?? pkg.decodeFunction));
  if (!pkg || !f)
    throw new ReportSchemaError("report", `no package/function ${packageName}/${functionName ?? "(decode)"}`);
  let fixedMs = 0;
  let kernels = 0;
  const ane: [number, number][] = [];
  for (const op of f.ops) {
    if (op.device === "load") continue;
    if (op.device !== "ANE") {
      fixedMs += op.estimatedMs;
      continue;
    }
    const bytes = moved(op);
    if (op.flops === 0 && bytes === 0) continue;
    ane.push([op.flops, bytes]);
    if (ANE_KERNEL_OPS.has(op.type)) kernels++;
  }
  const switches = f.interruptions.count * 2 + f.interruptions.edgeRuns;
  return {
    package: pkg.name,
    fixedMs,
    switches,
    ioBytes: f.io ? f.io.inputBytes + f.io.outputBytes : 0,
    kv: f.kv,
    kernels,
    ane,
  };
}

/** A measurement of a report's packages (default: every package once — a chain's token). */
export function samplesFromReport(
  report: CostReport,
  s: Omit<CalibrationSample, "chip" | "predictions"> & { packages?: readonly string[] },
): CalibrationSample {
  const names = s.packages ?? report.packages.map((p) => p.name);
  const { packages: _, ...rest } = s;
  return { ...rest, chip: report.chip.id, predictions: names.map((n) => workOf(report, n)) };
}

// --- the fit ------------------------------------------------------------------------------------

const PARAMS = ["dispatchMs", "ioMsPerMB", "kvMsPerMB", "aneOpMs"] as const;
type Bounds = readonly (readonly [number, number])[];

interface Prepared {
  readonly s: CalibrationSample;
  readonly target: number;
  /** Σ count × (fixed + switches); the per-fraction ANE roofline is computed lazily. */
  readonly constMs: number;
  readonly x: readonly number[];
  readonly aneMs: (fraction: number) => number;
}

function prepare(s: CalibrationSample, kneeRows: number): Prepared {
  const chip = CHIPS[s.chip as ChipId];
  if (!chip)
    throw new ReportSchemaError(s.id, `unknown chip "${s.chip}" (known: ${Object.keys(CHIPS).join(", ")})`);
  const switchMs = DEFAULT_RUNTIME.switchMs.value;
  let constMs = 0;
  const x = [0, 0, 0, 0];
  for (const p of s.predictions) {
    const n = p.count ?? 1;
    constMs += n * (p.fixedMs + p.switches * switchMs);
    x[0] += n;
    x[1] += (n * p.ioBytes) / 1e6;
    x[2] += n * kvChargedMB(p.kv, { kvKneeRows: { value: kneeRows, kind: "assumed", source: "" } });
    x[3] += n * p.kernels;
  }
  const cache = new Map<number, number>();
  const aneMs = (fraction: number) => {
    let v = cache.get(fraction);
    if (v === undefined) {
      const r = deviceRates("ANE", chip, {
        bandwidthFraction: { value: fraction, kind: "fitted", source: "" },
      });
      v = 0;
      for (const p of s.predictions) {
        let one = 0;
        for (const [flops, bytes] of p.ane) one += Math.max(flops / r.flops, bytes / r.bytes) * 1e3;
        v += (p.count ?? 1) * one;
      }
      cache.set(fraction, v);
    }
    return v;
  };
  return { s, target: s.measuredMs * (s.divisor ?? 1), constMs, x, aneMs };
}

const predicted = (p: Prepared, fraction: number, theta: readonly number[]) =>
  (p.constMs + p.aneMs(fraction) + p.x.reduce((acc, xi, i) => acc + xi * theta[i], 0)) / (p.s.divisor ?? 1);

/** Solves the small dense system A·z = b (Gaussian elimination, partial pivoting); undefined if singular. */
function solve(a: number[][], b: number[]): number[] | undefined {
  const n = b.length;
  const m = a.map((row, i) => [...row, b[i]]);
  for (let c = 0; c < n; c++) {
    let piv = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(m[r][c]) > Math.abs(m[piv][c])) piv = r;
    if (Math.abs(m[piv][c]) < 1e-12 * Math.max(1, Math.abs(m[c][c]))) return undefined;
    [m[c], m[piv]] = [m[piv], m[c]];
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = m[r][c] / m[c][c];
      for (let k = c; k <= n; k++) m[r][k] -= f * m[c][k];
    }
  }
  return m.map((row, i) => row[n] / row[i]);
}

/** min Σ (a·θ − b)² with θ within bounds: every free / at-lower / at-upper combination. */
function boundedLeastSquares(
  a: readonly number[][],
  b: readonly number[],
  bounds: Bounds,
): number[] | undefined {
  const k = bounds.length;
  let best: { theta: number[]; loss: number } | undefined;
  const states = new Array<number>(k).fill(0);
  const total = 3 ** k;
  for (let code = 0; code < total; code++) {
    let c = code;
    for (let i = 0; i < k; i++) {
      states[i] = c % 3;
      c = Math.floor(c / 3);
    }
    // a pinned figure (lower = upper) is never free; an infinite upper bound is never "at upper"
    if (
      states.some(
        (st, i) =>
          (st === 0 && bounds[i][0] === bounds[i][1]) || (st === 2 && !Number.isFinite(bounds[i][1])),
      )
    )
      continue;
    const theta = states.map((st, i) => (st === 1 ? bounds[i][0] : st === 2 ? bounds[i][1] : 0));
    const free = states.flatMap((st, i) => (st === 0 ? [i] : []));
    if (free.length > 0) {
      const rhs = b.map(
        (bi, r) => bi - a[r].reduce((acc, v, i) => acc + (states[i] === 0 ? 0 : v * theta[i]), 0),
      );
      const ata = free.map((i) => free.map((j) => a.reduce((acc, row) => acc + row[i] * row[j], 0)));
      const atb = free.map((i) => a.reduce((acc, row, r) => acc + row[i] * rhs[r], 0));
      const z = solve(ata, atb);
      if (!z) continue;
      let ok = true;
      free.forEach((i, j) => {
        theta[i] = z[j];
        if (z[j] < bounds[i][0] - 1e-12 || z[j] > bounds[i][1] + 1e-12) ok = false;
      });
      if (!ok) continue;
    }
    const loss = a.reduce(
      (acc, row, r) => acc + (row.reduce((s, v, i) => s + v * theta[i], 0) - b[r]) ** 2,
      0,
    );
    if (!best || loss < best.loss - 1e-15) best = { theta, loss };
  }
  return best?.theta;
}

const FRACTIONS = Array.from({ length: 181 }, (_, i) => Math.round((0.1 + i * 0.005) * 1e6) / 1e6);

function fitFigures(
  rows: readonly Prepared[],
  opBounds: readonly [number, number],
): { f: Figures; loss: number } {
  const bounds: Bounds = [[0, 20], [0, 10], [0, 50], opBounds];
  let best: { f: Figures; loss: number } | undefined;
  for (const fraction of FRACTIONS) {
    // residual pred/measured − 1 = a·θ − b
    const a = rows.map((p) => p.x.map((xi) => xi / p.target));
    const b = rows.map((p) => 1 - (p.constMs + p.aneMs(fraction)) / p.target);
    const theta = boundedLeastSquares(a, b, bounds);
    if (!theta) continue;
    let loss = 0;
    for (const p of rows) {
      const pr = predicted(p, fraction, theta);
      loss += pr > 0 ? Math.log(pr / p.s.measuredMs) ** 2 : Number.POSITIVE_INFINITY;
    }
    if (!best || loss < best.loss) {
      const [dispatchMs, ioMsPerMB, kvMsPerMB, aneOpMs] = theta;
      best = { f: { dispatchMs, bandwidthFraction: fraction, ioMsPerMB, kvMsPerMB, aneOpMs }, loss };
    }
  }
  if (!best)
    throw new ReportSchemaError("measurements", "no fit: the measurements admit no figures within bounds");
  return best;
}

const predictWith = (p: Prepared, f: Figures) =>
  predicted(
    p,
    f.bandwidthFraction,
    PARAMS.map((k) => f[k]),
  );

const r4 = (x: number) => Math.round(x * 1e4) / 1e4;

function runtimeFrom(f: Figures, kneeRows: number, source: string): RuntimeFigures {
  const fig = (value: number): Figure => ({ value: r4(value), kind: "fitted", source });
  return {
    dispatchMs: fig(f.dispatchMs),
    bandwidthFraction: fig(f.bandwidthFraction),
    switchMs: DEFAULT_RUNTIME.switchMs,
    aneOpMs: fig(f.aneOpMs),
    ioMsPerMB: fig(f.ioMsPerMB),
    kvMsPerMB: fig(f.kvMsPerMB),
    kvKneeRows: { ...(DEFAULT_RUNTIME.kvKneeRows as Figure), value: kneeRows },
  };
}

/** Fits the runtime figures to `samples` (role "fit"); predicts every sample; leave-one-out per fit row. */
export function fitCalibration(
  samples: readonly CalibrationSample[],
  options: FitOptions = {},
): CalibrationFit {
  const kneeRows = options.kneeRows ?? DEFAULT_RUNTIME.kvKneeRows?.value ?? 512;
  const range = options.opRange ?? ANE_OP_MS_RANGE;
  const all = samples.map((s) => prepare(s, kneeRows));
  const fitRows = all.filter((p) => (p.s.role ?? "fit") === "fit");
  if (fitRows.length < 2)
    throw new ReportSchemaError(
      "measurements",
      `needs at least 2 measurements to fit, got ${fitRows.length}`,
    );
  const OPEN: readonly [number, number] = [0, 0.2];
  // can the measurements pin the per-op cost? the free fit and every leave-one-out fit must agree
  const free = fitFigures(fitRows, OPEN).f;
  const freeLoo =
    fitRows.length > 2
      ? fitRows.map(
          (p) =>
            fitFigures(
              fitRows.filter((o) => o !== p),
              OPEN,
            ).f.aneOpMs,
        )
      : [];
  const pinned =
    free.aneOpMs > OPEN[0] + 1e-6 &&
    free.aneOpMs < OPEN[1] - 1e-6 &&
    freeLoo.length > 0 &&
    freeLoo.every((v) => v >= free.aneOpMs / 2 && v <= free.aneOpMs * 2);
  const lo = pinned ? Math.min(free.aneOpMs, ...freeLoo) : range.low;
  const hi = pinned ? Math.max(free.aneOpMs, ...freeLoo) : range.high;
  const from = options.from ? ` to ${options.from}` : "";
  const source = `fitted${from}: least squares over ${fitRows.length} measurements (costplan calibrate)`;
  const centralBounds: readonly [number, number] = pinned ? [free.aneOpMs, free.aneOpMs] : [lo, hi];
  const central = fitFigures(fitRows, centralBounds);
  const low = fitFigures(fitRows, [lo, lo]).f;
  const high = fitFigures(fitRows, [hi, hi]).f;
  const loo = new Map<string, Figures>();
  if (fitRows.length > 2)
    for (const p of fitRows)
      loo.set(
        p.s.id,
        fitFigures(
          fitRows.filter((o) => o !== p),
          centralBounds,
        ).f,
      );
  const bandSource = pinned
    ? `per-op cost fitted: ${(lo * 1e3).toFixed(1)}–${(hi * 1e3).toFixed(1)} µs over the fit and its leave-one-out fits${from}`
    : `per-op cost not pinned by the measurements: ${range.source}; each end fitted with the other figures${from}`;
  const rows: FitRow[] = all.map((p) => {
    const pred = predictWith(p, central.f);
    const l = loo.get(p.s.id);
    const looMs = l ? predictWith(p, l) : undefined;
    const [a, b] = [predictWith(p, low), predictWith(p, high)];
    return {
      id: p.s.id,
      role: p.s.role ?? "fit",
      measuredMs: p.s.measuredMs,
      predictedMs: pred,
      error: pred / p.s.measuredMs - 1,
      leaveOneOutMs: looMs,
      leaveOneOutError: looMs === undefined ? undefined : looMs / p.s.measuredMs - 1,
      lowMs: Math.min(a, b, pred),
      highMs: Math.max(a, b, pred),
    };
  });
  return {
    calibration: {
      runtime: runtimeFrom(central.f, kneeRows, source),
      band: {
        low: runtimeFrom(low, kneeRows, source),
        high: runtimeFrom(high, kneeRows, source),
        source: bandSource,
      },
    },
    rows,
    rmsLogError: Math.sqrt(central.loss / fitRows.length),
    opCost: pinned ? "fitted" : "published-range",
    leaveOneOut: loo,
  };
}

// --- files --------------------------------------------------------------------------------------

const fullRuntime = (r: RuntimeFigures) => ({
  ...r,
  ioMsPerMB: r.ioMsPerMB,
  kvMsPerMB: r.kvMsPerMB ?? (DEFAULT_RUNTIME.kvMsPerMB as Figure),
  kvKneeRows: r.kvKneeRows ?? (DEFAULT_RUNTIME.kvKneeRows as Figure),
});

/** The calibration file of a fit (CALIBRATION_SCHEMA). */
export function calibrationFile(fit: CalibrationFit, from: readonly string[]): CalibrationFile {
  const { runtime, band } = fit.calibration;
  return {
    schema: CALIBRATION_SCHEMA,
    schemaVersion: CALIBRATION_SCHEMA_VERSION,
    createdAt: new Date().toISOString(),
    tool: { name: TOOL_NAME, version: TOOL_VERSION },
    from: [...from],
    runtime: fullRuntime(runtime),
    band: {
      low: fullRuntime(band.low as RuntimeFigures),
      high: fullRuntime(band.high as RuntimeFigures),
      source: band.source,
    },
    fit: { samples: fit.rows.length, rmsLogError: fit.rmsLogError, opCost: fit.opCost, rows: [...fit.rows] },
  };
}

/** Writes a calibration file atomically (temp file, then rename). */
export async function writeCalibration(
  file: string,
  fit: CalibrationFit,
  from: readonly string[],
): Promise<void> {
  await writeJsonAtomic(file, calibrationFile(fit, from));
}

async function readJson(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (cause) {
    throw new ReportSchemaError(file, `cannot be read: ${(cause as Error).message}`, { cause });
  }
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ReportSchemaError(file, `is not valid JSON: ${(cause as Error).message}`, { cause });
  }
}

function parseWith<T>(schema: z.ZodType<T>, value: unknown, where: string): T {
  const r = schema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ReportSchemaError(where, `${issue.path.join(".") || "(root)"}: ${issue.message}`, {
      cause: r.error,
    });
  }
  return r.data;
}

/** Reads a calibration file (what `--calibration FILE` takes). */
export async function readCalibration(file: string): Promise<Calibration> {
  const c = parseWith(CalibrationFileSchema, await readJson(file), file);
  return { runtime: c.runtime, band: c.band };
}

/** "Apple M4 Pro" or "m4-pro" → "m4-pro". */
function chipIdOf(name: string | undefined): ChipId | undefined {
  if (!name) return undefined;
  const id = name
    .toLowerCase()
    .replace(/^apple\s+/, "")
    .trim()
    .replace(/\s+/g, "-");
  return id in CHIPS ? (id as ChipId) : undefined;
}

const ProfileLike = z.looseObject({
  schema: z.literal("anemll-qwen35.profile"),
  chip: z.string(),
  packages: z.array(
    z.looseObject({
      name: z.string(),
      coremlMs: z.number().optional(),
      work: PredictionWorkSchema.optional(),
    }),
  ),
});
const SelftestLike = z.looseObject({
  schema: z.literal("anemll-qwen35.selftest"),
  platform: z.looseObject({ chip: z.string().optional() }),
  steps: z.array(z.looseObject({ id: z.string(), details: z.record(z.string(), z.unknown()).optional() })),
});
const SelftestChains = z.object({
  chains: z.array(
    z.looseObject({
      kv: z.string(),
      packages: z.array(
        z.looseObject({
          package: z.string(),
          measuredMs: z.number().optional(),
          work: PredictionWorkSchema.optional(),
        }),
      ),
    }),
  ),
});

/**
 * The measurements in `files`: measurements files, `profile -j` reports (packages timed through
 * Core ML), `doctor --selftest` reports (its measured-timing step) and costplan reports with
 * measured predictions. Entries without a measured time or without their work are skipped, and
 * `skipped` says why.
 */
export async function readMeasurements(
  files: readonly string[],
): Promise<{ samples: CalibrationSample[]; skipped: string[] }> {
  const samples: CalibrationSample[] = [];
  const skipped: string[] = [];
  for (const file of files) {
    const raw = await readJson(file);
    const schema = (raw as { schema?: unknown })?.schema;
    if (schema === MEASUREMENTS_SCHEMA) {
      samples.push(...parseWith(MeasurementsSchema, raw, file).samples);
    } else if (schema === "anemll-qwen35.profile") {
      const p = parseWith(ProfileLike, raw, file);
      for (const pkg of p.packages) {
        if (pkg.coremlMs === undefined || !pkg.work) {
          skipped.push(
            `${file}: ${pkg.name}: ${pkg.coremlMs === undefined ? "not timed through Core ML" : "no work recorded (profile older than calibrate)"}`,
          );
          continue;
        }
        samples.push({
          id: `${file}:${pkg.name}`,
          chip: p.chip,
          measuredMs: pkg.coremlMs,
          predictions: [pkg.work],
        });
      }
    } else if (schema === "anemll-qwen35.selftest") {
      const s = parseWith(SelftestLike, raw, file);
      const chip = chipIdOf(s.platform.chip);
      const step = s.steps.find((x) => x.id === "timing:measured");
      const d = step?.details ? SelftestChains.safeParse(step.details) : undefined;
      if (!chip || !d?.success) {
        skipped.push(
          `${file}: ${!chip ? `chip "${s.platform.chip ?? "unknown"}" has no profile` : "no measured timing step"}`,
        );
        continue;
      }
      for (const c of d.data.chains)
        for (const pkg of c.packages) {
          if (pkg.measuredMs === undefined || !pkg.work) {
            skipped.push(`${file}: ${c.kv}/${pkg.package}: no measured time or no work recorded`);
            continue;
          }
          samples.push({
            id: `${file}:${c.kv}/${pkg.package}`,
            chip,
            measuredMs: pkg.measuredMs,
            predictions: [pkg.work],
          });
        }
    } else if (schema === "anemll-qwen35.costplan") {
      const r = parseReport(raw, file);
      for (const pkg of r.packages) {
        if (pkg.prediction.measuredMs === undefined) {
          skipped.push(`${file}: ${pkg.name}: no measured prediction (costplan --measure on a Mac)`);
          continue;
        }
        samples.push({
          id: `${file}:${pkg.name}`,
          chip: r.chip.id,
          measuredMs: pkg.prediction.measuredMs,
          predictions: [workOf(r, pkg.name)],
        });
      }
    } else {
      throw new ReportSchemaError(
        file,
        `schema ${JSON.stringify(schema)}: expected a profile -j, doctor --selftest, costplan or ${MEASUREMENTS_SCHEMA} document`,
      );
    }
  }
  return { samples, skipped };
}
