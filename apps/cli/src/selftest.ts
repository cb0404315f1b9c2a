/**
 * The self-test behind `anemll-qwen35 doctor --selftest`: what works on this machine, end to end.
 * It converts the bundled tiny Qwen3.5 model with the converter's defaults (KV as I/O and as a
 * Core ML state), runs one token sequence on the reference backend (fp32: the yardstick; fp16: the
 * ANE's rounding) and on Core ML (cpuOnly, cpuAndNeuralEngine), compares the logits step by step,
 * checks that a reset starts over, counts the bytes crossing JS per token, reads placement per op
 * (the static rule table and Core ML's MLComputePlan) and times predictions. Steps that cannot run here are reported as
 * skipped with the reason; nothing is faked.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { release, tmpdir } from "node:os";
import { join } from "node:path";
import { describeMachine } from "@anemll-qwen35/bench";
import { convert } from "@anemll-qwen35/converter";
import {
  type ComputeUnits,
  type CoreMLComputeDevice,
  computeDevices,
  coreMLAvailability,
  loadCoreMLAddon,
} from "@anemll-qwen35/coreml";
import { type CostReport, costplan, workOf } from "@anemll-qwen35/costplan";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { argmax, cosine, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { loadModel } from "@anemll-qwen35/models";
import type { Backend } from "@anemll-qwen35/runtime-ane";
import {
  DECODE_CONTEXTS,
  decodeAtContexts,
  FIRST_RUN_PROMPT_TOKENS,
  type FirstRunBackend,
  kvReadback,
  logitsOf,
  MIN_COSINE,
  median,
  memoryCheck,
  prefillVerdict,
  promptCheck,
  promptOf,
} from "./selftest-first-run.js";
import {
  type RunDetails,
  SELFTEST_SCHEMA,
  SELFTEST_SCHEMA_VERSION,
  type SelftestReport,
  type SelftestStep,
} from "./selftest-report.js";

export interface SelftestOptions {
  /** The checkpoint to convert (the bundled tiny model). */
  readonly model: string;
  /** Says what the model is, for the report. */
  readonly modelSource: string;
  readonly version: string;
  /** The backends doctor lists, for the report. */
  readonly backends: SelftestReport["backends"];
  /** Decode steps after the prompt (default 8). */
  readonly steps?: number;
  /** Told after each step. */
  readonly onStep?: (step: SelftestStep) => void;
}

const CTX = 128;
/** Raw text, continued (the bundled model was trained on the King James Bible). */
const PROMPT = "In the beginning God created the heaven and the earth. And God said,";

type Kv = "io" | "mlstate";

interface Trace {
  readonly logits: Float32Array[];
  readonly tokens: number[];
}

/**
 * The prompt and `steps` decode steps on one backend. Decode step i feeds `forced[i]` (the
 * reference's tokens) when given, else this run's own greedy token, so that every run sees the
 * same sequence and its logits compare step by step.
 */
async function runChain(
  dir: string,
  backend: { name: "reference"; precision: "fp32" | "fp16" } | { name: "coreml"; computeUnits: ComputeUnits },
  prompt: number[],
  steps: number,
  forced?: readonly number[],
): Promise<{
  trace: Trace;
  details: Omit<RunDetails, "kv" | "backend" | "perStep" | "worstMaxAbsDiff" | "minCosine" | "top1Agreement">;
}> {
  let used: Backend | undefined;
  const t0 = performance.now();
  const loaded = await loadModel(dir, {
    backend: backend.name,
    ...(backend.name === "reference"
      ? { precision: backend.precision }
      : { computeUnits: backend.computeUnits }),
    tokenizer: false,
    wrapBackend: (b) => {
      used = b;
      return b;
    },
  });
  const loadMs = performance.now() - t0;
  try {
    const m = loaded.model;
    const t1 = performance.now();
    const first = logitsOf(await m.prefill(prompt));
    const prefillMs = performance.now() - t1;
    const trace: Trace = { logits: [first], tokens: [forced?.[0] ?? argmax(first)] };
    const before = (used as Backend).transfers();
    const times: number[] = [];
    for (let i = 0; i < steps; i++) {
      const t = performance.now();
      const l = logitsOf(await m.decode(trace.tokens[i]));
      times.push(performance.now() - t);
      trace.logits.push(l);
      trace.tokens.push(forced?.[i + 1] ?? argmax(l));
    }
    const after = (used as Backend).transfers();
    await m.reset();
    const again = logitsOf(await m.prefill(prompt));
    const scale = Math.max(1, ...first.map(Math.abs));
    const per = (a: number, b: number) => (b - a) / steps;
    const decodeMsMedian = median(times);
    return {
      trace,
      details: {
        steps,
        tokens: trace.tokens,
        timing: {
          loadMs,
          prefillMs,
          decodeMsMedian,
          decodeTokPerSec: decodeMsMedian > 0 ? 1000 / decodeMsMedian : 0,
        },
        transfersPerToken: {
          bytesIn: per(before.bytesIn, after.bytesIn),
          bytesOut: per(before.bytesOut, after.bytesOut),
          bytesKept: per(before.bytesKept, after.bytesKept),
          ...(after.backingMisses === undefined
            ? {}
            : { backingMisses: per(before.backingMisses ?? 0, after.backingMisses) }),
        },
        resetMatches: maxAbsDiff(again, first) <= 1e-3 * scale,
      },
    };
  } finally {
    await loaded.dispose();
  }
}

/** The reference's lead of its top-1 over its runner-up. */
function margin(l: Float32Array): number {
  let first = Number.NEGATIVE_INFINITY;
  let second = Number.NEGATIVE_INFINITY;
  for (const v of l) {
    if (v > first) [first, second] = [v, first];
    else if (v > second) second = v;
  }
  return first - second;
}

function compare(trace: Trace, baseline: Trace) {
  const perStep = trace.logits.map((l, step) => {
    const b = baseline.logits[step];
    const top1 = argmax(l);
    return {
      step,
      maxAbsDiff: maxAbsDiff(l, b),
      cosine: cosine(l, b),
      top1,
      top1Matches: top1 === argmax(b),
      referenceMargin: margin(b),
    };
  });
  return {
    perStep,
    worstMaxAbsDiff: Math.max(...perStep.map((s) => s.maxAbsDiff)),
    minCosine: Math.min(...perStep.map((s) => s.cosine)),
    top1Agreement: { matching: perStep.filter((s) => s.top1Matches).length, of: perStep.length },
  };
}

/** Why a run's numbers say it is not the same program, or undefined when they agree. */
function verdict(d: RunDetails): string | undefined {
  const problems: string[] = [];
  if (d.minCosine < MIN_COSINE)
    problems.push(`cosine with the reference fell to ${d.minCosine.toFixed(4)} (< ${MIN_COSINE})`);
  // a top-1 that differs where the reference leads by more than twice the step's largest
  // difference is no rounding (random tiny weights leave near-ties, which rounding may flip)
  const decisive = d.perStep.filter((s) => !s.top1Matches && s.referenceMargin > 2 * s.maxAbsDiff);
  if (decisive.length)
    problems.push(
      `top-1 differs where the reference leads by more than rounding (steps ${decisive.map((s) => s.step).join(", ")})`,
    );
  if (!d.resetMatches) problems.push("after reset() the first step gave different logits (state not zeroed)");
  return problems.length ? problems.join("; ") : undefined;
}

/** Placement per package: ops per device, interruptions, ops off the ANE. */
function placementSummary(r: CostReport) {
  return r.packages.map((p) => {
    const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
    return {
      package: p.name,
      source: p.source,
      function: f.name,
      ane: f.summary.ane,
      cpu: f.summary.cpu,
      gpu: f.summary.gpu,
      interruptions: f.interruptions.count,
      offAne: f.ops
        .filter((o) => o.device !== "ANE" && o.device !== "load")
        .map((o) => ({ name: o.name, type: o.type, device: o.device, reason: o.reason })),
    };
  });
}

const counts = (r: CostReport) =>
  `${r.totals.ane} ANE / ${r.totals.cpu} CPU / ${r.totals.gpu} GPU ops, ${r.totals.interruptions} interruptions`;

export async function runSelftest(o: SelftestOptions): Promise<SelftestReport> {
  const decodeSteps = o.steps ?? 8;
  const steps: SelftestStep[] = [];
  const add = (s: SelftestStep) => {
    steps.push(s);
    o.onStep?.(s);
    return s;
  };
  const skip = (id: string, title: string, reason: string) =>
    add({ id, title, status: "skipped", reason, seconds: 0 });
  async function step<T>(
    id: string,
    title: string,
    fn: () => Promise<{ value: T; details: Record<string, unknown>; problem?: string }>,
  ): Promise<T | undefined> {
    const t0 = performance.now();
    try {
      const r = await fn();
      const seconds = (performance.now() - t0) / 1000;
      add({ id, title, status: r.problem ? "failed" : "ok", reason: r.problem, seconds, details: r.details });
      return r.problem ? undefined : r.value;
    } catch (err) {
      const e = err as Error & { code?: string };
      add({
        id,
        title,
        status: "failed",
        reason: `${e.code ? `${e.code}: ` : ""}${e.message}`,
        seconds: (performance.now() - t0) / 1000,
      });
      return undefined;
    }
  }

  const predict = coreMLAvailability("predict");
  const plan = coreMLAvailability("computePlan");
  const machine = describeMachine();
  let macos: string | undefined;
  if (plan.available) macos = loadCoreMLAddon("computePlan").macosVersion();

  const devicesAvailable = coreMLAvailability("devices");
  let neuralEngine: SelftestReport["platform"]["neuralEngine"];
  if (!devicesAvailable.available) {
    skip(
      "devices",
      "compute devices Core ML sees (MLAllComputeDevices)",
      devicesAvailable.reason ?? "unavailable",
    );
  } else {
    await step("devices", "compute devices Core ML sees (MLAllComputeDevices)", async () => {
      const ds: CoreMLComputeDevice[] = await computeDevices();
      const ane = ds.find((d) => d.kind === "neuralEngine");
      neuralEngine = { present: ane !== undefined, ...(ane ? { cores: ane.totalCoreCount } : {}) };
      const names = ds.map((d) =>
        d.kind === "neuralEngine"
          ? `Neural Engine (${d.totalCoreCount} cores)`
          : d.kind === "gpu"
            ? `GPU ${d.name ?? ""}`.trim()
            : d.kind.toUpperCase(),
      );
      return {
        value: true,
        details: {
          summary: ane
            ? names.join(", ")
            : `NO Neural Engine (${names.join(", ")}): a virtual Mac? Core ML runs every op on the CPU or GPU here, so the ANE results below are not the ANE's`,
          devices: ds,
        },
      };
    });
  }

  const work = await mkdtemp(join(tmpdir(), "anemll-qwen35-selftest-"));
  let promptTokens = 0;
  try {
    const dirs: Partial<Record<Kv, string>> = {};
    for (const kv of ["io", "mlstate"] as const) {
      const label = kv === "io" ? "KV as I/O" : "KV as a Core ML state";
      const dir = join(work, kv);
      const ok = await step(`convert:${kv}`, `convert (${label})`, async () => {
        const c = await convert({ model: o.model, out: dir, ctx: CTX, state: kv });
        const files = c.manifest.components.map((x) => x.file);
        return {
          value: true,
          details: {
            summary: `${files.length} packages in ${c.seconds.toFixed(1)} s`,
            files,
            seconds: c.seconds,
          },
        };
      });
      if (!ok) continue;
      dirs[kv] = dir;
      const tokenizer = await loadTokenizer(dir);
      const prompt = tokenizer.encode(PROMPT);
      promptTokens = prompt.length;

      let baseline: Trace | undefined;
      const runs: { id: string; title: string; backend: Parameters<typeof runChain>[1]; skip?: string }[] = [
        { id: "reference-fp32", title: "reference fp32", backend: { name: "reference", precision: "fp32" } },
        {
          id: "reference-fp16",
          title: "reference fp16 (ANE rounding)",
          backend: { name: "reference", precision: "fp16" },
        },
        ...(["cpuOnly", "cpuAndNeuralEngine"] as const).map((u) => ({
          id: `coreml-${u}`,
          title: `Core ML ${u}`,
          backend: { name: "coreml" as const, computeUnits: u },
          skip: predict.available ? undefined : predict.reason,
        })),
      ];
      for (const r of runs) {
        const id = `run:${kv}:${r.id}`;
        const title = `${r.title} (${label})`;
        if (r.skip) {
          skip(id, title, r.skip);
          continue;
        }
        if (r.id !== "reference-fp32" && !baseline) {
          skip(id, title, "the reference fp32 run failed, so there is nothing to compare with");
          continue;
        }
        await step(id, title, async () => {
          const { trace, details } = await runChain(dir, r.backend, prompt, decodeSteps, baseline?.tokens);
          baseline ??= trace;
          const d: RunDetails = { kv, backend: r.title, ...details, ...compare(trace, baseline) };
          return { value: true, details: d, problem: verdict(d) };
        });
      }

      // the first-run checks (selftest-first-run.ts): a full chunk and a short tail, on each backend
      const long = promptOf(prompt, FIRST_RUN_PROMPT_TOKENS);
      const pathsTitle = (b: string) =>
        `prompt of 64 + 9 tokens: finite, prefill vs token by token (${b}, ${label})`;
      const backends: [FirstRunBackend, string][] = [
        ["reference-fp32", "reference fp32"],
        ["reference-fp16", "reference fp16, subnormals flushed"],
        ["coreml", "Core ML cpuAndNeuralEngine"],
      ];
      for (const [b, name] of backends) {
        if (b === "coreml" && !predict.available)
          skip(`prompt:${kv}:${b}`, pathsTitle(name), predict.reason ?? "");
        else await step(`prompt:${kv}:${b}`, pathsTitle(name), () => promptCheck(dir, b, long));
      }
      const macSteps: [
        string,
        string,
        () => Promise<{ value: true; details: Record<string, unknown>; problem?: string }>,
      ][] = [
        [
          `prefill-check:${kv}`,
          `prefill check: placement and speed of the prefill function (${label})`,
          () => prefillVerdict(dir),
        ],
        [
          `memory:${kv}`,
          `phys_footprint with the decode function vs decode and prefill (${label})`,
          () => memoryCheck(dir),
        ],
        [
          `kv-readback:${kv}`,
          `state read back from Core ML vs the reference after 64 + 9 tokens (${label})`,
          () => kvReadback(dir, long),
        ],
      ];
      for (const [id, title, fn] of macSteps) {
        if (!predict.available || !plan.available)
          skip(id, title, (predict.available ? plan.reason : predict.reason) ?? "");
        else await step(id, title, fn);
      }
    }

    const chains = Object.entries(dirs) as [Kv, string][];
    // io against mlstate decode at long contexts: Core ML's timing on a Mac, the reference's parity elsewhere
    const ctxBackend: FirstRunBackend = predict.available ? "coreml" : "reference-fp16";
    const contextsTitle = `io vs mlstate decode at ctx ${DECODE_CONTEXTS.join(" and ")}`;
    if (chains.length === 0) skip("decode:contexts", contextsTitle, "no conversion succeeded");
    else
      await step(
        "decode:contexts",
        `${contextsTitle} (${predict.available ? "Core ML cpuAndNeuralEngine" : "reference fp16: parity only, its timing is not the ANE's"})`,
        async () => {
          const tokenizer = await loadTokenizer(chains[0][1]);
          return decodeAtContexts(o.model, work, ctxBackend, tokenizer.encode(PROMPT), decodeSteps);
        },
      );

    if (chains.length === 0) {
      skip("placement:static", "placement by the static rule table", "no conversion succeeded");
    } else {
      await step("placement:static", "placement by the static rule table", async () => {
        const reports = [];
        for (const [kv, dir] of chains) reports.push({ kv, report: await costplan(dir, { native: "off" }) });
        return {
          value: true,
          details: {
            summary: reports.map((r) => `${r.kv}: ${counts(r.report)}`).join("; "),
            chains: reports.map((r) => ({
              kv: r.kv,
              estimatedTokPerSec: r.report.chain?.estimatedTokPerSec,
              packages: placementSummary(r.report),
            })),
          },
        };
      });
    }
    if (!plan.available || chains.length === 0) {
      const why = plan.available ? "no conversion succeeded" : (plan.reason ?? "unavailable");
      skip("placement:mlcomputeplan", "placement by Core ML (MLComputePlan), per op", why);
      skip("timing:measured", "measured predictions per package (Core ML, cpuAndNeuralEngine)", why);
    } else {
      await step("placement:mlcomputeplan", "placement by Core ML (MLComputePlan), per op", async () => {
        const reports = [];
        for (const [kv, dir] of chains) {
          const stat = await costplan(dir, { native: "off" });
          const real = await costplan(dir, { native: "require" });
          const predicted = new Map(
            stat.packages.flatMap((p) =>
              p.functions.flatMap((f) => f.ops.map((op) => [`${p.name}/${f.name}/${op.name}`, op.device])),
            ),
          );
          const ops = real.packages.flatMap((p) =>
            p.functions.flatMap((f) =>
              f.ops
                .filter((op) => op.device !== "load")
                .map((op) => ({
                  package: p.name,
                  function: f.name,
                  name: op.name,
                  type: op.type,
                  device: op.device,
                  supported: op.supportedDevices,
                  cost: op.planCost,
                  predicted: predicted.get(`${p.name}/${f.name}/${op.name}`),
                })),
            ),
          );
          reports.push({ kv, report: real, ops });
        }
        const agree = reports.flatMap((r) => r.ops).filter((x) => x.predicted === x.device).length;
        const total = reports.flatMap((r) => r.ops).length;
        return {
          value: true,
          details: {
            summary: `${reports.map((r) => `${r.kv}: ${counts(r.report)}`).join("; ")}; the static rule table predicted ${agree} of ${total} ops' devices`,
            chains: reports.map((r) => ({ kv: r.kv, packages: placementSummary(r.report), ops: r.ops })),
          },
        };
      });
      await step(
        "timing:measured",
        "measured predictions per package (Core ML, cpuAndNeuralEngine)",
        async () => {
          const rows = [];
          for (const [kv, dir] of chains) {
            const r = await costplan(dir, { native: "require", measure: { warmup: 3, runs: 20 } });
            rows.push({
              kv,
              measuredTokPerSec: r.chain?.measuredTokPerSec,
              estimatedTokPerSec: r.chain?.estimatedTokPerSec,
              packages: r.packages.map((p) => ({
                package: p.name,
                measuredMs: p.prediction.measuredMs,
                estimatedMs: p.prediction.estimatedMs,
                // what `costplan calibrate --from` fits this measurement with
                work: workOf(r, p.name),
              })),
            });
          }
          return {
            value: true,
            details: {
              summary: rows
                .map(
                  (r) =>
                    `${r.kv}: ${r.packages.map((p) => `${p.package} ${p.measuredMs?.toFixed(2)} ms`).join(", ")}`,
                )
                .join("; "),
              chains: rows,
            },
          };
        },
      );
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }

  return {
    schema: SELFTEST_SCHEMA,
    schemaVersion: SELFTEST_SCHEMA_VERSION,
    createdAt: new Date().toISOString(),
    tool: { name: "anemll-qwen35", version: o.version },
    platform: {
      os: process.platform,
      arch: process.arch,
      release: release(),
      ...(macos ? { macos } : {}),
      ...(machine.chip ? { chip: machine.chip } : {}),
      ...(neuralEngine ? { neuralEngine } : {}),
      cpus: machine.cpu.cores,
      memoryBytes: machine.memoryBytes,
      node: process.version,
    },
    backends: [...o.backends],
    model: { source: o.modelSource, ctx: CTX, promptTokens, decodeSteps },
    steps,
    totals: {
      ok: steps.filter((s) => s.status === "ok").length,
      failed: steps.filter((s) => s.status === "failed").length,
      skipped: steps.filter((s) => s.status === "skipped").length,
    },
  };
}
