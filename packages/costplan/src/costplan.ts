/**
 * costplan(): what a converted package (or a chain of them) costs on the ANE.
 *
 *   const report = await costplan("out/qwen35-0.8b", { chip: "m4-pro" });
 *   console.log(formatReport(report));
 *
 * Everywhere: the static model (analyze.ts → assemble.ts). On macOS 14.4+ with the addon built,
 * Core ML's MLComputePlan replaces the predicted placement (`source: "mlcomputeplan"`), and with
 * `measure` a timed prediction loop runs each package.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COMPUTE_UNITS, type ComputeUnits } from "@anemll-qwen35/coreml";
import type { MlModel } from "@anemll-qwen35/ir/mil";
import { type AnalyzedModel, analyzeModel, defaultFunctionOf } from "./analyze.js";
import { buildReport, type ComponentInput } from "./assemble.js";
import { FITTED_BAND, FITTED_RUNTIME } from "./calibration.js";
import { type ChainInput, loadTarget } from "./chain.js";
import { CHIPS, type ChipId, type ChipProfile, DEFAULT_RUNTIME, type RuntimeFigures } from "./chips.js";
import { CostplanOptionError, NativePlanUnavailableError } from "./errors.js";
import type { Calibration } from "./fit.js";
import {
  type CostplanAddon,
  loadNativeAddon,
  mergePlan,
  type NativePlan,
  nativeAvailability,
} from "./native.js";
import type { CostReport, RuntimeBand } from "./report.js";

export interface CostplanOptions {
  /** Chip profile id (default "m4-pro") or a custom profile. */
  chip?: ChipId | ChipProfile;
  /** Core ML compute units the placement assumes (default "cpuAndNeuralEngine", as ANEMLL). */
  computeUnits?: ComputeUnits;
  /**
   * "fitted" (default): the figures bench/calibrate.ts fitted, projections as a band over the
   * per-op ANE cost's range; "none": physics only, no band; or a Calibration (readCalibration of
   * a file `costplan calibrate` wrote).
   */
  calibration?: "fitted" | "none" | Calibration;
  /** Override single runtime figures (dispatchMs, bandwidthFraction, switchMs, …); the band is kept. */
  runtime?: Partial<RuntimeFigures>;
  /** Use MLComputePlan when available ("auto", default), never ("off"), or fail without it ("require"). */
  native?: "auto" | "off" | "require";
  /** Time `runs` predictions of each package after `warmup` ones (macOS only; default off). */
  measure?: boolean | { warmup?: number; runs?: number };
  /** Function a decode step calls, for packages whose chain entry names none. */
  decodeFunction?: string;
  signal?: AbortSignal;
  onProgress?: (p: {
    stage: "analyze" | "plan" | "measure";
    component: string;
    index: number;
    total: number;
  }) => void;
}

/** How long MLComputePlan may take per package before costplan gives up on it. */
const PLAN_TIMEOUT_MS = 10 * 60_000;

function chipFrom(opt: CostplanOptions["chip"]): ChipProfile {
  if (opt === undefined) return CHIPS["m4-pro"];
  if (typeof opt === "string") {
    const c = CHIPS[opt as ChipId];
    if (!c)
      throw new CostplanOptionError(
        "chip",
        `unknown chip "${opt}" (known: ${Object.keys(CHIPS).join(", ")})`,
      );
    return c;
  }
  return opt;
}

function runtimeFrom(opts: CostplanOptions): { runtime: RuntimeFigures; band?: RuntimeBand } {
  const cal = opts.calibration ?? "fitted";
  if (typeof cal === "object" && cal !== null && "runtime" in cal && "band" in cal)
    return { runtime: { ...cal.runtime, ...opts.runtime }, band: cal.band };
  if (cal !== "fitted" && cal !== "none")
    throw new CostplanOptionError(
      "calibration",
      `must be "fitted", "none" or a Calibration, got ${JSON.stringify(cal)}`,
    );
  return cal === "fitted"
    ? { runtime: { ...FITTED_RUNTIME, ...opts.runtime }, band: FITTED_BAND }
    : { runtime: { ...DEFAULT_RUNTIME, ...opts.runtime } };
}

export async function costplan(
  target: string | MlModel | ChainInput,
  options: CostplanOptions = {},
): Promise<CostReport> {
  const chip = chipFrom(options.chip);
  const { runtime, band } = runtimeFrom(options);
  const units = options.computeUnits ?? "cpuAndNeuralEngine";
  if (!COMPUTE_UNITS.includes(units)) {
    throw new CostplanOptionError(
      "computeUnits",
      `must be one of ${COMPUTE_UNITS.join(", ")}, got "${units}"`,
    );
  }
  const nativeMode = options.native ?? "auto";
  const notes: string[] = [];

  options.signal?.throwIfAborted();
  const loaded = await loadTarget(target);
  const onHost = loaded.components.filter((c) => c.host);
  const t = { ...loaded, components: loaded.components.filter((c) => !c.host) };
  if (onHost.length > 0)
    notes.push(
      `${onHost.map((c) => c.name).join(", ")}: read on the host by the runtime (no prediction), not costed.`,
    );
  const total = t.components.length;

  const status = nativeMode === "off" ? { available: false, reason: "native: off" } : nativeAvailability();
  if (nativeMode === "require" && !status.available) {
    throw new NativePlanUnavailableError(`costplan native: "require": ${status.reason}`);
  }
  const addon = status.available ? loadNativeAddon() : undefined;
  const measure = options.measure
    ? { warmup: 3, runs: 20, ...(options.measure === true ? {} : options.measure) }
    : undefined;
  if (measure && !addon) {
    if (nativeMode === "require")
      throw new NativePlanUnavailableError(`measure needs the MLComputePlan addon: ${status.reason}`);
    notes.push(`Measured predictions skipped: ${status.reason}.`);
  }

  const components: ComponentInput[] = [];
  for (const [index, c] of t.components.entries()) {
    options.signal?.throwIfAborted();
    options.onProgress?.({ stage: "analyze", component: c.name, index, total });
    let analysis: AnalyzedModel = analyzeModel(c.model, units);
    const decodeFunction = c.function ?? options.decodeFunction ?? defaultFunctionOf(c.model);
    if (!analysis.functions.some((f) => f.name === decodeFunction)) {
      throw new CostplanOptionError(
        "decodeFunction",
        `${c.name} has no function "${decodeFunction}" (functions: ${analysis.functions.map((f) => f.name).join(", ")})`,
      );
    }
    let source: ComponentInput["source"] = "static-estimate";
    let measured: ComponentInput["measured"];
    if (addon && c.path) {
      options.onProgress?.({ stage: "plan", component: c.name, index, total });
      try {
        const multifunction = analysis.functions.length > 1;
        const r = await withCompiled(addon, c.path, async (compiled) => {
          const plan = await planOf(
            addon,
            compiled,
            units,
            multifunction ? analysis.functions.map((f) => f.name) : null,
          );
          let m: ComponentInput["measured"];
          if (measure) {
            options.onProgress?.({ stage: "measure", component: c.name, index, total });
            const fnName = multifunction ? decodeFunction : null;
            const res = await addon.measure(compiled, units, fnName, measure.warmup, measure.runs);
            m = { ms: res.averageMs, runs: res.runs, warmup: res.warmup };
          }
          return { plan, m };
        });
        analysis = mergePlan(analysis, r.plan);
        source = "mlcomputeplan";
        measured = r.m;
      } catch (cause) {
        if (nativeMode === "require") {
          throw new NativePlanUnavailableError(
            `${c.name}: Core ML could not plan ${c.path}: ${(cause as Error).message}`,
            { cause },
          );
        }
        notes.push(
          `${c.name}: MLComputePlan failed (${(cause as Error).message}); placement predicted by rule.`,
        );
      }
    } else if (addon && !c.path) {
      notes.push(
        `${c.name}: an in-memory model has no package on disk, so MLComputePlan could not run; placement predicted.`,
      );
    }
    components.push({ name: c.name, path: c.path, analysis, decodeFunction, source, measured });
  }

  if (!addon) {
    notes.push(
      `Placement predicted by the static rule table (MLComputePlan unavailable: ${status.reason}); times are roofline estimates, not measurements.`,
    );
  }
  notes.push(
    runtime.dispatchMs.kind === "fitted"
      ? `Dispatch overhead, ANE bandwidth fraction, the cost of passing inputs/outputs and the ctx term fitted (${runtime.dispatchMs.source}).`
      : "Dispatch overhead, ANE bandwidth fraction, the cost of passing inputs/outputs and the ctx term not calibrated (calibration: none).",
  );
  if (band) notes.push(`Projections come as a band: ${band.source}.`);
  return buildReport({
    target: { kind: t.kind, name: t.name, path: t.path },
    components,
    chip,
    runtime,
    band,
    computeUnits: units,
    chain: t.kind === "chain",
    notes,
  });
}

/**
 * MLComputePlan of a compiled package. A multifunction package is planned once per function, with
 * that function selected in the configuration, and each function's operations are taken from its
 * own plan.
 */
async function planOf(
  addon: CostplanAddon,
  compiled: string,
  units: ComputeUnits,
  functions: readonly string[] | null,
): Promise<NativePlan> {
  if (!functions) return addon.computePlan(compiled, units, null, PLAN_TIMEOUT_MS);
  const out: NativePlan["functions"][number][] = [];
  for (const name of functions) {
    const plan = await addon.computePlan(compiled, units, name, PLAN_TIMEOUT_MS);
    const f = plan.functions.find((x) => x.name === name);
    if (f) out.push(f);
  }
  return { functions: out };
}

/** Compiles a package into a temporary .mlmodelc, runs `fn` on it, removes it. */
async function withCompiled<T>(
  addon: CostplanAddon,
  pkg: string,
  fn: (compiled: string) => Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), "costplan-"));
  try {
    const compiled = await addon.compile(pkg, join(dir, "model.mlmodelc"));
    return await fn(compiled);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
