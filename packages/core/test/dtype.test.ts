import { describe, expect, it } from "vitest";
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  fromFloat32,
  storageFromBytes,
  toFloat32,
} from "../src/dtype.js";
import { castTensor, tensor } from "../src/tensor.js";

describe("fp16 conversion", () => {
  it("encodes normal, boundary and special values exactly", () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // rounds up to inf
    expect(f32ToF16Bits(65519)).toBe(0x7bff);
    expect(f32ToF16Bits(Number.POSITIVE_INFINITY)).toBe(0x7c00);
    expect(f32ToF16Bits(Number.NEGATIVE_INFINITY)).toBe(0xfc00);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
  });

  it("rounds to nearest even", () => {
    // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even (1).
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00);
    // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToF16Bits(1 + 2 ** -11 + 2 ** -20)).toBe(0x3c01);
  });

  it("handles subnormals", () => {
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie -> even (zero)
    expect(f32ToF16Bits(1.5 * 2 ** -25)).toBe(0x0001);
    expect(f32ToF16Bits(3 * 2 ** -25)).toBe(0x0002); // 1.5 ulp ties to even 2
    expect(f32ToF16Bits(2 ** -14)).toBe(0x0400); // smallest normal
    expect(f32ToF16Bits(2 ** -14 - 2 ** -25)).toBe(0x0400); // rounds up into the normals
    expect(f16BitsToF32(0x03ff)).toBe(1023 * 2 ** -24);
  });

  it("round-trips every fp16 bit pattern", () => {
    for (let h = 0; h < 65536; h++) {
      const x = f16BitsToF32(h);
      if (Number.isNaN(x)) continue;
      expect(f32ToF16Bits(x)).toBe(h);
    }
  });
});

describe("bf16 conversion", () => {
  it("rounds to nearest even and keeps specials", () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(bf16BitsToF32(0x3f80)).toBe(1);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16Bits(Number.POSITIVE_INFINITY)).toBe(0x7f80);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
    expect(f32ToBf16Bits(3.4e38)).toBe(0x7f80); // overflow by rounding
  });
});

describe("bulk conversion and tensors", () => {
  it("converts through fp32 and back", () => {
    const src = new Float32Array([0, 1.5, -3.25, 65504, 1e-8]);
    expect(Array.from(toFloat32("f16", fromFloat32("f16", src)))).toEqual([0, 1.5, -3.25, 65504, 0]);
    expect(Array.from(toFloat32("bf16", fromFloat32("bf16", src))).slice(0, 3)).toEqual([0, 1.5, -3.25]);
    expect(Array.from(fromFloat32("i32", new Float32Array([1.9, -1.9])))).toEqual([1, -1]);
  });

  it("views unaligned bytes by copying", () => {
    const bytes = new Uint8Array(9);
    new DataView(bytes.buffer).setFloat32(1, 2.5, true);
    new DataView(bytes.buffer).setFloat32(5, -1, true);
    expect(Array.from(storageFromBytes("f32", bytes.subarray(1)))).toEqual([2.5, -1]);
    expect(() => storageFromBytes("f32", bytes.subarray(0, 3))).toThrow(/not a whole number/);
  });

  it("checks element counts and casts", () => {
    expect(() => tensor("f32", [2, 2], new Float32Array(3))).toThrow(/needs 4 elements/);
    const t = tensor("f32", [2], new Float32Array([1, 2]));
    expect(castTensor(t, "bf16").data).toEqual(new Uint16Array([0x3f80, 0x4000]));
  });
});
