/**
 * From analysed packages to a report: times every op with the roofline, then derives every
 * aggregate (function summaries, interruptions, package predictions, totals, the chain's tok/s,
 * op-type breakdown, top ops, fallbacks) from the op entries alone — so `retime` can re-derive a
 * whole report for another chip or runtime figures without the programs.
 */
import type { AnalyzedModel } from "./analyze.js";
import { type ChipProfile, DEFAULT_RUNTIME, type RuntimeFigures } from "./chips.js";
import { CostplanOptionError } from "./errors.js";
import { findInterruptions } from "./interruptions.js";
import { ANE_KERNEL_OPS } from "./op-table.js";
import type { ComputeUnits } from "./placement.js";
import {
  type CostReport,
  type Fallback,
  type FunctionPlan,
  type FunctionSummary,
  type OpEntry,
  type OpTypeRow,
  type PackagePlan,
  type PlanSource,
  REPORT_SCHEMA,
  REPORT_SCHEMA_VERSION,
  type RuntimeBand,
  type TopOp,
  type Totals,
} from "./report.js";
import { opTime } from "./roofline.js";
import { TOOL_NAME, TOOL_VERSION } from "./version.js";

export interface ComponentInput {
  readonly name: string;
  readonly path?: string;
  readonly analysis: AnalyzedModel;
  readonly decodeFunction: string;
  readonly source: PlanSource;
  readonly measured?: { readonly ms: number; readonly runs: number; readonly warmup: number };
}

export interface BuildInput {
  readonly target: CostReport["target"];
  readonly components: readonly ComponentInput[];
  readonly chip: ChipProfile;
  readonly runtime: RuntimeFigures;
  /** The figures at both ends of the per-op ANE cost's range: projections come as a band. */
  readonly band?: RuntimeBand;
  readonly computeUnits: ComputeUnits;
  readonly chain: boolean;
  readonly notes: readonly string[];
}

const TOP_OPS = 20;

type Work = Pick<OpEntry, "flops" | "bytesRead" | "bytesWritten">;
type DeviceCounts = Pick<FunctionSummary, "ane" | "cpu" | "gpu">;

const noDevices = (): DeviceCounts => ({ ane: 0, cpu: 0, gpu: 0 });
const noWork = (): Work => ({
  flops: 0,
  bytesRead: { weights: 0, activations: 0, state: 0 },
  bytesWritten: { activations: 0, state: 0 },
});

/** Adds `w`'s FLOPs and bytes into `into`. */
function addWork(into: Work, w: Work): void {
  into.flops += w.flops;
  into.bytesRead.weights += w.bytesRead.weights;
  into.bytesRead.activations += w.bytesRead.activations;
  into.bytesRead.state += w.bytesRead.state;
  into.bytesWritten.activations += w.bytesWritten.activations;
  into.bytesWritten.state += w.bytesWritten.state;
}

/** Counts one runtime op on `device` into `into`. */
function countDevice(into: DeviceCounts, device: OpEntry["device"]): void {
  if (device === "ANE") into.ane++;
  else if (device === "CPU") into.cpu++;
  else into.gpu++;
}

function emptyTotals(packages: number): Totals {
  return {
    packages,
    operations: 0,
    runtimeOps: 0,
    ...noDevices(),
    ...noWork(),
    weightBytesStored: 0,
    interruptions: 0,
    estimatedMs: 0,
  };
}

function emptySummary(weightBytesStored: number, weightBytesDense: number): FunctionSummary {
  return {
    operations: 0,
    loadTimeOps: 0,
    runtimeOps: 0,
    ...noDevices(),
    ...noWork(),
    weightBytesStored,
    weightBytesDense,
    estimatedMs: 0,
    opMs: 0,
    switchMs: 0,
  };
}

export function buildReport(input: BuildInput): CostReport {
  const packages: PackagePlan[] = input.components.map((c) => ({
    name: c.name,
    path: c.path,
    source: c.source,
    specificationVersion: c.analysis.specificationVersion,
    decodeFunction: c.decodeFunction,
    weightBytesStored: c.analysis.weightBytesStored,
    functions: c.analysis.functions.map(
      (f): FunctionPlan => ({
        name: f.name,
        opset: f.opset,
        io: f.io,
        kv: f.kv,
        ops: f.ops,
        summary: emptySummary(
          [...f.weightBlobs.values()].reduce((s, b) => s + b, 0),
          f.weightBytesDense,
        ),
        interruptions: findInterruptions([], 0),
      }),
    ),
    prediction: {
      estimatedMs: 0,
      dispatchMs: 0,
      measuredMs: c.measured?.ms,
      measuredRuns: c.measured?.runs,
      measuredWarmup: c.measured?.warmup,
    },
  }));
  const report: CostReport = {
    schema: REPORT_SCHEMA,
    schemaVersion: REPORT_SCHEMA_VERSION,
    tool: { name: TOOL_NAME, version: TOOL_VERSION },
    source:
      packages.length > 0 && packages.every((p) => p.source === "mlcomputeplan")
        ? "mlcomputeplan"
        : "static-estimate",
    target: input.target,
    chip: chipSummary(input.chip),
    runtime: { ...input.runtime },
    runtimeBand: input.band,
    computeUnits: input.computeUnits,
    packages,
    totals: emptyTotals(0),
    chain: input.chain
      ? {
          name: input.target.name,
          components: packages.map((p) => p.name),
          predictionsPerToken: packages.length,
          estimatedMsPerToken: 0,
          estimatedTokPerSec: 0,
        }
      : undefined,
    opTypes: [],
    topOps: [],
    fallbacks: [],
    notes: [...input.notes],
  };
  return applyTiming(report);
}

function chipSummary(c: ChipProfile): CostReport["chip"] {
  const { id, name, aneTops, aneFp16Tflops, aneGBps, memoryGBps, cpuGflops, cpuGBps, gpuTflops, gpuGBps } = c;
  return { id, name, aneTops, aneFp16Tflops, aneGBps, memoryGBps, cpuGflops, cpuGBps, gpuTflops, gpuGBps };
}

/** The chip profile a report was timed with (its figures are all the roofline needs). */
function chipOf(report: CostReport): ChipProfile {
  return { ...report.chip, id: report.chip.id as ChipProfile["id"] };
}

function summarize(f: FunctionPlan, switchMs: number): FunctionSummary {
  const s = emptySummary(f.summary.weightBytesStored, f.summary.weightBytesDense);
  for (const op of f.ops) {
    s.operations++;
    if (op.device === "load") {
      s.loadTimeOps++;
      continue;
    }
    s.runtimeOps++;
    countDevice(s, op.device);
    addWork(s, op);
    s.opMs += op.estimatedMs;
  }
  s.switchMs = switchMs;
  s.estimatedMs = s.opMs + switchMs;
  return s;
}

const moved = (op: OpEntry): number =>
  op.bytesRead.weights +
  op.bytesRead.activations +
  op.bytesRead.state +
  op.bytesWritten.activations +
  op.bytesWritten.state;

/** Recomputes every time and aggregate of `report` from its op entries, chip and runtime (in place). */
export function applyTiming(report: CostReport): CostReport {
  const chip = chipOf(report);
  const runtime = report.runtime;
  const dispatch = runtime.dispatchMs.value;
  const totals = Object.assign(report.totals, emptyTotals(report.packages.length));
  const byType = new Map<string, OpTypeRow>();
  const top: TopOp[] = [];
  const fallbacks: Fallback[] = [];
  const bandMs = { low: 0, high: 0 };
  for (const pkg of report.packages) {
    for (const f of pkg.functions) {
      for (const op of f.ops) {
        const t = opTime(op.device, op.flops, moved(op), chip, runtime, ANE_KERNEL_OPS.has(op.type));
        op.estimatedMs = t.ms;
        op.bound = t.bound;
        if (op.device === "CPU" || op.device === "GPU") {
          fallbacks.push({
            package: pkg.name,
            function: f.name,
            index: op.index,
            name: op.name,
            type: op.type,
            device: op.device,
            rule: op.rule,
            reason: op.reason,
            soft: op.supportedDevices?.includes("ANE") ?? false,
          });
        }
      }
      f.interruptions = findInterruptions(f.ops, runtime.switchMs.value);
      f.summary = summarize(f, f.interruptions.estimatedSwitchMs);
    }
    const decode = pkg.functions.find((f) => f.name === pkg.decodeFunction) ?? pkg.functions[0];
    const ioMs = decode ? passMs(decode, runtime).ioMs : 0;
    const kvMs = decode ? passMs(decode, runtime).kvMs : 0;
    pkg.prediction.dispatchMs = dispatch;
    pkg.prediction.ioMs = ioMs;
    pkg.prediction.kvMs = kvMs;
    pkg.prediction.estimatedMs = (decode?.summary.estimatedMs ?? 0) + dispatch + ioMs + kvMs;
    if (report.runtimeBand && decode) {
      // the fits at both ends and the central one: the central fit's per-op cost lies between
      const ms = [report.runtimeBand.low, report.runtimeBand.high].map((rt) => callMs(decode, chip, rt));
      const central = pkg.prediction.estimatedMs;
      pkg.prediction.band = { lowMs: Math.min(central, ...ms), highMs: Math.max(central, ...ms) };
      bandMs.low += pkg.prediction.band.lowMs;
      bandMs.high += pkg.prediction.band.highMs;
    } else pkg.prediction.band = undefined;
    totals.weightBytesStored += pkg.weightBytesStored;
    totals.estimatedMs += pkg.prediction.estimatedMs;
    if (!decode) continue;
    const s = decode.summary;
    totals.operations += s.operations;
    totals.runtimeOps += s.runtimeOps;
    totals.ane += s.ane;
    totals.cpu += s.cpu;
    totals.gpu += s.gpu;
    addWork(totals, s);
    totals.interruptions += decode.interruptions.count;
    for (const op of decode.ops) {
      if (op.device === "load") continue;
      let row = byType.get(op.type);
      if (!row) {
        row = {
          type: op.type,
          count: 0,
          ...noDevices(),
          flops: 0,
          bytes: 0,
          weightBytes: 0,
          estimatedMs: 0,
          share: 0,
        };
        byType.set(op.type, row);
      }
      row.count++;
      countDevice(row, op.device);
      row.flops += op.flops;
      row.bytes += moved(op);
      row.weightBytes += op.bytesRead.weights;
      row.estimatedMs += op.estimatedMs;
      top.push({
        package: pkg.name,
        function: decode.name,
        index: op.index,
        name: op.name,
        type: op.type,
        device: op.device,
        estimatedMs: op.estimatedMs,
        flops: op.flops,
        bytes: moved(op),
        bound: op.bound,
      });
    }
  }
  const opMs = [...byType.values()].reduce((s, r) => s + r.estimatedMs, 0);
  report.opTypes = [...byType.values()]
    .map((r) => ({ ...r, share: opMs > 0 ? r.estimatedMs / opMs : 0 }))
    .sort((a, b) => b.estimatedMs - a.estimatedMs || a.type.localeCompare(b.type));
  report.topOps = top
    .sort((a, b) => b.estimatedMs - a.estimatedMs || a.package.localeCompare(b.package) || a.index - b.index)
    .slice(0, TOP_OPS);
  report.fallbacks = fallbacks;
  const band = report.runtimeBand ? bandMs : undefined;
  totals.estimatedMsBand = band ? { ...band } : undefined;
  if (report.chain) {
    const ms = report.packages.reduce((s, p) => s + p.prediction.estimatedMs, 0);
    report.chain.estimatedMsPerToken = ms;
    report.chain.estimatedTokPerSec = ms > 0 ? 1000 / ms : 0;
    report.chain.estimatedMsPerTokenBand = band ? { ...band } : undefined;
    report.chain.estimatedTokPerSecBand = band
      ? { low: band.high > 0 ? 1000 / band.high : 0, high: band.low > 0 ? 1000 / band.low : 0 }
      : undefined;
    const measured = report.packages.map((p) => p.prediction.measuredMs);
    if (measured.length > 0 && measured.every((m) => m !== undefined)) {
      const mms = measured.reduce((s: number, m) => s + (m ?? 0), 0);
      report.chain.measuredMsPerToken = mms;
      report.chain.measuredTokPerSec = mms > 0 ? 1000 / mms : 0;
    }
  }
  return report;
}

/** MB of KV the ctx term charges: every part's rows up to the knee. */
export function kvChargedMB(kv: FunctionPlan["kv"], runtime: Pick<RuntimeFigures, "kvKneeRows">): number {
  if (!kv) return 0;
  const knee = runtime.kvKneeRows?.value ?? DEFAULT_RUNTIME.kvKneeRows?.value ?? Number.POSITIVE_INFINITY;
  return (kv.parts * Math.min(kv.rows, knee) * kv.bytesPerRow) / 1e6;
}

/** What a call of `f` costs besides its ops: passing inputs/outputs, and the ctx term. */
function passMs(f: FunctionPlan, runtime: RuntimeBand["low"]): { ioMs: number; kvMs: number } {
  const ioBytes = f.io ? f.io.inputBytes + f.io.outputBytes : 0;
  return {
    ioMs: (ioBytes / 1e6) * (runtime.ioMsPerMB?.value ?? 0),
    kvMs: kvChargedMB(f.kv, runtime) * (runtime.kvMsPerMB?.value ?? 0),
  };
}

/** One prediction of `f` under `runtime`, ms (ops, switches, dispatch, I/O, ctx term); `f` unchanged. */
function callMs(f: FunctionPlan, chip: ChipProfile, runtime: RuntimeBand["low"]): number {
  let ms = 0;
  for (const op of f.ops)
    ms += opTime(op.device, op.flops, moved(op), chip, runtime, ANE_KERNEL_OPS.has(op.type)).ms;
  const { ioMs, kvMs } = passMs(f, runtime);
  return (
    ms +
    findInterruptions(f.ops, runtime.switchMs.value).estimatedSwitchMs +
    runtime.dispatchMs.value +
    ioMs +
    kvMs
  );
}

/**
 * One prediction of any function of a report's package — e.g. a prefill function, which the totals
 * (decode steps) leave out — at the report's figures and, with a band, at both ends of it.
 */
export function callEstimate(
  report: CostReport,
  packageName: string,
  functionName?: string,
): { estimatedMs: number; lowMs: number; highMs: number } {
  const pkg = report.packages.find((p) => p.name === packageName);
  const f = pkg?.functions.find((x) => x.name === (functionName ?? pkg.decodeFunction));
  if (!pkg || !f)
    throw new CostplanOptionError(
      "function",
      `${packageName}${functionName ? `/${functionName}` : ""}: no such package or function in the report`,
    );
  const chip = chipOf(report);
  const ms = callMs(f, chip, report.runtime);
  if (!report.runtimeBand) return { estimatedMs: ms, lowMs: ms, highMs: ms };
  const a = callMs(f, chip, report.runtimeBand.low);
  const b = callMs(f, chip, report.runtimeBand.high);
  return { estimatedMs: ms, lowMs: Math.min(a, b, ms), highMs: Math.max(a, b, ms) };
}

/** A copy of `report` timed for another chip and/or other runtime figures (placement unchanged). */
export function retime(
  report: CostReport,
  change: { chip?: ChipProfile; runtime?: Partial<RuntimeFigures>; band?: RuntimeBand | null },
): CostReport {
  const copy = structuredClone(report);
  if (change.chip) copy.chip = chipSummary(change.chip);
  if (change.runtime) copy.runtime = { ...copy.runtime, ...change.runtime };
  if (change.band !== undefined) copy.runtimeBand = change.band ?? undefined;
  return applyTiming(copy);
}
