/**
 * The self-test report (`anemll-qwen35 doctor --selftest`): one versioned JSON document saying what
 * ran, what worked and what was skipped and why, and a short Markdown summary to paste into an issue.
 * Bump SELFTEST_SCHEMA_VERSION when a field changes meaning or goes away.
 */
import { z } from "zod";

export const SELFTEST_SCHEMA = "anemll-qwen35.selftest";
export const SELFTEST_SCHEMA_VERSION = 2;

const nonneg = z.number().nonnegative();

export const StepStatusSchema = z.enum(["ok", "failed", "skipped"]);

export const StepSchema = z.object({
  /** e.g. "convert:io", "run:io:coreml-cpuAndNeuralEngine", "placement:mlcomputeplan". */
  id: z.string(),
  title: z.string(),
  status: StepStatusSchema,
  /** Why it was skipped or what failed. */
  reason: z.string().optional(),
  seconds: nonneg,
  details: z.record(z.string(), z.unknown()).optional(),
});

/** One run of the token sequence on a backend, compared step by step with the reference (fp32). */
export const RunDetailsSchema = z.object({
  kv: z.enum(["io", "mlstate"]),
  backend: z.string(),
  steps: z.number().int().positive(),
  tokens: z.array(z.number().int()),
  perStep: z.array(
    z.object({
      step: z.number().int().nonnegative(),
      maxAbsDiff: nonneg,
      cosine: z.number(),
      top1: z.number().int(),
      top1Matches: z.boolean(),
      /** The reference's top-1 logit minus its second: a smaller maxAbsDiff cannot flip it. */
      referenceMargin: nonneg,
    }),
  ),
  worstMaxAbsDiff: nonneg,
  minCosine: z.number(),
  top1Agreement: z.object({ matching: z.number().int(), of: z.number().int() }),
  timing: z.object({ loadMs: nonneg, prefillMs: nonneg, decodeMsMedian: nonneg, decodeTokPerSec: nonneg }),
  /** What crossed between JS and the backend per decode token, as the backend counted it. */
  transfersPerToken: z.object({
    bytesIn: nonneg,
    bytesOut: nonneg,
    bytesKept: nonneg,
    backingMisses: nonneg.optional(),
  }),
  /** After reset(), the first step gives the same logits again. */
  resetMatches: z.boolean(),
});

export const SelftestReportSchema = z.object({
  schema: z.literal(SELFTEST_SCHEMA),
  schemaVersion: z.literal(SELFTEST_SCHEMA_VERSION),
  createdAt: z.string(),
  tool: z.object({ name: z.string(), version: z.string() }),
  platform: z.object({
    os: z.string(),
    arch: z.string(),
    release: z.string(),
    macos: z.string().optional(),
    chip: z.string().optional(),
    /** What MLAllComputeDevices says (macOS 14+): virtual Macs have no Neural Engine. */
    neuralEngine: z.object({ present: z.boolean(), cores: z.number().int().optional() }).optional(),
    cpus: z.number().int(),
    memoryBytes: nonneg,
    node: z.string(),
  }),
  backends: z.array(z.object({ name: z.string(), available: z.boolean(), detail: z.string() })),
  model: z.object({
    source: z.string(),
    ctx: z.number().int(),
    promptTokens: z.number().int(),
    decodeSteps: z.number().int(),
  }),
  steps: z.array(StepSchema),
  totals: z.object({ ok: z.number().int(), failed: z.number().int(), skipped: z.number().int() }),
});

export type StepStatus = z.infer<typeof StepStatusSchema>;
export type SelftestStep = z.infer<typeof StepSchema>;
export type RunDetails = z.infer<typeof RunDetailsSchema>;
export type SelftestReport = z.infer<typeof SelftestReportSchema>;

const kib = (b: number) => (b < 10_240 ? `${b} B` : `${(b / 1024).toFixed(0)} KiB`);

/** One line of detail per step for the summary table. */
function detailOf(s: SelftestStep): string {
  if (s.status !== "ok") return (s.reason ?? "").replaceAll("|", "\\|").replaceAll("\n", " ");
  const d = s.details ?? {};
  const run = RunDetailsSchema.safeParse(d);
  if (run.success) {
    const r = run.data;
    const t = r.transfersPerToken;
    const misses = t.backingMisses ? `, ${t.backingMisses} backing misses` : "";
    return (
      `top-1 ${r.top1Agreement.matching}/${r.top1Agreement.of}, min cosine ${r.minCosine.toFixed(5)}, ` +
      `max |Δ| ${r.worstMaxAbsDiff.toPrecision(3)}; ${r.timing.decodeMsMedian.toFixed(2)} ms/token; ` +
      `${kib(t.bytesIn)} in / ${kib(t.bytesOut)} out per token${misses}; reset ${r.resetMatches ? "ok" : "DIFFERS"}`
    );
  }
  return typeof d.summary === "string" ? d.summary : "";
}

/** The Markdown summary: platform, then one table row per step. */
export function formatSelftest(r: SelftestReport): string {
  const p = r.platform;
  const where = [
    `${p.os} ${p.arch} ${p.release}`,
    p.macos ? `macOS ${p.macos}` : undefined,
    p.chip,
    `Node ${p.node}`,
    `${p.cpus} CPUs`,
  ]
    .filter(Boolean)
    .join(" · ");
  const lines = [
    `### anemll-qwen35 self-test (${r.tool.version}, report schema ${r.schemaVersion})`,
    "",
    where,
    "",
    `Model: ${r.model.source}, ctx ${r.model.ctx}; ${r.model.promptTokens} prompt tokens + ${r.model.decodeSteps} decode steps, compared with the reference backend (fp32) step by step.`,
    "",
    ...(p.neuralEngine?.present === false
      ? [
          "**No Neural Engine: Core ML sees none on this Mac (a virtual Mac?), so every Core ML step ran on the CPU or GPU.**",
          "",
        ]
      : []),
    `**${r.totals.ok} ok, ${r.totals.failed} failed, ${r.totals.skipped} skipped**`,
    "",
    "| step | status | detail |",
    "|---|---|---|",
    ...r.steps.map((s) => `| ${s.title} | ${s.status} | ${detailOf(s)} |`),
  ];
  return `${lines.join("\n")}\n`;
}

/** Validates a report read back from JSON. */
export function parseSelftest(value: unknown): SelftestReport {
  return SelftestReportSchema.parse(value);
}
