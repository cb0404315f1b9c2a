/**
 * The one result format every scenario writes: a versioned JSON document (zod schema below) holding
 * the machine, each run's backend / model / conversion options, the raw samples with their summary
 * (median, mean, p10/p90, min/max) and notes. Charts are rendered from this document alone, so a
 * result file can be re-charted or compared later without re-running anything.
 */
import { z } from "zod";

export const RESULT_FORMAT = "anemll-qwen35.bench-result";
export const RESULT_FORMAT_VERSION = 1;

export const SCENARIOS = [
  "decode",
  "prefill",
  "ctx-sweep",
  "fusion-sweep",
  "parallel",
  "handoff",
  "speculative",
  "power",
  "pairing",
  "split",
  "expert-skip",
  "fp32-islands",
  "kv-expand",
  "agent",
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

export const SCALES = ["smoke", "full"] as const;
export type Scale = (typeof SCALES)[number];

/**
 * Where a run executed. "ane-coreml": Core ML on the Neural Engine (macOS); "ane-reference": the
 * reference MIL interpreter standing in for the ANE (any OS, CPU); "mlx-gpu" / "mlx-cpu": MLX on
 * Metal or on the CPU (Linux). "host" for work that is not a model (powermetrics).
 */
export const BACKENDS = ["ane-coreml", "ane-reference", "mlx-gpu", "mlx-cpu", "host"] as const;
export type BackendId = (typeof BACKENDS)[number];

const finite = z.number().finite();

export const summarySchema = z.object({
  n: z.number().int().positive(),
  median: finite,
  mean: finite,
  min: finite,
  max: finite,
  p10: finite,
  p90: finite,
});
export type Summary = z.infer<typeof summarySchema>;

/** One measured quantity of a run: every raw sample and their summary. */
export const metricSchema = z.object({
  name: z.string().min(1),
  unit: z.string().min(1),
  samples: z.array(finite).min(1),
  summary: summarySchema,
  /** What the samples are (one per decode step, one per repetition, …). */
  description: z.string().optional(),
});
export type Metric = z.infer<typeof metricSchema>;

export const modelInfoSchema = z.object({
  /** Short name used in charts ("tiny-tied", "synthetic-0.8b"). */
  name: z.string().min(1),
  /** Checkpoint folder or hf: reference it came from. */
  source: z.string().min(1),
  hiddenSize: z.number().int().positive().optional(),
  layers: z.number().int().positive().optional(),
  vocabSize: z.number().int().positive().optional(),
  /** e.g. "random weights (synthetic)" or "fixture". */
  weights: z.string().optional(),
});
export type ModelInfo = z.infer<typeof modelInfoSchema>;

/** The converter options of an ANE chain (model.json), or the load options of an MLX model. */
export const conversionSchema = z.object({
  ctx: z.number().int().positive().optional(),
  fuse: z.union([z.number().int().positive(), z.literal("all")]).optional(),
  body: z.string().optional(),
  lmHead: z.string().optional(),
  embed: z.string().optional(),
  dtype: z.string().optional(),
  /** Packages in the chain (embed, super-block packages, lm_head). */
  components: z.array(z.string()).optional(),
  /** MLX: load-time quantization bits, or none. */
  bits: z.number().int().positive().optional(),
  /** Reference backend: fp32 or fp16-emulated arithmetic. */
  precision: z.string().optional(),
});
export type Conversion = z.infer<typeof conversionSchema>;

export const runSchema = z.object({
  /** Unique within the result; the label charts use. */
  id: z.string().min(1),
  backend: z.enum(BACKENDS),
  model: modelInfoSchema,
  conversion: conversionSchema.optional(),
  /** The scenario's knobs for this run (ctx, fuse, mode: solo/together, k, gamma, …). */
  config: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])),
  metrics: z.array(metricSchema),
  notes: z.array(z.string()).default([]),
});
export type Run = z.infer<typeof runSchema>;

export const machineSchema = z.object({
  os: z.string(),
  platform: z.string(),
  arch: z.string(),
  release: z.string(),
  cpu: z.object({ model: z.string(), cores: z.number().int().nonnegative() }),
  /** Apple chip name when known (sysctl machdep.cpu.brand_string on macOS). */
  chip: z.string().optional(),
  memoryBytes: z.number().nonnegative(),
  node: z.string(),
  mlx: z.object({ available: z.boolean(), version: z.string().optional(), reason: z.string().optional() }),
  coreml: z.object({ available: z.boolean(), reason: z.string().optional() }),
  /** 1, 5 and 15 minute load averages when the scenario started (a shared machine shows here). */
  loadAverage: z.array(z.number()),
  /** … and when it finished. */
  loadAverageEnd: z.array(z.number()).optional(),
});
export type Machine = z.infer<typeof machineSchema>;

/** A part of a scenario that did not run, and why (e.g. "mlx backend unavailable: …"). */
export const skipSchema = z.object({ what: z.string().min(1), reason: z.string().min(1) });
export type Skip = z.infer<typeof skipSchema>;

export const benchResultSchema = z.object({
  format: z.literal(RESULT_FORMAT),
  formatVersion: z.literal(RESULT_FORMAT_VERSION),
  scenario: z.enum(SCENARIOS),
  scale: z.enum(SCALES),
  /** What the scenario asks (one sentence). */
  question: z.string().min(1),
  startedAt: z.string().datetime(),
  finishedAt: z.string().datetime(),
  /** The command line that reproduces this file. */
  command: z.string().min(1),
  /** "ok": everything ran; "partial": some runs skipped; "skipped": nothing could run here. */
  status: z.enum(["ok", "partial", "skipped"]),
  machine: machineSchema,
  runs: z.array(runSchema),
  skipped: z.array(skipSchema),
  notes: z.array(z.string()),
  /** Chart files written next to the JSON (names only). */
  charts: z.array(z.string()),
});
export type BenchResult = z.infer<typeof benchResultSchema>;
