/**
 * Sparse MoE block (qwen35-architecture.md §2.6; HF Qwen3_5MoeSparseMoeBlock, mlx-lm
 * Qwen3NextSparseMoeBlock + SwitchGLU):
 *   p        = softmax(router(x)) over all experts, in fp32
 *   (w, idx) = top-k of p, renormalised to sum 1 (always, as HF), cast to the activation dtype
 *   routed   = Σ_k w_k · down_{idx_k}(silu(gate_{idx_k} x) · up_{idx_k} x)   (only the k experts run)
 *   out      = routed + sigmoid(shared_expert_gate x) · SwiGLU_shared(x)
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import { type FusedLinear, fusedGatherLinear, gatherLinear, linear, type Weight } from "./linear.js";
import { type MlpWeights, mlp } from "./mlp.js";

export interface MoeWeights {
  /** Router [E, D]. */
  readonly router: Weight;
  /** Per expert gate_proj | up_proj: [E, 2F, D] (or two [E, F, D] banks). */
  readonly expertsGateUp: FusedLinear;
  /** [E, D, F] */
  readonly expertsDown: Weight;
  readonly shared: MlpWeights;
  /** [1, D] */
  readonly sharedGate: Weight;
}

/** Visiting token-expert pairs grouped by expert pays off once there are this many (mlx-lm SwitchGLU). */
const SORT_THRESHOLD = 64;

/** x [1, T, D] → [1, T, D]. */
export function sparseMoe(cfg: Qwen35Config, w: MoeWeights, x: MxArray): MxArray {
  const k = cfg.moe!.numExpertsPerTok;
  const E = cfg.moe!.numExperts;
  const probs = mx.softmax(mx.astype(linear(w.router, x), "float32"), -1); // [1, T, E]
  const experts = mx.slice(mx.argpartition(probs, E - k, -1), [0, 0, E - k], [1, x.shape[1], E]); // [1, T, k]
  const top = mx.takeAlongAxis(probs, experts, -1);
  const scores = mx.astype(mx.divide(top, mx.sum(top, -1, true)), x.dtype);

  const routed = switchGlu(w, x, experts); // [1, T, k, D]
  const y = mx.sum(mx.multiply(routed, mx.expandDims(scores, -1)), -2);
  const shared = mx.multiply(mx.sigmoid(linear(w.sharedGate, x)), mlp(w.shared, x));
  return mx.add(y, shared);
}

/** The selected experts' SwiGLU for each token: x [1, T, D], experts [1, T, k] → [1, T, k, D]. */
function switchGlu(w: MoeWeights, x: MxArray, experts: MxArray): MxArray {
  const [B, T, D] = x.shape;
  const k = experts.shape[2];
  const rows = mx.reshape(x, [B * T, D]);
  const pairs = mx.flatten(experts); // [T k]: pair p is token p / k with its expert
  if (T * k < SORT_THRESHOLD) {
    const [gate, up] = fusedGatherLinear(w.expertsGateUp, rows, pairs, k); // [T k, F]
    const down = gatherLinear(w.expertsDown, mx.swiglu(gate, up), pairs, 1); // [T k, D]
    return mx.reshape(down, [B, T, k, D]);
  }
  // Many tokens: visit the pairs grouped by expert (each expert's weights read once), then restore the order.
  const order = mx.argsort(pairs);
  const inverse = mx.argsort(order);
  const sortedExperts = mx.take(pairs, order);
  const xs = mx.take(rows, mx.floorDivide(order, k), 0); // [T k, D]
  const [gate, up] = fusedGatherLinear(w.expertsGateUp, xs, sortedExperts, 1);
  const down = gatherLinear(w.expertsDown, mx.swiglu(gate, up), sortedExperts, 1); // [T k, D]
  return mx.reshape(mx.take(down, inverse, 0), [B, T, k, D]);
}
