/**
 * The report schema, version 1 (zod). The static model and the macOS MLComputePlan path both
 * produce exactly this shape; `source` says which one placed the ops. Documented field by field
 * in README.md ("Report schema").
 */
import { z } from "zod";
import { ReportSchemaError } from "./errors.js";

export const REPORT_SCHEMA = "anemll-qwen35.costplan";
export const REPORT_SCHEMA_VERSION = 1;

const count = z.number().int().nonnegative();
const num = z.number().finite();
const nonneg = z.number().finite().nonnegative();

export const PlanSourceSchema = z.enum(["static-estimate", "mlcomputeplan"]);
export const DeviceSchema = z.enum(["ANE", "CPU", "GPU"]);
export const PlacementSchema = z.enum(["ANE", "CPU", "GPU", "load"]);

export const FigureSchema = z.object({
  value: num,
  kind: z.enum(["measured", "published", "derived", "assumed", "fitted"]),
  source: z.string(),
});

const BytesReadSchema = z.object({ weights: nonneg, activations: nonneg, state: nonneg });
const BytesWrittenSchema = z.object({ activations: nonneg, state: nonneg });

/** Runtime ops per device: summaries, totals and op-type rows count them alike. */
const deviceCounts = { ane: count, cpu: count, gpu: count };
/** FLOPs and bytes moved, as an op, a summary and the totals hold them. */
const work = { flops: nonneg, bytesRead: BytesReadSchema, bytesWritten: BytesWrittenSchema };
/** Which op of which function of which package, and where it runs (top ops and fallbacks). */
const opPlace = {
  package: z.string(),
  function: z.string(),
  index: count,
  name: z.string(),
  type: z.string(),
  device: DeviceSchema,
};

export const OpEntrySchema = z.object({
  /** Position in the function's operation list (const ops included). */
  index: count,
  name: z.string(),
  type: z.string(),
  device: PlacementSchema,
  /** Placement rule id (placement.ts), or "mlcomputeplan" when Core ML placed the op. */
  rule: z.string(),
  reason: z.string(),
  /** MLComputePlan only: devices that support the op, and Core ML's estimated cost share [0, 1]. */
  supportedDevices: z.array(DeviceSchema).optional(),
  planCost: nonneg.optional(),
  ...work,
  /** FLOPs per byte moved (0 when nothing moves). */
  intensity: nonneg,
  bound: z.enum(["compute", "memory", "none"]),
  estimatedMs: nonneg,
  /** Where the FLOP count came from: costplan's table, or unknown (0). */
  formula: z.enum(["costplan", "unknown"]),
  /** Weights the op reads: stored (compressed) and dense bytes and how they are encoded. */
  weights: z
    .array(z.object({ param: z.string(), storedBytes: nonneg, denseBytes: nonneg, encoding: z.string() }))
    .optional(),
});

export const RunSchema = z.object({
  kind: z.enum(["interruption", "edge"]),
  /** Op indices (function operation list) of the first and last non-ANE op of the run. */
  start: count,
  end: count,
  ops: count,
  devices: z.array(DeviceSchema),
  types: z.array(z.string()),
  /** Ops the ANE supports but Core ML did not prefer there (MLComputePlan only), and the rest. */
  softOps: count,
  hardOps: count,
  estimatedMs: nonneg,
  /** Device switches the run causes (2 for an interruption, 1 for an edge run). */
  boundaries: count,
});

export const InterruptionsSchema = z.object({
  /** Non-ANE runs between two ANE ops (anemll-profile's graph interruptions). */
  count: count,
  edgeRuns: count,
  interruptedOps: count,
  nonAneOps: count,
  estimatedSwitchMs: nonneg,
  estimatedIslandMs: nonneg,
  runs: z.array(RunSchema),
  /** e.g. "ANE 3-165 | INT#1 CPU 166-170 | ANE 171-300". */
  timeline: z.string(),
});

export const FunctionSummarySchema = z.object({
  operations: count,
  loadTimeOps: count,
  runtimeOps: count,
  ...deviceCounts,
  ...work,
  /** Weights the function reads per prediction, stored size (deduplicated) and dense size. */
  weightBytesStored: nonneg,
  weightBytesDense: nonneg,
  /** Σ op time + device switches (no dispatch overhead). */
  estimatedMs: nonneg,
  opMs: nonneg,
  switchMs: nonneg,
});

export const FunctionPlanSchema = z.object({
  name: z.string(),
  opset: z.string(),
  /** Bytes of the function's inputs and outputs (states excluded): what a prediction passes. */
  io: z.object({ inputBytes: nonneg, outputBytes: nonneg }).optional(),
  /** The KV caches its attention reads: parts (a layer's K or V each), rows, bytes per row of a part. */
  kv: z.object({ parts: count, rows: count, bytesPerRow: nonneg }).optional(),
  ops: z.array(OpEntrySchema),
  summary: FunctionSummarySchema,
  interruptions: InterruptionsSchema,
});

export const PackagePlanSchema = z.object({
  name: z.string(),
  path: z.string().optional(),
  source: PlanSourceSchema,
  specificationVersion: count,
  /** The function one decode step calls (model.json `function`, else the default function). */
  decodeFunction: z.string(),
  /** Stored weight bytes of the whole package (blobs shared between functions counted once). */
  weightBytesStored: nonneg,
  functions: z.array(FunctionPlanSchema),
  prediction: z.object({
    /** decode function estimatedMs + dispatchMs + ioMs + kvMs. */
    estimatedMs: nonneg,
    dispatchMs: nonneg,
    /** Passing the decode function's inputs and outputs (runtime.ioMsPerMB). */
    ioMs: nonneg.optional(),
    /** The ctx term: KV rows the attention reads, up to the knee (runtime.kvMsPerMB). */
    kvMs: nonneg.optional(),
    /** estimatedMs under runtimeBand's low and high figures (the per-op ANE cost's range). */
    band: z.object({ lowMs: nonneg, highMs: nonneg }).optional(),
    measuredMs: nonneg.optional(),
    measuredRuns: count.optional(),
    measuredWarmup: count.optional(),
  }),
});

const TotalsSchema = z.object({
  packages: count,
  operations: count,
  runtimeOps: count,
  ...deviceCounts,
  ...work,
  weightBytesStored: nonneg,
  interruptions: count,
  /** Σ over packages of one prediction of the decode function (with dispatch). */
  estimatedMs: nonneg,
  /** estimatedMs under runtimeBand's low and high figures. */
  estimatedMsBand: z.object({ low: nonneg, high: nonneg }).optional(),
});

export const OpTypeRowSchema = z.object({
  type: z.string(),
  count: count,
  ...deviceCounts,
  flops: nonneg,
  bytes: nonneg,
  weightBytes: nonneg,
  estimatedMs: nonneg,
  /** Share of the summed op time. */
  share: nonneg,
});

export const TopOpSchema = z.object({
  ...opPlace,
  estimatedMs: nonneg,
  flops: nonneg,
  bytes: nonneg,
  bound: z.enum(["compute", "memory", "none"]),
});

export const FallbackSchema = z.object({
  ...opPlace,
  rule: z.string(),
  reason: z.string(),
  /** The ANE supports it but Core ML preferred another device (MLComputePlan only). */
  soft: z.boolean(),
});

export const ChainSchema = z.object({
  name: z.string(),
  components: z.array(z.string()),
  predictionsPerToken: count,
  estimatedMsPerToken: nonneg,
  estimatedTokPerSec: nonneg,
  /** The same under runtimeBand's low and high figures (tok/s: low = the slower end). */
  estimatedMsPerTokenBand: z.object({ low: nonneg, high: nonneg }).optional(),
  estimatedTokPerSecBand: z.object({ low: nonneg, high: nonneg }).optional(),
  measuredMsPerToken: nonneg.optional(),
  measuredTokPerSec: nonneg.optional(),
});

export const ChipSummarySchema = z.object({
  id: z.string(),
  name: z.string(),
  aneTops: FigureSchema,
  aneFp16Tflops: FigureSchema,
  aneGBps: FigureSchema,
  memoryGBps: FigureSchema,
  cpuGflops: FigureSchema,
  cpuGBps: FigureSchema,
  gpuTflops: FigureSchema,
  gpuGBps: FigureSchema,
});

export const RuntimeSchema = z.object({
  dispatchMs: FigureSchema,
  bandwidthFraction: FigureSchema,
  switchMs: FigureSchema,
  aneOpMs: FigureSchema,
  ioMsPerMB: FigureSchema.optional(),
  kvMsPerMB: FigureSchema.optional(),
  kvKneeRows: FigureSchema.optional(),
});

/** The runtime figures at both ends of the per-op ANE cost's range (each set fitted with it). */
export const RuntimeBandSchema = z.object({
  low: RuntimeSchema,
  high: RuntimeSchema,
  /** Where the range comes from: a published range, or a calibration that fitted it. */
  source: z.string(),
});

export const CostReportSchema = z.object({
  schema: z.literal(REPORT_SCHEMA),
  schemaVersion: z.literal(REPORT_SCHEMA_VERSION),
  tool: z.object({ name: z.string(), version: z.string() }),
  /** "mlcomputeplan" only when Core ML placed the ops of every package; else "static-estimate". */
  source: PlanSourceSchema,
  target: z.object({
    kind: z.enum(["package", "chain", "model"]),
    name: z.string(),
    path: z.string().optional(),
  }),
  chip: ChipSummarySchema,
  runtime: RuntimeSchema,
  /** Absent in reports written before projections came as a band (still schema version 1). */
  runtimeBand: RuntimeBandSchema.optional(),
  computeUnits: z.enum(["cpuAndNeuralEngine", "all", "cpuAndGPU", "cpuOnly"]),
  packages: z.array(PackagePlanSchema),
  totals: TotalsSchema,
  chain: ChainSchema.optional(),
  opTypes: z.array(OpTypeRowSchema),
  topOps: z.array(TopOpSchema),
  fallbacks: z.array(FallbackSchema),
  notes: z.array(z.string()),
});

export type PlanSource = z.infer<typeof PlanSourceSchema>;
export type OpEntry = z.infer<typeof OpEntrySchema>;
export type Run = z.infer<typeof RunSchema>;
export type Interruptions = z.infer<typeof InterruptionsSchema>;
export type FunctionSummary = z.infer<typeof FunctionSummarySchema>;
export type FunctionPlan = z.infer<typeof FunctionPlanSchema>;
export type PackagePlan = z.infer<typeof PackagePlanSchema>;
export type Totals = z.infer<typeof TotalsSchema>;
export type OpTypeRow = z.infer<typeof OpTypeRowSchema>;
export type TopOp = z.infer<typeof TopOpSchema>;
export type Fallback = z.infer<typeof FallbackSchema>;
export type ChainSummary = z.infer<typeof ChainSchema>;
export type CostReport = z.infer<typeof CostReportSchema>;
export type RuntimeBand = z.infer<typeof RuntimeBandSchema>;

/** Validates a report (e.g. one read back from JSON); throws ReportSchemaError naming the field. */
export function parseReport(value: unknown, where = "report"): CostReport {
  const r = CostReportSchema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = issue.path.length ? issue.path.join(".") : "(root)";
    throw new ReportSchemaError(where, `${path}: ${issue.message}`, { cause: r.error });
  }
  return r.data;
}
