/**
 * Dense SwiGLU MLP (reference §2.5): down( silu(gate·x) ⊙ up·x ).
 *
 * An intermediate size F over `maxChannels` (the ANE's per-dimension limit; Qwen3.5-27B has
 * F = 17,408) is split into the fewest even pieces that fit: piece i takes gate/up output rows
 * [o_i, o_i + f_i) and down input columns [o_i, o_i + f_i), and the pieces' down outputs add up to
 * the same down(h) — every conv then stays within the limit.
 */
import type { MilVar } from "@anemll-qwen35/ir/mil";
import { conv1x1, siluTanh } from "./ane.js";
import { planPieces } from "./io.js";
import type { GraphWeights } from "./weights.js";

/** x [1, D, 1, 1] → [1, D, 1, 1]. */
export async function mlp(w: GraphWeights, layer: number, x: MilVar, maxChannels: number): Promise<MilVar> {
  const b = w.b;
  const p = `layers.${layer}.mlp.`;
  const F = w.param(`${p}gate_proj.weight`).shape[0];
  if (F <= maxChannels) {
    const gate = conv1x1(b, x, await w.conv1x1Weight(`${p}gate_proj.weight`), "gate"); // [1, F, 1, 1]
    const up = conv1x1(b, x, await w.conv1x1Weight(`${p}up_proj.weight`), "up"); // [1, F, 1, 1]
    const h = b.mul({ x: siluTanh(b, gate, "act"), y: up, name: "h" });
    return conv1x1(b, h, await w.conv1x1Weight(`${p}down_proj.weight`), "down"); // [1, D, 1, 1]
  }
  let sum: MilVar | undefined;
  // pieces in whole LUT groups (8 rows), so a piece's gate/up LUTs are the unsplit tensor's groups
  for (const [i, piece] of planPieces(F, maxChannels, 8).entries()) {
    const gate = conv1x1(
      b,
      x,
      await w.conv1x1WeightPiece(`${p}gate_proj.weight`, piece, "rows", `p${i}`),
      `gate_p${i}`,
    ); // [1, f_i, 1, 1]
    const up = conv1x1(
      b,
      x,
      await w.conv1x1WeightPiece(`${p}up_proj.weight`, piece, "rows", `p${i}`),
      `up_p${i}`,
    );
    const h = b.mul({ x: siluTanh(b, gate, `act_p${i}`), y: up, name: `h_p${i}` });
    const down = conv1x1(
      b,
      h,
      await w.conv1x1WeightPiece(`${p}down_proj.weight`, piece, "cols", `p${i}`),
      `down_p${i}`,
    ); // [1, D, 1, 1]
    sum = sum ? b.add({ x: sum, y: down, name: `down_sum${i}` }) : down;
  }
  return sum as MilVar;
}
