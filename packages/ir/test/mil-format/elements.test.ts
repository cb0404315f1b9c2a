import { InvalidArgumentError } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  allocData,
  byteSizeOf,
  checkConstData,
  elementsFromBytes,
  elementsToBytes,
  packSubByte,
  paddingBitsOf,
  unpackSubByte,
} from "../../src/mil/format/elements.js";
import { type MilDType, tensorType } from "../../src/mil/program.js";
import { rng } from "./programs.js";

describe("sub-byte packing (LSB-first)", () => {
  it("packs uint4 5,3,6,4 as 0x35 0x46 (reference §3.3)", () => {
    expect([...packSubByte("uint4", Uint8Array.of(5, 3, 6, 4))]).toEqual([0x35, 0x46]);
  });

  it("packs the 2-bit docstring example into 2 bytes with i4 alone in byte 1", () => {
    // i0=00 i1=11 i2=10 i3=01 | i4=11 -> byte0 = 01 10 11 00, byte1 = ......11
    const packed = packSubByte("uint2", Uint8Array.of(0, 3, 2, 1, 3));
    expect([...packed]).toEqual([0b01101100, 0b00000011]);
    expect(paddingBitsOf("uint2", 5)).toBe(6);
    expect(byteSizeOf("uint2", 5)).toBe(2);
  });

  it("stores int4 as two's complement low bits and sign-extends on unpack", () => {
    const values = Int8Array.of(-8, 7, -1, 0, 3);
    const packed = packSubByte("int4", values);
    expect([...packed]).toEqual([0x78, 0x0f, 0x03]);
    expect([...unpackSubByte("int4", packed, 5)]).toEqual([...values]);
  });

  it("splits elements across byte boundaries for uint3 and uint6", () => {
    // uint3: 0b101, 0b011, 0b110 -> stream bits 101 | 011<<3 | 110<<6 = 0b1_1001_1101 -> 0x9d, 0x01
    expect([...packSubByte("uint3", Uint8Array.of(5, 3, 6))]).toEqual([0x9d, 0x01]);
    // uint6: 63, 1 -> 0b111111 | 1<<6 -> byte0 = 0b01111111, byte1 = 0
    expect([...packSubByte("uint6", Uint8Array.of(63, 1))]).toEqual([0x7f, 0x00]);
    expect(paddingBitsOf("uint6", 2)).toBe(4);
  });

  for (const [dtype, bits] of [
    ["uint1", 1],
    ["uint2", 2],
    ["uint3", 3],
    ["uint4", 4],
    ["uint6", 6],
    ["int4", 4],
  ] as [MilDType, number][]) {
    it(`round-trips random ${dtype} data of every length 0..40`, () => {
      const r = rng(bits * 7 + dtype.length);
      for (let n = 0; n <= 40; n++) {
        const signed = dtype === "int4";
        const values = signed ? new Int8Array(n) : new Uint8Array(n);
        for (let i = 0; i < n; i++) values[i] = Math.floor(r() * (1 << bits)) - (signed ? 8 : 0);
        const packed = packSubByte(dtype, values);
        expect(packed.length).toBe(Math.ceil((n * bits) / 8));
        expect([...unpackSubByte(dtype, packed, n)]).toEqual([...values]);
      }
    });
  }

  it("packs 4-bit typed arrays (the fast path) exactly as plain arrays", () => {
    const r = rng(44);
    for (const n of [0, 1, 2, 7, 1000, 1001]) {
      const u = Uint8Array.from({ length: n }, () => Math.floor(r() * 16));
      expect([...packSubByte("uint4", u)]).toEqual([...packSubByte("uint4", [...u])]);
      const s = Int8Array.from(u, (v) => v - 8);
      expect([...packSubByte("int4", s)]).toEqual([...packSubByte("int4", [...s])]);
    }
  });

  it("refuses values outside the type's range", () => {
    expect(() => packSubByte("uint4", Uint8Array.of(1, 16))).toThrow(/element 1 is 16/);
    expect(() => packSubByte("int4", Int8Array.of(8))).toThrow(InvalidArgumentError);
    expect(() => packSubByte("uint1", Uint8Array.of(2))).toThrow(InvalidArgumentError);
  });
});

describe("element byte form", () => {
  it("is little-endian raw bytes for whole-byte types, without copying", () => {
    const data = Uint16Array.of(0x3c00, 0xabcd);
    const bytes = elementsToBytes("fp16", data);
    expect([...bytes]).toEqual([0x00, 0x3c, 0xcd, 0xab]);
    expect(bytes.buffer).toBe(data.buffer);
  });

  it("round-trips every fixed-size dtype through bytes", () => {
    const cases: [MilDType, ArrayLike<number> | bigint[]][] = [
      ["fp32", [1.5, -2.25, 3e-8]],
      ["fp64", [Math.PI, -1e300]],
      ["fp16", [0x3c00, 0x8001]],
      ["bf16", [0x3f80, 0xffff]],
      ["int8", [-128, 127]],
      ["uint8", [0, 255]],
      ["int16", [-32768, 32767]],
      ["uint16", [0, 65535]],
      ["int32", [-(2 ** 31), 2 ** 31 - 1]],
      ["uint32", [0, 2 ** 32 - 1]],
      ["int64", [-(2n ** 63n), 2n ** 63n - 1n]],
    ];
    for (const [dtype, values] of cases) {
      const data = allocData(dtype, values.length) as unknown as {
        [i: number]: number | bigint;
        length: number;
      };
      for (let i = 0; i < values.length; i++) data[i] = (values as ArrayLike<number | bigint>)[i];
      const bytes = elementsToBytes(dtype, data as never).slice();
      const back = elementsFromBytes(dtype, bytes, values.length);
      expect(back.constructor).toBe(data.constructor);
      expect(Array.from(back as ArrayLike<number>)).toEqual(Array.from(data as unknown as ArrayLike<number>));
    }
  });

  it("rejects a byte count that does not match the element count", () => {
    expect(() => elementsFromBytes("fp16", new Uint8Array(3), 2)).toThrow(/need 4 bytes, got 3/);
    expect(() => elementsFromBytes("uint4", new Uint8Array(1), 3)).toThrow(InvalidArgumentError);
  });

  it("checks that constant data has the dtype's storage class and element count", () => {
    const t = tensorType("fp16", [2, 3]);
    expect(() => checkConstData(t, new Uint16Array(6), "w")).not.toThrow();
    expect(() => checkConstData(t, new Float32Array(6), "w")).toThrow(
      /w: fp16 data must be a Uint16Array, got Float32Array/,
    );
    expect(() => checkConstData(t, new Uint16Array(5), "w")).toThrow(/needs 6 elements, got 5/);
    expect(() => checkConstData(tensorType("string", []), ["a"], "s")).not.toThrow();
    expect(() => checkConstData(tensorType("int4", [1]), new Uint8Array(1), "q")).toThrow(/Int8Array/);
  });
});
