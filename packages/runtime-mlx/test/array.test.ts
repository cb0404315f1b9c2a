/** MxArray creation, read-back, dtypes, dispose semantics and error mapping. */
import { expect, it } from "vitest";
import { MlxDisposedError, MlxError, type MxArray, mlxAvailable, mx } from "../src/index.js";
import { native } from "../src/native.js";
import { describeMlx } from "./helpers.js";

describeMlx("MxArray", () => {
  it("reports the loaded MLX version, equal to the headers it was built against", () => {
    const info = mlxAvailable();
    expect(info.available).toBe(true);
    expect(info.version).toMatch(/^0\.32\.\d+/);
    expect(native().headerVersion).toBe(info.version);
    expect(mx.mlxVersion()).toBe(info.version);
  });

  it("round-trips every dtype through its typed array", () => {
    const cases: [ArrayLike<number | bigint>, mx.Dtype, new (n: number) => ArrayLike<unknown>][] = [
      [Float32Array.from([1.5, -2.25, 3e-8]), "float32", Float32Array],
      [Int8Array.from([-128, 0, 127]), "int8", Int8Array],
      [Uint8Array.from([0, 200, 255]), "uint8", Uint8Array],
      [Int16Array.from([-32768, 5, 32767]), "int16", Int16Array],
      [Uint16Array.from([0, 40000, 65535]), "uint16", Uint16Array],
      [Int32Array.from([-(2 ** 31), 7, 2 ** 31 - 1]), "int32", Int32Array],
      [Uint32Array.from([0, 3e9, 2 ** 32 - 1]), "uint32", Uint32Array],
      [BigInt64Array.from([-(2n ** 62n), 0n, 2n ** 62n + 1n]), "int64", BigInt64Array],
      [BigUint64Array.from([0n, 2n ** 63n + 5n, 1n]), "uint64", BigUint64Array],
    ];
    for (const [data, dtype, Ctor] of cases) {
      using a = mx.array(data as mx.ArrayData, [3]);
      expect(a.dtype).toBe(dtype);
      expect(a.shape).toEqual([3]);
      expect(a.size).toBe(3);
      expect(a.ndim).toBe(1);
      const back = a.toTypedArray();
      expect(back).toBeInstanceOf(Ctor);
      expect(Array.from(back as ArrayLike<unknown>)).toEqual(Array.from(data as ArrayLike<unknown>));
    }
  });

  it("takes bf16/fp16 as Uint16Array bit patterns and gives them back unchanged", () => {
    const bits = Uint16Array.from([0x3f80, 0xc040, 0x0001, 0x7f80]); // 1, -3, tiny subnormal, +inf (bf16)
    using bf = mx.array(bits, [2, 2], "bfloat16");
    expect(bf.dtype).toBe("bfloat16");
    expect(bf.nbytes).toBe(8);
    expect(Array.from(bf.toTypedArray() as Uint16Array)).toEqual(Array.from(bits));
    expect(Array.from(mx.toFloat32Array(bf))).toEqual([1, -3, 2 ** -133, Number.POSITIVE_INFINITY]);
    using h = mx.array(Uint16Array.from([0x3c00, 0x3555]), null, "f16");
    expect(h.dtype).toBe("float16");
    expect(mx.toFloat32Array(h)[1]).toBeCloseTo(1 / 3, 3);
  });

  it("builds from numbers, booleans and nested arrays; converts on request", () => {
    using s = mx.array(2.5);
    expect(s.shape).toEqual([]);
    expect(s.item()).toBe(2.5);
    using n = mx.array([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(n.shape).toEqual([2, 3]);
    expect(n.dtype).toBe("float32");
    using b = mx.array([true, false, true]);
    expect(b.dtype).toBe("bool");
    expect(Array.from(b.toTypedArray() as Uint8Array)).toEqual([1, 0, 1]);
    using i = mx.array([1, 2, 3], null, "int32");
    expect(i.toTypedArray()).toEqual(Int32Array.from([1, 2, 3]));
    using l = mx.array([1, 2 ** 40], null, "int64");
    expect(Array.from(l.toTypedArray() as BigInt64Array)).toEqual([1n, 2n ** 40n]);
    using c = mx.array(Float32Array.from([1, 2, 3, 4]), [2, 2], "bf16");
    expect(c.dtype).toBe("bfloat16");
    expect(Array.from(c.toTypedArray() as Uint16Array)).toEqual([0x3f80, 0x4000, 0x4040, 0x4080]);
    using d = mx.array(Float64Array.from([0.1, 0.2]));
    expect(d.dtype).toBe("float32");
    expect(() => mx.array([[1, 2], [3]])).toThrow(/ragged/);
  });

  it("full, zeros, ones, arange", () => {
    using z = mx.zeros([2, 2], "int32");
    expect(z.toTypedArray()).toEqual(new Int32Array(4));
    using o = mx.ones([3]);
    expect(o.toTypedArray()).toEqual(Float32Array.from([1, 1, 1]));
    using f = mx.full([2], -7.5, "bfloat16");
    expect(Array.from(mx.toFloat32Array(f))).toEqual([-7.5, -7.5]);
    using r = mx.arange(5, undefined, 1, "int32");
    expect(r.toTypedArray()).toEqual(Int32Array.from([0, 1, 2, 3, 4]));
    using r2 = mx.arange(1, 2, 0.25);
    expect(Array.from(r2.toTypedArray() as Float32Array)).toEqual([1, 1.25, 1.5, 1.75]);
  });

  it("reads back strided views as row-major data", () => {
    using a = mx.array(Float32Array.from([0, 1, 2, 3, 4, 5]), [2, 3]);
    using t = mx.transpose(a);
    expect(Array.from(t.toTypedArray() as Float32Array)).toEqual([0, 3, 1, 4, 2, 5]);
    using bcast = mx.broadcastTo(mx.array([1, 2]), [3, 2]);
    expect(Array.from(bcast.toTypedArray() as Float32Array)).toEqual([1, 2, 1, 2, 1, 2]);
  });

  it("item() on a multi-element array is an MlxError", () => {
    using a = mx.array([1, 2]);
    expect(() => a.item()).toThrow(MlxError);
    expect(() => a.item()).toThrow(/2 elements/);
  });

  it("double dispose is a no-op; use after dispose throws MlxDisposedError naming the op", () => {
    const a = mx.array([1, 2, 3]);
    expect(a.disposed).toBe(false);
    a.dispose();
    a.dispose();
    expect(a.disposed).toBe(true);
    expect(() => a.shape).toThrow(MlxDisposedError);
    expect(() => a.toTypedArray()).toThrow(/already disposed/);
    let caught: unknown;
    try {
      mx.add(a, 1);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(MlxDisposedError);
    expect(caught).toBeInstanceOf(MlxError);
    expect((caught as MlxDisposedError).code).toBe("E_MLX_DISPOSED");
    expect((caught as Error).message).toMatch(/^add: argument 'a' is an MxArray that was already disposed/);
    expect(String(a)).toBeDefined();
  });

  it("`using` disposes at the end of the block", () => {
    let outer: MxArray | undefined;
    {
      using a = mx.array([1]);
      outer = a;
      expect(outer.disposed).toBe(false);
    }
    expect(outer.disposed).toBe(true);
  });

  it("MLX exceptions become MlxError with MLX's message; wrong JS arguments become TypeError", () => {
    using a = mx.zeros([2, 3]);
    using b = mx.zeros([4, 5]);
    let caught: unknown;
    try {
      mx.add(a, b);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(MlxError);
    expect((caught as MlxError).code).toBe("E_MLX");
    expect((caught as Error).message).toBe("[broadcast_shapes] Shapes (2,3) and (4,5) cannot be broadcast.");
    expect(() => mx.matmul(a, b)).toThrow(MlxError);
    expect(() => mx.reshape(a, [7])).toThrow(/\[reshape\]/);
    expect(() => mx.add(a, "x" as unknown as number)).toThrow(TypeError);
    expect(() => mx.add(a, "x" as unknown as number)).toThrow(
      /add: argument 2 \(b\) must be an MxArray or a number/,
    );
    expect(() => mx.astype(a, "float8" as mx.Dtype)).toThrow(/unknown dtype 'float8'/);
    expect(() => mx.reshape(a, [1.5])).toThrow(TypeError);
    expect(() => mx.array(new Float32Array(3), [2, 2])).toThrow(
      /12 bytes but shape and dtype float32 need 16/,
    );
  });

  it("MxArray cannot be constructed from JS", () => {
    const Ctor = native().MxArray as unknown as new () => MxArray;
    expect(() => new Ctor()).toThrow(/cannot be constructed directly/);
  });

  it("isMxArray tells arrays from look-alikes", () => {
    using a = mx.array([1]);
    expect(mx.isMxArray(a)).toBe(true);
    expect(mx.isMxArray({ shape: [1], dtype: "float32" })).toBe(false);
    expect(mx.isMxArray(null)).toBe(false);
  });
});
