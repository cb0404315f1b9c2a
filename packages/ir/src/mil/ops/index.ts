/** The op registry: every MIL op this package knows, by type. */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { ATTENTION_OPS } from "./attention.js";
import { CONSTEXPR_OPS } from "./constexpr.js";
import { ELEMENTWISE_OPS } from "./elementwise.js";
import { LINALG_OPS } from "./linalg.js";
import type { OpDef, OpsetVersion } from "./opdef.js";
import { REDUCE_OPS } from "./reduce.js";
import { STATE_OPS } from "./state.js";
import { TENSOR_OPS } from "./tensor.js";

export const MIL_OPS: ReadonlyMap<string, OpDef> = new Map(
  [
    ...CONSTEXPR_OPS,
    ...ELEMENTWISE_OPS,
    ...LINALG_OPS,
    ...REDUCE_OPS,
    ...TENSOR_OPS,
    ...ATTENTION_OPS,
    ...STATE_OPS,
  ].map((d) => [d.type, d]),
);

export function getOpDef(type: string): OpDef | undefined {
  return MIL_OPS.get(type);
}

const OPSETS: Readonly<Record<string, number>> = {
  CoreML5: 15,
  CoreML6: 16,
  CoreML7: 17,
  CoreML8: 18,
  CoreML9: 26,
};

/** iOS version of an opset string ("CoreML8" -> 18); undefined for unknown opsets. */
export function opsetIosVersion(opset: string): number | undefined {
  return OPSETS[opset];
}

/** Whether `def` exists in `opset` (signatures themselves are the iOS18 ones). */
export function opAvailableIn(def: OpDef, opset: string): boolean {
  const v = opsetIosVersion(opset);
  const since: OpsetVersion = def.available ?? def.version;
  return v !== undefined && v >= Number(since.slice(3));
}

/** Specification version that goes with an opset ("CoreML8" -> 9). */
export function specVersionForOpset(opset: string): number {
  const v = opsetIosVersion(opset);
  if (v === undefined) throw new InvalidArgumentError(`unknown opset "${opset}" (expected CoreML5..CoreML9)`);
  return v === 26 ? 10 : v - 9;
}

export type {
  CompressOptions,
  DTypeSpec,
  EvalContext,
  InputInfo,
  OpDef,
  OpsetVersion,
  ParamDef,
  Precision,
} from "./opdef.js";
export { OpArgs, ParamError } from "./opdef.js";
