/** Dense SwiGLU MLP (reference §2.5): down( silu(gate·x) ⊙ up·x ). */
import type { MilVar } from "@anemll-qwen35/ir/mil";
import { conv1x1, siluTanh } from "./ane.js";
import type { GraphWeights } from "./weights.js";

/** x [1, D, 1, 1] → [1, D, 1, 1]. */
export async function mlp(w: GraphWeights, layer: number, x: MilVar): Promise<MilVar> {
  const b = w.b;
  const p = `layers.${layer}.mlp.`;
  const gate = conv1x1(b, x, await w.conv1x1Weight(`${p}gate_proj.weight`, "body"), "gate"); // [1, F, 1, 1]
  const up = conv1x1(b, x, await w.conv1x1Weight(`${p}up_proj.weight`, "body"), "up"); // [1, F, 1, 1]
  const h = b.mul({ x: siluTanh(b, gate, "act"), y: up, name: "h" });
  return conv1x1(b, h, await w.conv1x1Weight(`${p}down_proj.weight`, "body"), "down"); // [1, D, 1, 1]
}
