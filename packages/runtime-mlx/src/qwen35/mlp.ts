/** The dense SwiGLU feed-forward (qwen35-architecture.md §2.5): down(silu(gate x) · up x). */
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import { type FusedLinear, fusedLinear, linear, type Weight } from "./linear.js";

export interface MlpWeights {
  /** gate_proj | up_proj. */
  readonly gateUp: FusedLinear;
  readonly down: Weight;
}

export function mlp(w: MlpWeights, x: MxArray): MxArray {
  const [gate, up] = fusedLinear(w.gateUp, x);
  return linear(w.down, mx.swiglu(gate, up));
}
