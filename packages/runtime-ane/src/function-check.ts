/**
 * Whether a chain keeps its prefill function: pure decision logic, no I/O. A fused prefill function
 * of thousands of ops is where the ANE compiler is known to fall back to the CPU or GPU, so on a
 * Mac the first load reads where every op of it runs (MLComputePlan) and times one call against
 * T decode steps; prefill-check.ts gathers those numbers through the backend's seam and records
 * the verdict, this file only decides.
 */
import type { ComputeDevice, NativePlanOp } from "@anemll-qwen35/coreml";

/** Where the ops of one function of one package run. */
export interface FunctionPlacement {
  readonly component: string;
  readonly function: string;
  /** "decode" (one token a call), "prefill" (T tokens a call) or "head" (the lm_head pieces). */
  readonly role: "decode" | "prefill" | "head";
  readonly ane: number;
  readonly cpu: number;
  readonly gpu: number;
  /** Ops Core ML named no device for (e.g. folded away); they count neither way. */
  readonly unplaced: number;
  /** The first few ops off the ANE, for the reason line. */
  readonly offAne: readonly {
    readonly name: string;
    readonly type: string;
    readonly device: ComputeDevice;
  }[];
  /** Why the placement could not be read (then nothing above is known). */
  readonly error?: string;
}

export interface PrefillCheckInput {
  /** Every function the chain will use; only the prefill functions decide. */
  readonly placements: readonly FunctionPlacement[];
  /** One prefill call of T tokens through every super-block, ms. */
  readonly prefillMs: number;
  /** One decode step through every super-block (median over T steps), ms. */
  readonly decodeMs: number;
  /** Tokens per prefill call. */
  readonly T: number;
  /** Why the timed prefill call failed, when it did. */
  readonly prefillError?: string;
  /**
   * Whether the ops should be on the ANE (default true). False where the compute units leave it out
   * or this Mac has none: then speed alone decides.
   */
  readonly requireAne?: boolean;
}

export interface PrefillDecision {
  readonly keep: boolean;
  /** One line saying why, for the log and `doctor --selftest`. */
  readonly reason: string;
}

const OFF_ANE_SHOWN = 3;

/** Ops that hold constants are resolved at load time and run nowhere. */
const loadTime = (operatorName: string) => /^(ios\d+\.)?(const|constexpr_)/.test(operatorName);

/** Counts the devices MLComputePlan prefers for the ops of one function. */
export function placementOf(
  component: string,
  fn: string,
  role: FunctionPlacement["role"],
  ops: readonly NativePlanOp[],
): FunctionPlacement {
  let ane = 0;
  let cpu = 0;
  let gpu = 0;
  let unplaced = 0;
  const offAne: { name: string; type: string; device: ComputeDevice }[] = [];
  for (const op of ops) {
    if (loadTime(op.operatorName)) continue;
    if (op.preferred === null) unplaced++;
    else if (op.preferred === "ANE") ane++;
    else {
      if (op.preferred === "CPU") cpu++;
      else gpu++;
      if (offAne.length < OFF_ANE_SHOWN)
        offAne.push({
          name: op.outputs[0] ?? op.operatorName,
          type: op.operatorName.replace(/^ios\d+\./, ""),
          device: op.preferred,
        });
    }
  }
  return { component, function: fn, role, ane, cpu, gpu, unplaced, offAne };
}

const offCount = (p: FunctionPlacement) => p.cpu + p.gpu;
const ms = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

function describeOff(p: FunctionPlacement): string {
  const total = p.ane + p.cpu + p.gpu;
  const eg = p.offAne.map((o) => `${o.name} (${o.type}) on ${o.device}`).join(", ");
  return `${offCount(p)} of ${total} ops of ${p.component}'s ${p.function} run off the ANE${eg ? `, e.g. ${eg}` : ""}`;
}

/**
 * Keep the prefill function only if every op of it runs on the ANE (where one is expected) and a
 * call costs less per token than a decode step; else prompts go token by token through decode.
 */
export function decidePrefill(input: PrefillCheckInput): PrefillDecision {
  const { T, prefillMs, decodeMs } = input;
  const prefill = input.placements.filter((p) => p.role === "prefill");
  if (input.prefillError !== undefined)
    return { keep: false, reason: `prefill function dropped: a call failed (${input.prefillError})` };
  if (input.requireAne !== false) {
    const unread = prefill.find((p) => p.error !== undefined);
    if (unread)
      return {
        keep: false,
        reason: `prefill function dropped: where ${unread.component}'s ${unread.function} runs could not be read (${unread.error})`,
      };
    const off = prefill.filter((p) => offCount(p) > 0);
    if (off.length > 0) {
      const more = off.length > 1 ? ` (and ${off.length - 1} more package(s))` : "";
      return {
        keep: false,
        reason: `prefill function dropped: ${describeOff(off[0])}${more}; prompts run token by token through decode`,
      };
    }
  }
  if (!(T > 0) || !Number.isFinite(prefillMs) || !Number.isFinite(decodeMs))
    return { keep: false, reason: "prefill function dropped: its timing could not be measured" };
  const perToken = prefillMs / T;
  const timing = `${T} tokens in ${ms(prefillMs)} ms (${ms(perToken)} ms/token) vs ${ms(decodeMs)} ms per decode step`;
  if (perToken >= decodeMs)
    return {
      keep: false,
      reason: `prefill function dropped: slower per token than decode, ${timing}; prompts run token by token through decode`,
    };
  const where =
    input.requireAne === false
      ? "no ANE placement asked for"
      : `every op of ${prefill.length} prefill function(s) on the ANE`;
  return {
    keep: true,
    reason: `prefill function kept: ${where}, ${timing} (${(decodeMs / perToken).toFixed(1)}× faster)`,
  };
}

/** One line per decode/head function that runs ops off the ANE (a warning, not a fallback). */
export function offAneWarnings(placements: readonly FunctionPlacement[]): string[] {
  return placements
    .filter((p) => p.role !== "prefill" && (offCount(p) > 0 || p.error !== undefined))
    .map((p) =>
      p.error !== undefined
        ? `where ${p.component}'s ${p.function} runs could not be read (${p.error})`
        : describeOff(p),
    );
}
