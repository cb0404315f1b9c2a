/**
 * The macOS addon (native/costplan_addon.mm) over Core ML's MLComputePlan and a measured
 * prediction loop. Loaded only on macOS 14.4+ where it was built; elsewhere
 * `nativeAvailability()` says why and the static model serves (reports then say
 * `source: "static-estimate"`). Nothing here pretends to be Core ML.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { release } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AnalyzedFunction, AnalyzedModel } from "./analyze.js";
import { NativePlanUnavailableError } from "./errors.js";
import type { ComputeUnits, Device } from "./placement.js";
import type { OpEntry } from "./report.js";

/** One operation of MLComputePlan's view of a compiled program. */
export interface NativePlanOp {
  /** MLModelStructureProgramOperation.operatorName, e.g. "ios18.conv" or "const". */
  readonly operatorName: string;
  readonly outputs: readonly string[];
  /** computeDeviceUsageForMLProgramOperation: preferredComputeDevice (null when Core ML gives none). */
  readonly preferred: Device | null;
  readonly supported: readonly Device[];
  /** estimatedCostOfMLProgramOperation: weight in [0, 1] (null when Core ML gives none). */
  readonly cost: number | null;
}

export interface NativePlan {
  readonly functions: readonly { readonly name: string; readonly operations: readonly NativePlanOp[] }[];
}

export interface NativeMeasurement {
  readonly averageMs: number;
  readonly minMs: number;
  readonly maxMs: number;
  readonly runs: number;
  readonly warmup: number;
}

export interface CostplanAddon {
  /** +[MLModel compileModelAtURL:error:] into `compiledPath` (moved there from Core ML's temp dir). */
  compile(packagePath: string, compiledPath: string): Promise<string>;
  computePlan(compiledPath: string, computeUnits: ComputeUnits): Promise<NativePlan>;
  measure(
    compiledPath: string,
    computeUnits: ComputeUnits,
    functionName: string | null,
    warmup: number,
    runs: number,
  ): Promise<NativeMeasurement>;
  macosVersion(): string;
}

/** Darwin 23.4 = macOS 14.4, the first with MLComputePlan. */
const MIN_DARWIN: readonly [number, number] = [23, 4];

function addonPath(): string {
  // src/ and dist/ both sit one level below the package root
  return join(
    dirname(fileURLToPath(import.meta.url)),
    "..",
    "build",
    "Release",
    "costplan_mlcomputeplan.node",
  );
}

export function nativeAvailability(): { available: boolean; reason?: string } {
  if (process.platform !== "darwin") {
    return {
      available: false,
      reason: `MLComputePlan needs macOS 14.4 or later; this is ${process.platform}`,
    };
  }
  const [major, minor] = release().split(".").map(Number);
  if (major < MIN_DARWIN[0] || (major === MIN_DARWIN[0] && minor < MIN_DARWIN[1])) {
    return { available: false, reason: `MLComputePlan needs macOS 14.4 or later (Darwin ${release()})` };
  }
  if (!existsSync(addonPath())) {
    return {
      available: false,
      reason: `the MLComputePlan addon is not built (${addonPath()}); run \`pnpm --filter @anemll-qwen35/costplan build:native\``,
    };
  }
  return { available: true };
}

let cached: CostplanAddon | undefined;

export function loadNativeAddon(): CostplanAddon {
  if (cached) return cached;
  const status = nativeAvailability();
  if (!status.available)
    throw new NativePlanUnavailableError(status.reason ?? "MLComputePlan is unavailable");
  cached = createRequire(import.meta.url)(addonPath()) as CostplanAddon;
  return cached;
}

/** "ios18.conv" → "conv". */
export function shortOpType(operatorName: string): string {
  return operatorName.replace(/^ios\d+\./, "");
}

function describe(op: NativePlanOp): string {
  const supported = op.supported.length ? op.supported.join(", ") : "none reported";
  return `MLComputePlan: preferred ${op.preferred ?? "none"}; supported ${supported}`;
}

/**
 * Replaces the predicted placement of each op with Core ML's, matching ops by their first output
 * name (then, for ops without outputs such as write_state, by order among ops of the same type).
 * Ops only the compiled program has are appended with no static work; static ops Core ML did not
 * list keep their predicted placement and say so.
 */
export function mergePlan(analysis: AnalyzedModel, plan: NativePlan): AnalyzedModel {
  return {
    ...analysis,
    functions: analysis.functions.map((f) => {
      const pf = plan.functions.find((p) => p.name === f.name);
      return pf ? mergeFunction(f, pf.operations) : f;
    }),
  };
}

function mergeFunction(f: AnalyzedFunction, native: readonly NativePlanOp[]): AnalyzedFunction {
  const byOutput = new Map<string, NativePlanOp>();
  const noOutput = new Map<string, NativePlanOp[]>();
  for (const op of native) {
    if (op.outputs.length > 0) byOutput.set(op.outputs[0], op);
    else {
      const t = shortOpType(op.operatorName);
      noOutput.set(t, [...(noOutput.get(t) ?? []), op]);
    }
  }
  const used = new Set<NativePlanOp>();
  const ops: OpEntry[] = f.ops.map((entry, i) => {
    const out = f.outputNames[i][0];
    const n = out !== undefined ? byOutput.get(out) : noOutput.get(entry.type)?.shift();
    if (!n) {
      return entry.device === "load"
        ? entry
        : { ...entry, reason: `${entry.reason} (not listed by MLComputePlan; predicted by rule)` };
    }
    used.add(n);
    const base = { ...entry, supportedDevices: [...n.supported], planCost: n.cost ?? undefined };
    if (entry.device === "load") return base;
    if (!n.preferred)
      return { ...base, reason: `${entry.reason} (MLComputePlan gave no device; predicted by rule)` };
    return { ...base, device: n.preferred, rule: "mlcomputeplan", reason: describe(n) };
  });
  for (const n of native) {
    if (used.has(n) || n.operatorName === "const" || shortOpType(n.operatorName).startsWith("constexpr_"))
      continue;
    ops.push({
      index: ops.length,
      name: n.outputs[0] ?? n.operatorName,
      type: shortOpType(n.operatorName),
      device: n.preferred ?? "CPU",
      rule: "mlcomputeplan",
      reason: `${describe(n)} (in the compiled program only; no static work counted)`,
      supportedDevices: [...n.supported],
      planCost: n.cost ?? undefined,
      flops: 0,
      bytesRead: { weights: 0, activations: 0, state: 0 },
      bytesWritten: { activations: 0, state: 0 },
      intensity: 0,
      bound: "none",
      estimatedMs: 0,
      formula: "unknown",
    });
  }
  return { ...f, ops };
}
