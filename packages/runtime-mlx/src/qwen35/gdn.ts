/**
 * Gated DeltaNet (linear attention) layer (qwen35-architecture.md §2.4; mlx-lm qwen3_5.py GatedDeltaNet).
 *   qkv, z, b, a = projections of x
 *   conv_out     = silu(causal depthwise conv1d over [conv_state | qkv])   (kernel K, no bias)
 *   q, k, v      = split(conv_out); q, k L2-normalised per head, q scaled by dk^-1/2
 *   beta = sigmoid(b);  g = exp(-exp(A_log) · softplus(a + dt_bias))      (a decay factor, fp32)
 *   y, S         = gated delta rule over the tokens (fp32 state [1, Hv, Dv, Dk])
 *   out          = out_proj(gated_rms_norm(y, z))                          (plain w, not 1 + w)
 */
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import * as mx from "../mlx.js";
import type { MxArray } from "../native.js";
import type { GdnState } from "./cache.js";
import { type FusedLinear, fusedLinear, linear, type Weight } from "./linear.js";

export interface GdnWeights {
  /** in_proj_qkv | in_proj_z | in_proj_b | in_proj_a. */
  readonly inProj: FusedLinear;
  /** Depthwise conv weight [convDim, K, 1] (MLX layout). */
  readonly conv: MxArray;
  /** [Hv], float32. */
  readonly aLog: MxArray;
  /** [Hv] */
  readonly dtBias: MxArray;
  /** Gated RMSNorm weight [dv] (plain). */
  readonly norm: MxArray;
  readonly out: Weight;
}

/**
 * L2 normalisation (eps 1e-6 on the sum of squares, as HF's l2norm) with the readout scale folded in:
 * rms_norm adds its eps to the mean, so it is scaled by 1/dk (mlx-lm gated_delta.normalize_qk).
 */
function normalizeQk(q: MxArray, k: MxArray, dk: number): [MxArray, MxArray] {
  const invScale = dk ** -0.5;
  const eps = 1e-6 * invScale * invScale;
  return [
    mx.multiply(mx.rmsNorm(q, null, eps), invScale * invScale),
    mx.multiply(mx.rmsNorm(k, null, eps), invScale),
  ];
}

/**
 * x [1, T, D] → [1, T, D] and the layer's new state (`state` undefined: start of sequence). With
 * `perRow`, also the state after each of the T rows (`rows[j]`: after rows 0..j), for a
 * speculative verify that commits only an accepted prefix: the recurrence then runs one row at a
 * time, the same kernel call a decode step makes.
 */
export function gatedDeltaNet(
  cfg: Qwen35Config,
  w: GdnWeights,
  x: MxArray,
  state: GdnState | undefined,
  perRow = false,
): { out: MxArray; state: GdnState; rows?: GdnState[] } {
  const [B, T] = x.shape;
  const {
    linearNumKeyHeads: Hk,
    linearNumValueHeads: Hv,
    linearKeyHeadDim: dk,
    linearValueHeadDim: dv,
  } = cfg;
  const K = cfg.linearConvKernelDim;
  const C = cfg.convDim;
  const [qkv, z, b, a] = fusedLinear(w.inProj, x);

  const convState = state?.conv ?? mx.zeros([B, K - 1, C], x.dtype);
  const convIn = mx.concatenate([convState, qkv], 1); // [B, K-1+T, C]
  const nextConv = mx.contiguous(mx.slice(convIn, [0, T], [B, T + K - 1]));
  const convOut = mx.silu(mx.conv1d(convIn, w.conv, { groups: C })); // [B, T, C]

  const [qf, kf, vf] = mx.split(convOut, [cfg.keyDim, 2 * cfg.keyDim], -1);
  const [q, k] = normalizeQk(mx.reshape(qf, [B, T, Hk, dk]), mx.reshape(kf, [B, T, Hk, dk]), dk);
  const v = mx.reshape(vf, [B, T, Hv, dv]);
  const beta = mx.sigmoid(b); // [B, T, Hv]
  const g = mx.computeG(w.aLog, a, w.dtBias); // [B, T, Hv], fp32
  let y: MxArray;
  let recurrent: MxArray;
  let rows: GdnState[] | undefined;
  if (perRow) {
    const ys: MxArray[] = [];
    rows = [];
    let S = state?.recurrent;
    const row = (a: MxArray, t: number) => mx.slice(a, [0, t], [B, t + 1]);
    for (let t = 0; t < T; t++) {
      const r = mx.gatedDeltaPrefill(row(q, t), row(k, t), row(v, t), row(g, t), row(beta, t), S);
      ys.push(r.y);
      S = r.state;
      // the last K-1 conv inputs after row t
      rows.push({ conv: mx.contiguous(mx.slice(convIn, [0, t + 1], [B, t + K])), recurrent: S });
    }
    y = ys.length === 1 ? ys[0] : mx.concatenate(ys, 1);
    recurrent = S!;
  } else {
    ({ y, state: recurrent } = mx.gatedDeltaPrefill(q, k, v, g, beta, state?.recurrent));
  }

  const normed = mx.gatedRmsNorm(y, w.norm, mx.reshape(z, [B, T, Hv, dv]), cfg.rmsNormEps);
  const out = linear(w.out, mx.reshape(normed, [B, T, Hv * dv]));
  return { out, state: { conv: nextConv, recurrent }, rows };
}
