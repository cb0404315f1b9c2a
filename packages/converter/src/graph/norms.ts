/** The model's RMSNorms as graph constants: zero-centred gains folded to 1 + w in fp32. */
import { AnemllError } from "@anemll-qwen35/core";
import type { MilVar } from "@anemll-qwen35/ir/mil";
import { rmsNormAne } from "./ane.js";
import type { GraphWeights } from "./weights.js";

/**
 * The gain of a zero-centred RMSNorm (input/post-attention layernorms, the final norm, q_norm,
 * k_norm): the checkpoint stores w ≈ 0 and the model multiplies by 1 + w, folded here in fp32.
 */
export async function zeroCentredGain(
  w: GraphWeights,
  canonical: string,
  shape: readonly number[],
): Promise<MilVar> {
  if (!w.param(canonical).zeroCentred) {
    throw new AnemllError(
      "E_NOT_ZERO_CENTRED",
      `"${canonical}" is a plain gain, not a zero-centred (1 + w) norm`,
    );
  }
  const raw = await w.float32(canonical);
  const gain = Float32Array.from(raw, (v) => Math.fround(1 + v));
  return w.tensorConstant(canonical, gain, shape, "_1p");
}

/** RMSNorm1p over the channels of x [1, D, 1, 1] with the gain of `canonical`. */
export async function rmsNorm1p(
  w: GraphWeights,
  canonical: string,
  x: MilVar,
  name: string,
): Promise<MilVar> {
  const D = x.shape[1];
  const gamma = await zeroCentredGain(w, canonical, [1, D, 1, 1]);
  return rmsNormAne(w.b, x, { axis: 1, eps: w.source.config.rmsNormEps, gamma, name });
}
