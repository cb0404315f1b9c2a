/**
 * Core ML's MLComputePlan and a measured prediction loop, through @anemll-qwen35/coreml's addon
 * (macOS 14.4+ where it was built). Elsewhere `nativeAvailability()` says why and the static
 * model serves (reports then say `source: "static-estimate"`). Nothing here pretends to be Core ML.
 */
import {
  type CoreMLAddon,
  coreMLAvailability,
  loadCoreMLAddon,
  type NativePlan,
  type NativePlanOp,
} from "@anemll-qwen35/coreml";
import type { AnalyzedFunction, AnalyzedModel } from "./analyze.js";
import { NativePlanUnavailableError } from "./errors.js";
import type { OpEntry } from "./report.js";

export type { NativeMeasurement, NativePlan, NativePlanOp } from "@anemll-qwen35/coreml";
/** The part of the Core ML addon costplan uses. */
export type CostplanAddon = Pick<CoreMLAddon, "compile" | "computePlan" | "measure" | "macosVersion">;

export function nativeAvailability(): { available: boolean; reason?: string } {
  return coreMLAvailability("computePlan");
}

export function loadNativeAddon(): CostplanAddon {
  const status = nativeAvailability();
  if (!status.available)
    throw new NativePlanUnavailableError(status.reason ?? "MLComputePlan is unavailable");
  return loadCoreMLAddon("computePlan");
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
