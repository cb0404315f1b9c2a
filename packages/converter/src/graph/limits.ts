/**
 * The ANE's size limits, checked on a built function: every tensor a conv or matmul reads or
 * writes must have each dimension within ANE_MAX_DIM (ane.ts), or Core ML runs that op — and
 * splits the program around it — off the ANE. The graph builders split what can be split (the
 * lm_head vocabulary, wide MLPs); this check names whatever still breaks the limit.
 */
import type { MilFunction, TensorType } from "@anemll-qwen35/ir/mil";
import { AneLimitError } from "../errors.js";
import { ANE_MAX_DIM } from "./ane.js";

const CHECKED = new Set(["conv", "matmul", "linear"]);

/**
 * Throws AneLimitError for the first conv/matmul operand or result over the limit. `tensorOf`
 * maps a weight constant's name to its checkpoint tensor.
 */
export function checkAneLimits(
  fn: MilFunction,
  component: string,
  tensorOf: (constName: string) => string | undefined,
  limit = ANE_MAX_DIM,
): void {
  const types = new Map<string, TensorType>();
  const producer = new Map<string, string>();
  for (const i of fn.inputs) if (i.type.kind === "tensor") types.set(i.name, i.type);
  for (const op of fn.block.operations) {
    for (const o of op.outputs) {
      if (o.type.kind === "tensor") types.set(o.name, o.type);
      producer.set(o.name, op.name);
    }
    if (!CHECKED.has(op.type)) continue;
    const operands: { operand: string; name?: string; type: TensorType | undefined }[] = [];
    for (const [param, bindings] of Object.entries(op.inputs)) {
      for (const bnd of bindings) {
        const type = bnd.kind === "var" ? types.get(bnd.name) : bnd.value.type;
        operands.push({ operand: `input ${param}`, name: bnd.kind === "var" ? bnd.name : undefined, type });
      }
    }
    for (const o of op.outputs)
      if (o.type.kind === "tensor") operands.push({ operand: "result", type: o.type });
    for (const x of operands) {
      if (!x.type?.shape.some((d) => d > limit)) continue;
      const constName = x.name ? producer.get(x.name) : undefined;
      throw new AneLimitError(
        component,
        {
          op: op.name,
          opType: op.type,
          operand: x.operand,
          shape: x.type.shape,
          tensor: constName ? tensorOf(constName) : undefined,
        },
        limit,
      );
    }
  }
}
