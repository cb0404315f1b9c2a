/**
 * Linear int8 weight quantization for iOS18 `constexpr_blockwise_shift_scale`:
 * out[i, j] = scale[i, j / block] · data[i, j] (symmetric, no offset). One scale per output
 * channel and block of `blockSize` input values (blockSize = Din gives per-channel scales).
 */
import { f16BitsToF32, f32ToF16Bits, InvalidArgumentError } from "@anemll-qwen35/core";

export interface Int8Quantized {
  readonly shape: readonly number[];
  readonly data: Int8Array;
  /** fp16 bit patterns, shape [Dout, Din / blockSize, 1, …]. */
  readonly scale: Uint16Array;
  readonly scaleShape: readonly number[];
  readonly blockSize: number;
}

export function quantizeInt8(
  weight: Float32Array,
  shape: readonly number[],
  blockSize?: number,
): Int8Quantized {
  const dout = shape[0];
  const din = shape[1];
  if (shape.length < 2 || dout * din * shape.slice(2).reduce((a, b) => a * b, 1) !== weight.length) {
    throw new InvalidArgumentError(
      `weight of ${weight.length} values does not match shape [${shape.join(", ")}]`,
    );
  }
  if (shape.slice(2).some((d) => d !== 1)) {
    throw new InvalidArgumentError(
      `int8 quantization expects [Dout, Din] or [Dout, Din, 1, 1], got [${shape.join(", ")}]`,
    );
  }
  const block = blockSize ?? din;
  if (block <= 0 || din % block !== 0)
    throw new InvalidArgumentError(`block size ${block} must divide Din = ${din}`);
  const blocks = din / block;
  const data = new Int8Array(weight.length);
  const scale = new Uint16Array(dout * blocks);
  for (let r = 0; r < dout; r++) {
    for (let b = 0; b < blocks; b++) {
      const start = r * din + b * block;
      let maxAbs = 0;
      for (let j = 0; j < block; j++) maxAbs = Math.max(maxAbs, Math.abs(weight[start + j]));
      const h = f32ToF16Bits(maxAbs / 127 || 1);
      scale[r * blocks + b] = h;
      const s = f16BitsToF32(h); // quantize against the scale that will actually be stored
      for (let j = 0; j < block; j++) {
        data[start + j] = Math.max(-127, Math.min(127, Math.round(weight[start + j] / s)));
      }
    }
  }
  return { shape: [...shape], data, scale, scaleShape: [dout, blocks, ...shape.slice(2)], blockSize: block };
}

export function dequantizeInt8(q: Int8Quantized): Float32Array {
  const out = new Float32Array(q.data.length);
  const din = q.shape[1];
  const blocks = din / q.blockSize;
  for (let i = 0; i < out.length; i++) {
    const r = Math.floor(i / din);
    const b = Math.floor((i % din) / q.blockSize);
    out[i] = f16BitsToF32(q.scale[r * blocks + b]) * q.data[i];
  }
  return out;
}
