/**
 * Fused Qwen3.5 steps compiled in C++ with mx::compile (native/fused.cc). Layouts follow mlx-lm:
 * the Gated DeltaNet state is [B, Hv, Dv, Dk] in float32.
 */
import { type MxArray, native } from "./native.js";
import { track } from "./tidy.js";

export interface GatedDeltaResult {
  /** Outputs, in q's dtype: [B, H, Dv] for a step, [B, T, Hv, Dv] for a sequence. */
  y: MxArray;
  /** The new recurrent state [B, Hv, Dv, Dk]. */
  state: MxArray;
}

function result(pair: [MxArray, MxArray]): GatedDeltaResult {
  track(pair);
  return { y: pair[0], state: pair[1] };
}

/**
 * One token of the gated delta rule (already repeated to H value heads):
 *   S = S·g;  kv = Σ_k S·k;  delta = (v − kv)·beta;  S = S + delta ⊗ k;  y = Σ_k S·q
 * q, k [B, H, Dk]; v [B, H, Dv]; g [B, H] (decay factor, not its log) or [B, H, Dk]; beta [B, H];
 * state [B, H, Dv, Dk]; mask [B] (false: keep the old state).
 */
export const gatedDeltaStep = (
  q: MxArray,
  k: MxArray,
  v: MxArray,
  g: MxArray,
  beta: MxArray,
  state: MxArray,
  mask?: MxArray,
): GatedDeltaResult => result(native().gatedDeltaStep(q, k, v, g, beta, state, mask));

/**
 * The gated delta rule over T tokens: the compiled step looped in C++.
 * q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv] (Hv a multiple of Hk: value head j reads key head j / (Hv/Hk));
 * g [B, T, Hv] (or [B, T, Hv, Dk]); beta [B, T, Hv]; state [B, Hv, Dv, Dk] (zeros when omitted); mask [B, T].
 */
export const gatedDeltaPrefill = (
  q: MxArray,
  k: MxArray,
  v: MxArray,
  g: MxArray,
  beta: MxArray,
  state?: MxArray,
  mask?: MxArray,
): GatedDeltaResult => result(native().gatedDeltaPrefill(q, k, v, g, beta, state, mask));

/** Same contract as gatedDeltaPrefill, computed by MLX's own fused kernel (mx.fast.gated_delta_update). */
export const gatedDeltaUpdate = (
  q: MxArray,
  k: MxArray,
  v: MxArray,
  g: MxArray,
  beta: MxArray,
  state?: MxArray,
  mask?: MxArray,
): GatedDeltaResult => result(native().gatedDeltaUpdate(q, k, v, g, beta, state, mask));

/** Qwen3-Next RMSNormGated: rms_norm(x, weight, eps) · silu(z), the product in fp32, cast back to x's dtype. */
export const gatedRmsNorm = (x: MxArray, weight: MxArray | null, z: MxArray, eps: number): MxArray =>
  track(native().gatedRmsNorm(x, weight, z, eps));

/** SwiGLU: silu(gate) · x. */
export const swiglu = (gate: MxArray, x: MxArray): MxArray => track(native().swiglu(gate, x));

/** The GDN decay factor g = exp(−exp(A_log) · softplus(a + dt_bias)) in (0, 1], float32. */
export const computeG = (aLog: MxArray, a: MxArray, dtBias: MxArray): MxArray =>
  track(native().computeG(aLog, a, dtBias));
