/**
 * The ANE tricks, each a named helper with the reason it exists. Everything else in the graph
 * builders is the model's own math. Sources: shared/reference/ane-toolchains.md §1.7, §1.8, §6
 * (ANEMLL, apple/ml-ane-transformers, Anemll/anemll-forge ANE_DELTANET_NUMERICS.md).
 */
import { f32ToF16Bits } from "@anemll-qwen35/core";
import type { MilBuilder, MilDType, MilVar } from "@anemll-qwen35/ir/mil";

/**
 * q and v scales of the Gated DeltaNet step in every dtype: on the ANE ~61 % of the q·S products
 * are fp16 subnormals, which it flushes to zero; q×16 and v×64 lift them into the normal range
 * (anemll-forge measured the DeltaNet core error falling from 51 % to 1.3 %).
 */
export const GDN_Q_SCALE = 16;
export const GDN_V_SCALE = 64;
/** The step's output o is GDN_Q_SCALE·GDN_V_SCALE = 1024 times too large ... */
export const GDN_O_SCALE = GDN_Q_SCALE * GDN_V_SCALE;
/** ... which the gated RMSNorm absorbs exactly when its epsilon grows by the square of that scale. */
export const GDN_NORM_EPS_SCALE = GDN_O_SCALE * GDN_O_SCALE;

/**
 * Additive attention-mask value for keys a query must not see (defined with the chain contract in
 * ir): fp16's lowest finite value, −65504. It is ~65 000 below any real score (scores are q·k/16
 * of RMS-normalised heads), so exp() of it is exactly 0 after the max subtraction in fp16 and fp32
 * alike — and, being finite, it can never become inf − inf = NaN in a softmax that is decomposed or
 * fused differently on the device.
 */
export { MASK_NEG } from "@anemll-qwen35/ir/chain";

/**
 * The ANE's largest tensor dimension: ANEMLL splits its lm_head because of it ("ANE tensors
 * dimension size is limited to 16384", llama_model.py; ane-toolchains.md §1.6, §1.10). The
 * converter keeps every conv/matmul within it (lm_head pieces, MLP pieces) and checks (limits.ts).
 */
export const ANE_MAX_DIM = 16384;

/** A scalar or small literal typed like `like` (fp16 graphs keep every constant fp16). */
export function scalar(value: number, like: MilVar): { data: number[]; dtype: MilDType; shape: number[] } {
  return { data: [value], dtype: like.dtype, shape: [] };
}

/** fp16's smallest normal number, 2⁻¹⁴ ≈ 6.1e-5: the ANE flushes anything smaller to 0. */
export const F16_MIN_NORMAL = 2 ** -14;

/**
 * A norm's epsilon typed like `like`, floored at F16_MIN_NORMAL in fp16: a subnormal eps is 0 on
 * the ANE, and a zero row then normalises to 0·rsqrt(0) = NaN. fp32 graphs keep the model's value.
 */
export function epsilon(eps: number, like: MilVar): ReturnType<typeof scalar> {
  return scalar(like.dtype === "fp16" ? Math.max(eps, F16_MIN_NORMAL) : eps, like);
}

const isF16Subnormal = (bits: number) => (bits & 0x7c00) === 0 && (bits & 0x03ff) !== 0;

/**
 * fp16 weights as the ANE reads them: subnormals (|w| < 2⁻¹⁴) are 0 there, so the package stores
 * ±0 and holds no fp16 subnormal (the same array when it has none).
 */
export function flushF16Bits(bits: Uint16Array): Uint16Array {
  let out: Uint16Array | undefined;
  for (let i = 0; i < bits.length; i++) {
    if (!isF16Subnormal(bits[i])) continue;
    out ??= bits.slice();
    out[i] = bits[i] & 0x8000;
  }
  return out ?? bits;
}

/** Float values for an fp16 constant, those that round to an fp16 subnormal made ±0 (see flushF16Bits). */
export function flushF16Values(values: Float32Array): Float32Array {
  let out: Float32Array | undefined;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === 0 || Math.abs(v) >= F16_MIN_NORMAL || !isF16Subnormal(f32ToF16Bits(v))) continue;
    out ??= values.slice();
    out[i] = v < 0 ? -0 : 0;
  }
  return out ?? values;
}

/**
 * A projection as a 1×1 conv over channels-first activations [1, Cin, 1, 1] with weight
 * [Cout, Cin, 1, 1]: the ANE's native layout for matrix-vector products (ANEMLL,
 * ml-ane-transformers); linear/matmul would route through transposes or the CPU.
 */
export function conv1x1(b: MilBuilder, x: MilVar, weight: MilVar, name: string): MilVar {
  return b.conv({ x, weight, name });
}

/**
 * RMSNorm along `axis` as layer_norm over concat([x, −x]): that tensor has mean exactly 0, so
 * layer_norm's (x − mean)/√(var + eps) is x/√(mean(x²) + eps) — and the ANE has a native
 * layer_norm but no RMSNorm. Keeps the first half, then scales by `gamma` (when given).
 * An fp16 eps below 2⁻¹⁴ (Qwen3.5's 1e-6) would be flushed to 0 on the ANE, and a zero row would
 * then be NaN; flooring it at 2⁻¹⁴ instead costs accuracy wherever mean(x²) is small (embeddings
 * of std 0.02: ~15 % of it). So both halves are scaled by a power of two s with s²·eps ≥ 2⁻¹⁴ and
 * layer_norm gets s²·eps — the same function exactly (RMSNorm(s·x) with s²·eps is RMSNorm(x) with
 * eps), |x| up to 65504/s (8 188 for 1e-6).
 */
export function rmsNormAne(
  b: MilBuilder,
  x: MilVar,
  opts: { axis: number; eps: number; gamma?: MilVar; name: string },
): MilVar {
  const { axis, eps, gamma, name } = opts;
  const rank = x.shape.length;
  const ax = axis < 0 ? axis + rank : axis;
  const s = x.dtype === "fp16" ? normalEpsScale(eps) : 1;
  const pos = s === 1 ? x : b.mul({ x, y: scalar(s, x), name: `${name}_scaled` });
  const neg = b.mul({ x, y: scalar(-s, x), name: `${name}_neg` });
  const both = b.concat({ values: [pos, neg], axis: ax, name: `${name}_cat` }); // C → 2C along axis
  const normed = b.layerNorm({ x: both, axes: [ax], epsilon: epsilon(eps * s * s, x), name: `${name}_ln` });
  const end = [...x.shape];
  const half = b.sliceByIndex({
    x: normed,
    begin: new Array<number>(rank).fill(0),
    end,
    name: `${name}_half`,
  });
  return gamma ? b.mul({ x: half, y: gamma, name }) : half;
}

/** The least power of two s with s²·eps a normal fp16 number (1 when eps is one, or 0). */
function normalEpsScale(eps: number): number {
  let s = 1;
  while (eps > 0 && eps * s * s < F16_MIN_NORMAL) s *= 2;
  return s;
}

/**
 * SiLU as 0.5·x·(1 + tanh(x/2)) (= x·sigmoid(x)): the ANE's own silu has ~1e-3 absolute error
 * near 0, and x·sigmoid(x) is re-fused into that silu by the compiler (anemll-forge).
 */
export function siluTanh(b: MilBuilder, x: MilVar, name: string): MilVar {
  const half = b.mul({ x, y: scalar(0.5, x), name: `${name}_half` });
  const t = b.tanh({ x: half, name: `${name}_tanh` });
  const onePlus = b.add({ x: t, y: scalar(1, x), name: `${name}_1p` });
  return b.mul({ x: half, y: onePlus, name });
}

/**
 * softplus as relu(x) + log(1 + exp(−|x|)): exp only ever sees x ≤ 0, so it cannot overflow
 * (the native fp16 softplus does, anemll-forge).
 */
export function softplusStable(b: MilBuilder, x: MilVar, name: string): MilVar {
  const negAbs = b.mul({ x: b.abs({ x, name: `${name}_abs` }), y: scalar(-1, x), name: `${name}_negabs` });
  const e = b.exp({ x: negAbs, name: `${name}_exp` });
  const log1p = b.log({ x: b.add({ x: e, y: scalar(1, x), name: `${name}_1p` }), name: `${name}_log` });
  return b.add({ x: b.relu({ x, name: `${name}_relu` }), y: log1p, name });
}

/**
 * Repeat-interleave of heads, [1, H, 1, d] → [1, H·r, d, 1] where output head j is input head
 * floor(j / r), built from r copies concatenated on axis 2 and a reshape: concat and reshape
 * are plain copies on the ANE, while tile with per-head repeats is not guaranteed to lower there.
 */
export function repeatInterleaveHeads(b: MilBuilder, x: MilVar, r: number, name: string): MilVar {
  const [, h, , d] = x.shape;
  const copies =
    r === 1 ? x : b.concat({ values: new Array<MilVar>(r).fill(x), axis: 2, name: `${name}_rep` }); // [1, H, r, d]
  return b.reshape({ x: copies, shape: [1, h * r, d, 1], name }); // head-major: head i·r + t = input head i
}
