/**
 * profile(): measured time per op and per package, joined with costplan's estimate.
 *
 *   const p = await profile("out/qwen35-0.8b", { runs: 3 });
 *   console.log(formatProfile(p));
 *
 * The reference study used a measured per-op tool beside the compiler's cost model and looked for
 * the ops where the two disagree. Here every op of each package's decode function is timed by the
 * reference MIL interpreter (any OS; the same program Core ML runs), on zero inputs and a fresh
 * state as anemll-profile does. On macOS with the Core ML addon, each package's prediction is also
 * timed through Core ML and MLComputePlan places the ops; elsewhere the report says that Core ML
 * timing is unavailable and why. Ops are compared by their share of their package's time, since
 * the interpreter (CPU) and the estimate (ANE roofline) run at different absolute speeds.
 */
import { arch, cpus, loadavg } from "node:os";
import { tensor } from "@anemll-qwen35/core";
import { MilInterpreter, type MlModel } from "@anemll-qwen35/ir/mil";
import { z } from "zod";
import { loadTarget } from "./chain.js";
import type { ChipId, ChipProfile } from "./chips.js";
import { type CostplanOptions, costplan } from "./costplan.js";
import { CostplanOptionError, ReportSchemaError } from "./errors.js";
import { PredictionWorkSchema, workOf } from "./fit.js";
import { nativeAvailability } from "./native.js";
import type { CostReport, OpEntry } from "./report.js";
import { fmtBytes, fmtMs, fmtPct, table } from "./units.js";
import { TOOL_NAME, TOOL_VERSION } from "./version.js";

export const PROFILE_SCHEMA = "anemll-qwen35.profile";
export const PROFILE_SCHEMA_VERSION = 1;

const nonneg = z.number().finite().nonnegative();

export const ProfileOpSchema = z.object({
  index: z.number().int().nonnegative(),
  name: z.string(),
  type: z.string(),
  /** costplan's (or MLComputePlan's) placement. */
  device: z.enum(["ANE", "CPU", "GPU"]),
  /** Median of the interpreter runs. */
  measuredMs: nonneg,
  /** costplan's roofline estimate on the chosen chip. */
  estimatedMs: nonneg,
  /** Share of the package's summed op time, measured and estimated. */
  measuredShare: nonneg,
  estimatedShare: nonneg,
  /** Bytes the op reads and writes (weights at their stored size), and the rate that implies. */
  bytes: nonneg,
  measuredGBps: nonneg,
  flops: nonneg,
});

export const ProfilePackageSchema = z.object({
  name: z.string(),
  path: z.string().optional(),
  function: z.string(),
  /** Wall time of one interpreter run of the decode function (median, and every run). */
  interpreterMs: nonneg,
  interpreterRunsMs: z.array(nonneg).min(1),
  /**
   * The same runs without per-op timing (median; each alternates with a timed one): what the
   * package costs the interpreter when `run` drives it, so interpreterMs − this is the profiler's
   * own overhead. Absent in reports written before it was measured.
   */
  uninstrumentedMs: nonneg.optional(),
  /** Core ML per-prediction time (macOS only). */
  coremlMs: nonneg.optional(),
  estimatedMs: nonneg,
  /** estimatedMs at both ends of the per-op ANE cost's band (costplan's runtimeBand). */
  estimatedBand: z.object({ lowMs: nonneg, highMs: nonneg }).optional(),
  /** The prediction's work as `costplan calibrate` fits it (workOf). */
  work: PredictionWorkSchema.optional(),
  weightBytes: nonneg,
  bytesMoved: nonneg,
  /** Weight bytes per measured interpreter second, and per Core ML second where timed. */
  interpreterWeightGBps: nonneg,
  coremlWeightGBps: nonneg.optional(),
  estimatedWeightGBps: nonneg,
  ops: z.array(ProfileOpSchema),
});

export const ProfileReportSchema = z.object({
  schema: z.literal(PROFILE_SCHEMA),
  schemaVersion: z.literal(PROFILE_SCHEMA_VERSION),
  tool: z.object({ name: z.string(), version: z.string() }),
  target: z.object({
    kind: z.enum(["package", "chain", "model"]),
    name: z.string(),
    path: z.string().optional(),
  }),
  machine: z.object({
    platform: z.string(),
    arch: z.string(),
    cpu: z.string(),
    cores: z.number().int().nonnegative(),
    loadAverage: z.array(z.number()),
  }),
  chip: z.string(),
  interpreter: z.object({
    precision: z.enum(["fp16", "fp32"]),
    warmup: z.number().int().nonnegative(),
    runs: z.number().int().positive(),
  }),
  coreml: z.object({ timed: z.boolean(), reason: z.string().optional() }),
  /** Who placed the ops: Core ML's MLComputePlan, or costplan's rule table. */
  placement: z.enum(["mlcomputeplan", "static-estimate"]),
  packages: z.array(ProfilePackageSchema).min(1),
  chain: z.object({
    interpreterMsPerToken: nonneg,
    /** The packages' uninstrumentedMs summed: a token without the per-op timing. */
    uninstrumentedMsPerToken: nonneg.optional(),
    coremlMsPerToken: nonneg.optional(),
    estimatedMsPerToken: nonneg,
    estimatedMsPerTokenBand: z.object({ low: nonneg, high: nonneg }).optional(),
  }),
  opTypes: z.array(
    z.object({
      type: z.string(),
      count: z.number().int().positive(),
      measuredMs: nonneg,
      estimatedMs: nonneg,
      measuredShare: nonneg,
      estimatedShare: nonneg,
    }),
  ),
  /** The ops whose measured and estimated shares differ most (share points, largest first). */
  disagreements: z.array(
    z.object({
      package: z.string(),
      name: z.string(),
      type: z.string(),
      device: z.enum(["ANE", "CPU", "GPU"]),
      measuredShare: nonneg,
      estimatedShare: nonneg,
      /** measuredShare − estimatedShare: > 0 the estimate underrates the op, < 0 it overrates it. */
      shareGap: z.number().finite(),
    }),
  ),
  notes: z.array(z.string()),
});

export type ProfileOp = z.infer<typeof ProfileOpSchema>;
export type ProfilePackage = z.infer<typeof ProfilePackageSchema>;
export type ProfileReport = z.infer<typeof ProfileReportSchema>;

export interface ProfileOptions {
  chip?: ChipId | ChipProfile;
  computeUnits?: CostplanOptions["computeUnits"];
  calibration?: CostplanOptions["calibration"];
  /** Interpreter arithmetic: fp16 (default; rounds like the ANE) or fp32. */
  precision?: "fp16" | "fp32";
  /** Untimed runs before the timed ones (default 1). */
  warmup?: number;
  /** Timed runs per package (default 3); the median is reported. */
  runs?: number;
  /** Core ML prediction timing and MLComputePlan: where available ("auto", default) or never ("off"). */
  coreml?: "auto" | "off";
  /** Rows of the disagreement list (default 10). */
  top?: number;
  signal?: AbortSignal;
  onProgress?: (p: { stage: "plan" | "interpret"; component: string; index: number; total: number }) => void;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function count(name: string, v: number | undefined, dflt: number, min: number): number {
  const n = v ?? dflt;
  if (!Number.isInteger(n) || n < min)
    throw new CostplanOptionError(name, `must be an integer ≥ ${min}, got ${String(v)}`);
  return n;
}

/** Zero inputs for every tensor input of a function (anemll-profile feeds zero arrays too). */
function zeroInputs(model: MlModel, fn: string): Record<string, ReturnType<typeof tensor>> {
  const f = model.program.functions[fn];
  const inputs: Record<string, ReturnType<typeof tensor>> = {};
  for (const i of f.inputs) {
    if (i.type.kind !== "tensor") continue;
    const d = i.type.dtype;
    const dtype = d === "fp16" ? "f16" : d === "fp32" ? "f32" : d === "bool" ? "bool" : "i32";
    inputs[i.name] = tensor(dtype, i.type.shape);
  }
  return inputs;
}

/**
 * Times `runs` runs of a function op by op; returns each run's wall ms and each op's median ms,
 * and the wall ms of as many runs without the per-op timing, each before a timed one (ABAB, so
 * that a change in the machine's load falls on both alike).
 */
function interpretTimed(
  model: MlModel,
  fn: string,
  o: { precision: "fp16" | "fp32"; warmup: number; runs: number },
): { runsMs: number[]; plainRunsMs: number[]; opMs: Map<string, number> } {
  const interp = new MilInterpreter(model.program, {
    functionName: fn,
    precision: o.precision,
    onNonFinite: "ignore",
  });
  const inputs = zeroInputs(model, fn);
  const state = interp.newState();
  for (let i = 0; i < o.warmup; i++) interp.run(inputs, { state });
  const runsMs: number[] = [];
  const plainRunsMs: number[] = [];
  const perOp = new Map<string, number[]>();
  for (let i = 0; i < o.runs; i++) {
    const p0 = performance.now();
    interp.run(inputs, { state });
    plainRunsMs.push(performance.now() - p0);
    const t0 = performance.now();
    const r = interp.run(inputs, { state, profile: "ops" });
    runsMs.push(performance.now() - t0);
    for (const t of r.opTimes ?? []) {
      const xs = perOp.get(t.name);
      if (xs) xs.push(t.ms);
      else perOp.set(t.name, [t.ms]);
    }
  }
  return { runsMs, plainRunsMs, opMs: new Map([...perOp].map(([k, v]) => [k, median(v)])) };
}

const opBytes = (o: OpEntry) =>
  o.bytesRead.weights +
  o.bytesRead.activations +
  o.bytesRead.state +
  o.bytesWritten.activations +
  o.bytesWritten.state;

const gbps = (bytes: number, ms: number) => (ms > 0 ? bytes / (ms * 1e6) : 0);

export async function profile(
  target: string | MlModel,
  options: ProfileOptions = {},
): Promise<ProfileReport> {
  const warmup = count("warmup", options.warmup, 1, 0);
  const runs = count("runs", options.runs, 3, 1);
  const top = count("top", options.top, 10, 0);
  const precision = options.precision ?? "fp16";
  if (precision !== "fp16" && precision !== "fp32")
    throw new CostplanOptionError("precision", `must be "fp16" or "fp32", got "${String(precision)}"`);
  const coremlMode = options.coreml ?? "auto";
  const native = coremlMode === "off" ? { available: false, reason: "coreml: off" } : nativeAvailability();
  const loaded = await loadTarget(target);
  // the embed package is read on the host by the runtime: no prediction to time or estimate
  const t = { ...loaded, components: loaded.components.filter((c) => !c.host) };
  const total = t.components.length;
  options.onProgress?.({ stage: "plan", component: t.name, index: 0, total });
  const plan: CostReport = await costplan(
    { name: t.name, components: t.components },
    {
      chip: options.chip,
      computeUnits: options.computeUnits,
      calibration: options.calibration,
      native: coremlMode === "off" ? "off" : "auto",
      measure: native.available ? { warmup: Math.max(1, warmup), runs: Math.max(runs, 10) } : false,
      signal: options.signal,
    },
  );
  const notes: string[] = [];
  const packages: ProfilePackage[] = [];
  for (const [index, c] of t.components.entries()) {
    options.signal?.throwIfAborted();
    options.onProgress?.({ stage: "interpret", component: c.name, index, total });
    const pp = plan.packages[index];
    const fplan = pp.functions.find((f) => f.name === pp.decodeFunction) ?? pp.functions[0];
    const m = interpretTimed(c.model, fplan.name, { precision, warmup, runs });
    const timed = fplan.ops.filter((o) => o.device !== "load" && m.opMs.has(o.name));
    const sumMeasured = timed.reduce((s, o) => s + (m.opMs.get(o.name) ?? 0), 0);
    const sumEstimated = timed.reduce((s, o) => s + o.estimatedMs, 0);
    const ops: ProfileOp[] = timed.map((o) => {
      const ms = m.opMs.get(o.name) ?? 0;
      const bytes = opBytes(o);
      return {
        index: o.index,
        name: o.name,
        type: o.type,
        device: o.device as ProfileOp["device"],
        measuredMs: ms,
        estimatedMs: o.estimatedMs,
        measuredShare: sumMeasured > 0 ? ms / sumMeasured : 0,
        estimatedShare: sumEstimated > 0 ? o.estimatedMs / sumEstimated : 0,
        bytes,
        measuredGBps: gbps(bytes, ms),
        flops: o.flops,
      };
    });
    const untimed = m.opMs.size - timed.length;
    if (untimed > 0)
      notes.push(`${c.name}: ${untimed} interpreted ops have no costplan entry and are left out of the join`);
    const interpreterMs = median(m.runsMs);
    const weightBytes = fplan.summary.weightBytesStored;
    const coremlMs = pp.prediction.measuredMs;
    packages.push({
      name: c.name,
      path: c.path,
      function: fplan.name,
      interpreterMs,
      interpreterRunsMs: m.runsMs,
      uninstrumentedMs: median(m.plainRunsMs),
      coremlMs,
      estimatedMs: pp.prediction.estimatedMs,
      estimatedBand: pp.prediction.band,
      weightBytes,
      bytesMoved: ops.reduce((s, o) => s + o.bytes, 0),
      interpreterWeightGBps: gbps(weightBytes, interpreterMs),
      coremlWeightGBps: coremlMs !== undefined ? gbps(weightBytes, coremlMs) : undefined,
      estimatedWeightGBps: gbps(weightBytes, pp.prediction.estimatedMs),
      work: workOf(plan, pp.name),
      ops,
    });
  }
  const allCoreml = packages.every((p) => p.coremlMs !== undefined);
  if (!native.available)
    notes.push(
      `Core ML per-prediction timing unavailable here (${native.reason}); measured times are the reference interpreter's on this CPU, placement is costplan's rule table.`,
    );
  notes.push(
    "Per-op times come from the reference interpreter (Core ML does not time single ops); compare them with the estimate by share of the package, not in milliseconds.",
  );
  return ProfileReportSchema.parse({
    schema: PROFILE_SCHEMA,
    schemaVersion: PROFILE_SCHEMA_VERSION,
    tool: { name: TOOL_NAME, version: TOOL_VERSION },
    target: { kind: t.kind, name: t.name, path: t.path },
    machine: {
      platform: process.platform,
      arch: arch(),
      cpu: cpus()[0]?.model?.trim() ?? "unknown",
      cores: cpus().length,
      loadAverage: loadavg(),
    },
    chip: plan.chip.name,
    interpreter: { precision, warmup, runs },
    coreml: allCoreml
      ? { timed: true }
      : { timed: false, reason: native.reason ?? "not every package was timed" },
    placement: plan.source,
    packages,
    chain: {
      interpreterMsPerToken: packages.reduce((s, p) => s + p.interpreterMs, 0),
      uninstrumentedMsPerToken: packages.reduce((s, p) => s + (p.uninstrumentedMs ?? 0), 0),
      coremlMsPerToken: allCoreml ? packages.reduce((s, p) => s + (p.coremlMs ?? 0), 0) : undefined,
      estimatedMsPerToken: packages.reduce((s, p) => s + p.estimatedMs, 0),
      estimatedMsPerTokenBand: packages.every((p) => p.estimatedBand)
        ? {
            low: packages.reduce((s, p) => s + (p.estimatedBand?.lowMs ?? 0), 0),
            high: packages.reduce((s, p) => s + (p.estimatedBand?.highMs ?? 0), 0),
          }
        : undefined,
    },
    opTypes: opTypeRows(packages),
    disagreements: packages
      .flatMap((p) =>
        p.ops.map((o) => ({
          package: p.name,
          name: o.name,
          type: o.type,
          device: o.device,
          measuredShare: o.measuredShare,
          estimatedShare: o.estimatedShare,
          shareGap: o.measuredShare - o.estimatedShare,
        })),
      )
      .sort((a, b) => Math.abs(b.shareGap) - Math.abs(a.shareGap))
      .slice(0, top),
    notes: [...plan.notes, ...notes],
  });
}

function opTypeRows(packages: readonly ProfilePackage[]): ProfileReport["opTypes"] {
  const rows = new Map<string, { count: number; measuredMs: number; estimatedMs: number }>();
  for (const o of packages.flatMap((p) => p.ops)) {
    const r = rows.get(o.type) ?? { count: 0, measuredMs: 0, estimatedMs: 0 };
    r.count++;
    r.measuredMs += o.measuredMs;
    r.estimatedMs += o.estimatedMs;
    rows.set(o.type, r);
  }
  const m = [...rows.values()].reduce((s, r) => s + r.measuredMs, 0);
  const e = [...rows.values()].reduce((s, r) => s + r.estimatedMs, 0);
  return [...rows]
    .map(([type, r]) => ({
      type,
      ...r,
      measuredShare: m > 0 ? r.measuredMs / m : 0,
      estimatedShare: e > 0 ? r.estimatedMs / e : 0,
    }))
    .sort((a, b) => b.measuredMs - a.measuredMs);
}

/** Validates a profile read back from JSON; throws ReportSchemaError naming the field. */
export function parseProfile(value: unknown, where = "profile"): ProfileReport {
  const r = ProfileReportSchema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ReportSchemaError(where, `${issue.path.join(".") || "(root)"}: ${issue.message}`, {
      cause: r.error,
    });
  }
  return r.data;
}

const ms = (v: number | undefined) => (v === undefined ? "—" : fmtMs(v));
const rate = (v: number | undefined) => (v === undefined ? "—" : `${v.toFixed(2)} GB/s`);

export function formatProfile(p: ProfileReport): string {
  const out: string[] = [];
  out.push(`profile — ${p.target.kind} ${p.target.name}${p.target.path ? ` (${p.target.path})` : ""}`);
  out.push(
    `  measured: reference interpreter (${p.interpreter.precision}, ${p.interpreter.runs} runs after ${p.interpreter.warmup} warm-up) on ${p.machine.cpu}`,
  );
  out.push(
    p.coreml.timed
      ? "  Core ML: per-prediction time measured on this Mac"
      : `  Core ML timing: unavailable (${p.coreml.reason})`,
  );
  out.push(`  estimate: costplan on ${p.chip} · placement: ${p.placement}`);
  out.push("");
  out.push("Packages (one decode prediction each)");
  out.push(
    table(
      [
        "package",
        "function",
        "interp",
        "Core ML",
        "estimate",
        "band",
        "weights",
        "interp GB/s",
        "Core ML GB/s",
        "est GB/s",
      ],
      p.packages.map((k) => [
        k.name,
        k.function,
        ms(k.interpreterMs),
        ms(k.coremlMs),
        ms(k.estimatedMs),
        k.estimatedBand ? `${ms(k.estimatedBand.lowMs)}–${ms(k.estimatedBand.highMs)}` : "—",
        fmtBytes(k.weightBytes),
        rate(k.interpreterWeightGBps),
        rate(k.coremlWeightGBps),
        rate(k.estimatedWeightGBps),
      ]),
    ),
  );
  const c = p.chain;
  out.push(
    `  per token: interpreter ${ms(c.interpreterMsPerToken)} (${(1000 / c.interpreterMsPerToken).toFixed(2)} tok/s)` +
      (c.coremlMsPerToken !== undefined
        ? ` · Core ML ${ms(c.coremlMsPerToken)} (${(1000 / c.coremlMsPerToken).toFixed(1)} tok/s)`
        : "") +
      ` · estimate ${ms(c.estimatedMsPerToken)} (${(1000 / c.estimatedMsPerToken).toFixed(1)} tok/s` +
      (c.estimatedMsPerTokenBand
        ? `, band ${(1000 / c.estimatedMsPerTokenBand.high).toFixed(1)}–${(1000 / c.estimatedMsPerTokenBand.low).toFixed(1)})`
        : ")"),
  );
  if (c.uninstrumentedMsPerToken !== undefined) {
    const extra = c.interpreterMsPerToken - c.uninstrumentedMsPerToken;
    out.push(
      `  instrumentation: the same runs without per-op timing take ${ms(c.uninstrumentedMsPerToken)} a token, so ` +
        `${ms(Math.max(0, extra))} (${fmtPct(Math.max(0, extra) / c.interpreterMsPerToken)}) of the interpreter's figure is this profiler's own timing; ` +
        "`run` decodes without it (and with the state and inputs of a real sequence, not zeros)",
    );
  }
  out.push("");
  out.push("Op types (share of summed op time)");
  out.push(
    table(
      ["type", "count", "measured", "share", "estimate", "share"],
      p.opTypes
        .slice(0, 15)
        .map((r) => [
          r.type,
          String(r.count),
          fmtMs(r.measuredMs),
          fmtPct(r.measuredShare),
          fmtMs(r.estimatedMs),
          fmtPct(r.estimatedShare),
        ]),
    ),
  );
  out.push("");
  out.push("Where measurement and estimate disagree most (share of the package's time)");
  out.push(
    table(
      ["package", "op", "type", "device", "measured", "estimate", "gap"],
      p.disagreements.map((d) => [
        d.package,
        d.name,
        d.type,
        d.device,
        fmtPct(d.measuredShare),
        fmtPct(d.estimatedShare),
        `${d.shareGap > 0 ? "+" : ""}${(d.shareGap * 100).toFixed(1)} pt`,
      ]),
    ),
  );
  if (p.notes.length) {
    out.push("");
    for (const n of p.notes) out.push(`  note: ${n}`);
  }
  return out.join("\n");
}
