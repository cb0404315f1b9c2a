/**
 * One Gated DeltaNet (linear attention) layer, one decode step (reference §2.4), with its conv
 * window and recurrent state as explicit inputs and outputs.
 *
 * The delta rule is elementwise mul + reductions over the state (no degenerate matmuls: those
 * lowered poorly and hurt parity in anemll-qwen35, ane-toolchains.md §4.3). The depthwise causal
 * conv is the same: the window [3 cached columns | this token] is exactly one kernel wide, so each
 * channel's output is a 4-term dot product — mul + reduce_sum over the window, no conv op.
 */
import type { MilVar } from "@anemll-qwen35/ir/mil";
import {
  conv1x1,
  epsilon,
  GDN_NORM_EPS_SCALE,
  GDN_Q_SCALE,
  GDN_V_SCALE,
  repeatInterleaveHeads,
  rmsNormAne,
  scalar,
  siluTanh,
  softplusStable,
} from "./ane.js";
import type { GraphWeights } from "./weights.js";

/** The layer's state inputs: conv window [1, convDim, K-1] and recurrent state [1, Hv, dk, dv] (holds 64·S). */
export interface GdnStateIn {
  readonly conv: MilVar;
  readonly rec: MilVar;
}

export interface GdnStep {
  /** [1, D, 1, 1] */
  readonly out: MilVar;
  /** The next conv window [1, convDim, K-1]: the last K-1 pre-conv columns. */
  readonly conv: MilVar;
  /** The next recurrent state [1, Hv, dk, dv]. */
  readonly rec: MilVar;
  /** The verify function: the states after each of its T rows, [T, convDim, K-1] and [T, Hv, dk, dv]. */
  readonly rows?: { readonly conv: MilVar; readonly rec: MilVar };
}

/** L2 normalisation over the last axis, x·rsqrt(Σx² + 1e-6) (HF's l2norm; ε 2⁻¹⁴ in fp16), times `scale`. */
export function l2norm(w: GraphWeights, x: MilVar, scale: number, name: string): MilVar {
  const b = w.b;
  const ss = b.reduceSumSquare({ x, axes: [-1], keepDims: true, name: `${name}_ss` });
  const inv = b.rsqrt({ x: ss, epsilon: epsilon(1e-6, x), name: `${name}_rsqrt` });
  const unit = b.mul({ x, y: inv, name: scale === 1 ? name : `${name}_unit` });
  return scale === 1 ? unit : b.mul({ x: unit, y: scalar(scale, x), name });
}

/**
 * One GDN layer's sizes and the prefix of its tensors' names, as the decode step and the prefill
 * chunk (gdn-chunked.ts) both read them.
 */
export interface GdnDims {
  readonly convDim: number;
  readonly keyDim: number;
  readonly valueDim: number;
  /** Conv kernel width (the window holds K − 1 cached columns). */
  readonly K: number;
  readonly Hk: number;
  readonly Hv: number;
  readonly dk: number;
  readonly dv: number;
  /** Value heads per q/k head. */
  readonly r: number;
  /** `layers.{layer}.linear_attn.` */
  readonly prefix: string;
}

export function gdnDims(w: GraphWeights, layer: number): GdnDims {
  const cfg = w.source.config;
  const Hk = cfg.linearNumKeyHeads;
  const Hv = cfg.linearNumValueHeads;
  return {
    convDim: cfg.convDim,
    keyDim: cfg.keyDim,
    valueDim: cfg.valueDim,
    K: cfg.linearConvKernelDim,
    Hk,
    Hv,
    dk: cfg.linearKeyHeadDim,
    dv: cfg.linearValueHeadDim,
    r: Hv / Hk,
    prefix: `layers.${layer}.linear_attn.`,
  };
}

/** The four input projections of x [1, D, 1, T]: qkv [1, convDim, 1, T], z [1, Hv·dv, 1, T], b and a [1, Hv, 1, T]. */
export async function gdnProjections(
  w: GraphWeights,
  d: GdnDims,
  x: MilVar,
): Promise<{ qkv: MilVar; z: MilVar; b: MilVar; a: MilVar }> {
  const proj = async (name: string, as: string) =>
    conv1x1(w.b, x, await w.conv1x1Weight(`${d.prefix}${name}.weight`), as);
  return {
    qkv: await proj("in_proj_qkv", "qkv"),
    z: await proj("in_proj_z", "z"),
    b: await proj("in_proj_b", "b"),
    a: await proj("in_proj_a", "a"),
  };
}

/** The depthwise conv's taps [C, 1, K] as [1, C, K]. */
export async function gdnConvTaps(w: GraphWeights, d: GdnDims): Promise<MilVar> {
  const name = `${d.prefix}conv1d.weight`;
  return w.tensorConstant(name, await w.float32(name), [1, d.convDim, d.K]);
}

/** −exp(A_log) (folded in fp32) and dt_bias, each [1, Hv, 1, 1]: g = −exp(A_log)·softplus(a + dt_bias). */
export async function gdnDecayConstants(
  w: GraphWeights,
  d: GdnDims,
): Promise<{ negA: MilVar; dtBias: MilVar }> {
  const p = d.prefix;
  const aLog = await w.float32(`${p}A_log`);
  const negA = w.constant(
    Float32Array.from(aLog, (v) => -Math.exp(v)),
    [1, d.Hv, 1, 1],
    "neg_exp_A",
  );
  return { negA, dtBias: w.tensorConstant(`${p}dt_bias`, await w.float32(`${p}dt_bias`), [1, d.Hv, 1, 1]) };
}

/**
 * The output: gated RMSNorm per value head, rmsnorm(o)·w·silu(z) — its eps ×1024² cancels the
 * 1024× scale of o exactly — then out_proj. o and `z()` (the gate, made after the norm) share one
 * per-head layout; `flat` takes the gated heads back to channels-first [1, Hv·dv, 1, T].
 */
export async function gdnGatedOutput(
  w: GraphWeights,
  d: GdnDims,
  o: MilVar,
  z: () => MilVar,
  flat: (gated: MilVar) => MilVar,
): Promise<MilVar> {
  const b = w.b;
  const name = `${d.prefix}norm.weight`;
  const gNorm = w.tensorConstant(name, await w.float32(name), [d.dv]); // plain weight, no 1 +
  const eps = w.source.config.rmsNormEps * GDN_NORM_EPS_SCALE;
  const normed = rmsNormAne(b, o, { axis: 3, eps, gamma: gNorm, name: "norm" });
  const gated = b.mul({ x: normed, y: siluTanh(b, z(), "z_act"), name: "gated" });
  return conv1x1(b, flat(gated), await w.conv1x1Weight(`${d.prefix}out_proj.weight`), "out"); // [1, D, 1, T]
}

/** x [1, D, 1, 1] (already input-normed) → the mixer output and the next states. */
export async function gdnLayer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  state: GdnStateIn,
): Promise<GdnStep> {
  const b = w.b;
  const d = gdnDims(w, layer);
  const { convDim, keyDim, valueDim, K, Hk, Hv, dk, dv } = d;

  const { qkv, z, b: betaLogit, a } = await gdnProjections(w, d, x);
  const beta = b.sigmoid({ x: betaLogit, name: "beta" }); // [1, Hv, 1, 1]

  // causal depthwise conv over the window [K-1 cached columns | this token], then SiLU
  const column = b.reshape({ x: qkv, shape: [1, convDim, 1], name: "col" });
  const window = b.concat({ values: [state.conv, column], axis: 2, name: "window" }); // [1, convDim, K]
  const convNext = b.sliceByIndex({
    x: window,
    begin: [0, 0, 1],
    end: [1, convDim, K],
    name: "conv_next",
  }); // [1, convDim, K-1]
  const taps = b.mul({ x: window, y: await gdnConvTaps(w, d), name: "taps" });
  const mixed = siluTanh(b, b.reduceSum({ x: taps, axes: [2], keepDims: true, name: "conv" }), "conv_act"); // [1, convDim, 1]
  const [qRaw, kRaw, vRaw] = b.split({
    x: mixed,
    axis: 1,
    splitSizes: [keyDim, keyDim, valueDim],
    name: "split",
  });

  // q, k: per-head L2 norm (q also ×1/√dk and the fp16 scale), then value head j takes q/k head floor(j / r)
  const qHeads = b.reshape({ x: qRaw, shape: [1, Hk, 1, dk], name: "q_heads" });
  const kHeads = b.reshape({ x: kRaw, shape: [1, Hk, 1, dk], name: "k_heads" });
  const q = repeatInterleaveHeads(b, l2norm(w, qHeads, GDN_Q_SCALE / Math.sqrt(dk), "q_norm"), d.r, "q"); // [1, Hv, dk, 1]
  const k = repeatInterleaveHeads(b, l2norm(w, kHeads, 1, "k_norm"), d.r, "k"); // [1, Hv, dk, 1]
  const vHeads = b.reshape({ x: vRaw, shape: [1, Hv, 1, dv], name: "v_heads" });
  const v = b.mul({ x: vHeads, y: scalar(GDN_V_SCALE, vHeads), name: "v" }); // [1, Hv, 1, dv]

  // decay: g = −exp(A_log)·softplus(a + dt_bias) ≤ 0
  const { negA, dtBias } = await gdnDecayConstants(w, d);
  const sp = softplusStable(b, b.add({ x: a, y: dtBias, name: "a_dt" }), "softplus");
  const decay = b.exp({ x: b.mul({ x: negA, y: sp, name: "g" }), name: "decay" }); // [1, Hv, 1, 1]

  // delta rule on S [1, Hv, dk, dv]:  S ← S·decay;  kv = Σ_d S[d,:]·k[d];  S ← S + k ⊗ (v − kv)·β;  o = Σ_d S[d,:]·q[d]
  const sDecayed = b.mul({ x: state.rec, y: decay, name: "S_decay" });
  const kv = b.reduceSum({
    x: b.mul({ x: sDecayed, y: k, name: "Sk" }),
    axes: [2],
    keepDims: true,
    name: "kv",
  }); // [1, Hv, 1, dv]
  const delta = b.mul({ x: b.sub({ x: v, y: kv, name: "v_kv" }), y: beta, name: "delta" }); // [1, Hv, 1, dv]
  const recNext = b.add({ x: sDecayed, y: b.mul({ x: k, y: delta, name: "k_delta" }), name: "S" }); // [1, Hv, dk, dv]
  const o = b.reduceSum({
    x: b.mul({ x: recNext, y: q, name: "Sq" }),
    axes: [2],
    keepDims: true,
    name: "o",
  }); // [1, Hv, 1, dv], ×1024

  const out = await gdnGatedOutput(
    w,
    d,
    o,
    () => b.reshape({ x: z, shape: [1, Hv, 1, dv], name: "z_heads" }),
    (gated) => b.reshape({ x: gated, shape: [1, valueDim, 1, 1], name: "flat" }),
  ); // [1, D, 1, 1]
  return { out, conv: convNext, rec: recNext };
}
