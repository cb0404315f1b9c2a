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

type Inputs = [q: MxArray, k: MxArray, v: MxArray, g: MxArray, beta: MxArray];
/** q, k, v, g, beta, the state (zeros when omitted) and a mask → the outputs and the new state. */
type GatedDelta = (...args: [...Inputs, state?: MxArray, mask?: MxArray]) => GatedDeltaResult;

const gatedDelta =
  (name: "gatedDeltaStep" | "gatedDeltaPrefill" | "gatedDeltaUpdate"): GatedDelta =>
  (q, k, v, g, beta, state, mask) =>
    // the step's exported type requires the state; the native binding checks it too
    result(native()[name](q, k, v, g, beta, state as MxArray, mask));

/**
 * One token of the gated delta rule (already repeated to H value heads):
 *   S = S·g;  kv = Σ_k S·k;  delta = (v − kv)·beta;  S = S + delta ⊗ k;  y = Σ_k S·q
 * q, k [B, H, Dk]; v [B, H, Dv]; g [B, H] (decay factor, not its log) or [B, H, Dk]; beta [B, H];
 * state [B, H, Dv, Dk]; mask [B] (false: keep the old state).
 */
export const gatedDeltaStep: (...args: [...Inputs, state: MxArray, mask?: MxArray]) => GatedDeltaResult =
  gatedDelta("gatedDeltaStep");

/**
 * The gated delta rule over T tokens: on CPU streams one runtime-mlx kernel node (no mask; with a mask,
 * the compiled step looped in C++), on Metal MLX's fast.gated_delta_update.
 * q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv] (Hv a multiple of Hk: value head j reads key head j / (Hv/Hk));
 * g [B, T, Hv] (or [B, T, Hv, Dk]); beta [B, T, Hv]; state [B, Hv, Dv, Dk] (zeros when omitted); mask [B, T].
 */
export const gatedDeltaPrefill: GatedDelta = gatedDelta("gatedDeltaPrefill");

/** Same contract as gatedDeltaPrefill, computed by MLX's own fused kernel (mx.fast.gated_delta_update). */
export const gatedDeltaUpdate: GatedDelta = gatedDelta("gatedDeltaUpdate");

/** Qwen3-Next RMSNormGated: rms_norm(x, weight, eps) · silu(z), the product in fp32, cast back to x's dtype. */
export const gatedRmsNorm = (x: MxArray, weight: MxArray | null, z: MxArray, eps: number): MxArray =>
  track(native().gatedRmsNorm(x, weight, z, eps));

/** SwiGLU: silu(gate) · x. */
export const swiglu = (gate: MxArray, x: MxArray): MxArray => track(native().swiglu(gate, x));

/** The GDN decay factor g = exp(−exp(A_log) · softplus(a + dt_bias)) in (0, 1], float32. */
export const computeG = (aLog: MxArray, a: MxArray, dtBias: MxArray): MxArray =>
  track(native().computeG(aLog, a, dtBias));

// --- projections with runtime-mlx's CPU kernels (native/cpu_kernels.cc); MLX's ops on other devices

/** x [..., K] @ wᵀ for w [N, K] (float32/bf16/fp16). */
export const linear = (x: MxArray, w: MxArray): MxArray => track(native().linear(x, w));

/** x [..., K] @ dequantize(wq)ᵀ: affine quantization, wq [N, K·bits/32] uint32, scales/biases [N, K/groupSize]. */
export const quantizedLinear = (
  x: MxArray,
  wq: MxArray,
  scales: MxArray,
  biases: MxArray,
  options: { bits: number; groupSize: number },
): MxArray => track(native().quantizedLinear(x, wq, scales, biases, options.bits, options.groupSize));

/**
 * Expert projections (MoE): out[p] = x[p / rowsPerX] @ W[indices[p]]ᵀ → [P, N]. x [X, K]; w [E, N, K]
 * dense, or packed [E, N, K·bits/32] with `quantized` scales/biases [E, N, K/groupSize]; indices [P]
 * uint32 (P = X · rowsPerX).
 */
export function gatherLinear(
  x: MxArray,
  w: MxArray,
  indices: MxArray,
  options: {
    rowsPerX?: number;
    quantized?: { scales: MxArray; biases: MxArray; bits: number; groupSize: number };
  } = {},
): MxArray {
  const q = options.quantized;
  return track(
    native().gatherLinear(
      x,
      w,
      q?.scales,
      q?.biases,
      indices,
      q?.bits ?? 0,
      q?.groupSize ?? 64,
      options.rowsPerX ?? 1,
    ),
  );
}

/** Threads runtime-mlx's CPU kernels use ($RUNTIME_MLX_CPU_THREADS, else the hardware's). */
export const cpuKernelThreads = (): number => native().cpuKernelThreads();

/**
 * Turns runtime-mlx's CPU kernels on or off (default on; RUNTIME_MLX_CPU_KERNELS=0 starts with them
 * off). Off, linear / quantizedLinear / gatherLinear / gatedDeltaPrefill build MLX's own ops. Affects
 * graphs built afterwards. Returns the previous setting.
 */
export const setCpuKernelsEnabled = (enabled: boolean): boolean => native().setCpuKernelsEnabled(enabled);
