import { f16BitsToF32, f32ToF16Bits, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  type ConstValue,
  interpret,
  MilBuilder,
  MilInterpreter,
  MilNonFiniteError,
  type Program,
  tensorType,
} from "../../src/mil/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);
const f32t = (shape: number[], values: number[]) => tensor("f32", shape, Float32Array.from(values));

/** A one-step KV cache: write `kv` at runtime position `pos`, return the cache sum per row. */
function kvProgram(): Program {
  const b = new MilBuilder();
  const kv = b.input("kv", f16([1, 1, 2]));
  const begin = b.input("begin", tensorType("int32", [3]));
  const end = b.input("end", tensorType("int32", [3]));
  const cache = b.state("cache", f16([1, 4, 2]));
  const now = b.coremlUpdateState(
    cache,
    b.sliceUpdate({ x: b.readState({ input: cache }), update: kv, begin, end }),
  );
  b.output("total", b.reduceSum({ x: now, axes: [1] }));
  return b.program();
}

/** y = (x·x)/x + 1 on x = [300, 2]: 300² overflows fp16 (ops named square_it, divide, plus_one). */
function squareProgram() {
  const b = new MilBuilder();
  const x = b.input("x", f16([2]));
  const sq = b.mul({ x, y: x, name: "square_it" });
  const back = b.realDiv({ x: sq, y: x, name: "divide" });
  b.output("y", b.add({ x: back, y: 1, name: "plus_one" }));
  return { p: b.program(), input: { x: f32t([2], [300, 2]) } };
}

describe("MilInterpreter", () => {
  it("keeps states across runs and writes at runtime positions", () => {
    const it = new MilInterpreter(kvProgram());
    const state = it.newState();
    const step = (pos: number, a: number, c: number) =>
      it.run(
        {
          kv: f32t([1, 1, 2], [a, c]),
          begin: tensor("i32", [3], Int32Array.from([0, pos, 0])),
          end: tensor("i32", [3], Int32Array.from([1, pos + 1, 2])),
        },
        { state, outputs: "fp32" },
      );
    expect(Array.from(step(0, 1, 2).outputs.total.data as Float32Array)).toEqual([1, 2]);
    expect(Array.from(step(1, 10, 20).outputs.total.data as Float32Array)).toEqual([11, 22]);
    expect(Array.from(step(3, 100, 200).outputs.total.data as Float32Array)).toEqual([111, 222]);
    expect(Array.from(state.get("cache", "fp32").data as Float32Array)).toEqual([
      1, 2, 10, 20, 0, 0, 100, 200,
    ]);
    // a run without a state starts from zeros
    const other = it.run({
      kv: f32t([1, 1, 2], [5, 6]),
      begin: tensor("i32", [3], Int32Array.from([0, 2, 0])),
      end: tensor("i32", [3], Int32Array.from([1, 3, 2])),
    });
    expect(Array.from(other.state.get("cache", "fp32").data as Float32Array)).toEqual([
      0, 0, 0, 0, 5, 6, 0, 0,
    ]);
    // a slice that does not fit the update is a runtime error naming the op
    expect(() =>
      it.run({
        kv: f32t([1, 1, 2], [1, 1]),
        begin: tensor("i32", [3], Int32Array.from([0, 1, 0])),
        end: tensor("i32", [3], Int32Array.from([1, 3, 2])),
      }),
    ).toThrow(/slice_update 'slice_update_0': update \[1, 1, 2\] does not fit the slice \[1, 2, 2\]/);
  });

  it("returns fp16 outputs as fp16 bit patterns and states as tensors", () => {
    const b = new MilBuilder();
    b.output("y", b.mul({ x: b.input("x", f16([3])), y: 3 }));
    const r = interpret(b.program(), { x: f32t([3], [0.1, 1, -2]) });
    expect(r.outputs.y.dtype).toBe("f16");
    const bits = r.outputs.y.data as Uint16Array;
    // x is fp16 (0.1 -> 0.0999755859375); the product is rounded to fp32 here (fp32 mode)
    expect(bits[0]).toBe(f32ToF16Bits(Math.fround(f16BitsToF32(f32ToF16Bits(0.1)) * 3)));
    expect(Array.from(bits).map(f16BitsToF32).slice(1)).toEqual([3, -6]);
  });

  it("fp16 mode keeps the results of keepFp32 ops in fp32 (an fp32 island), and times each op", () => {
    const { p, input } = squareProgram();
    // 300² overflows fp16; kept in fp32 it does not, and the rest rounds as usual
    const r = interpret(p, input, {
      precision: "fp16",
      outputs: "fp32",
      keepFp32: (op) => op.name === "square_it",
      profile: "ops",
    });
    expect(Array.from(r.outputs.y.data as Float32Array)).toEqual([301, 3]);
    expect(r.nonFinite).toEqual([]);
    expect(r.opTimes?.map((t) => [t.name, t.type])).toEqual([
      ["square_it", "mul"],
      ["divide", "real_div"],
      ["y", "add"],
    ]);
    for (const t of r.opTimes ?? []) expect(t.ms).toBeGreaterThanOrEqual(0);
    expect(r.profile?.mul.calls).toBe(1);
    expect(interpret(p, input, { profile: true }).opTimes).toBeUndefined();
  });

  it("fp16 mode rounds op results, overflows to inf and reports the first op", () => {
    const { p, input } = squareProgram();

    const r32 = interpret(p, input, { outputs: "fp32" });
    expect(Array.from(r32.outputs.y.data as Float32Array)).toEqual([301, 3]);
    expect(r32.nonFinite).toEqual([]);

    const r16 = interpret(p, input, { precision: "fp16", outputs: "fp32" });
    expect(Array.from(r16.outputs.y.data as Float32Array)).toEqual([Number.POSITIVE_INFINITY, 3]);
    expect(r16.firstNonFinite).toMatchObject({
      opType: "mul",
      opName: "square_it",
      output: "square_it",
      count: 1,
      total: 2,
      origin: true,
    });
    expect(r16.nonFinite.map((n) => [n.opName, n.origin])).toEqual([
      ["square_it", true],
      ["divide", false],
      ["y", false], // the output op takes the output's name
    ]);

    expect(() => interpret(p, input, { precision: "fp16", onNonFinite: "throw" })).toThrow(MilNonFiniteError);
    expect(() => interpret(p, input, { precision: "fp16", onNonFinite: "throw" })).toThrow(
      /mul 'square_it': output 'square_it' has 1 of 2 values inf or NaN/,
    );
    expect(interpret(p, input, { precision: "fp16", onNonFinite: "ignore" }).nonFinite).toEqual([]);
  });

  it("fp16 mode keeps or flushes subnormal results", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1]));
    b.output("y", b.mul({ x, y: x }));
    const input = { x: f32t([1], [2 ** -10]) }; // square = 2^-20, an fp16 subnormal
    const keep = interpret(b.program(), input, { precision: "fp16", outputs: "fp32" });
    expect((keep.outputs.y.data as Float32Array)[0]).toBe(2 ** -20);
    const flush = interpret(b.program(), input, {
      precision: "fp16",
      flushSubnormals: true,
      outputs: "fp32",
    });
    expect((flush.outputs.y.data as Float32Array)[0]).toBe(0);
    // fp32 mode: fp16-typed values are not rounded
    const b2 = new MilBuilder();
    b2.output("y", b2.mul({ x: b2.input("x", f16([1])), y: 1 / 3 }));
    const y32 = (
      interpret(b2.program(), { x: f32t([1], [1]) }, { outputs: "fp32" }).outputs.y.data as Float32Array
    )[0];
    const y16 = (
      interpret(b2.program(), { x: f32t([1], [1]) }, { precision: "fp16", outputs: "fp32" }).outputs.y
        .data as Float32Array
    )[0];
    expect(y32).toBe(Math.fround(f16BitsToF32(f32ToF16Bits(1 / 3))));
    expect(y16).toBe(f16BitsToF32(f32ToF16Bits(y32)));
  });

  it("fp16 mode with flushed subnormals flushes fp16 constants as the ANE holds them: ε = 1e-6 is 0", () => {
    // a zero row through x·rsqrt(Σx² + ε) and layer_norm(x, ε): ε = 1e-6 is an fp16 subnormal
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 4]));
    const eps = { data: [1e-6], dtype: "fp16" as const, shape: [] };
    const ss = b.reduceSumSquare({ x, axes: [-1], keepDims: true });
    b.output("l2", b.mul({ x, y: b.rsqrt({ x: ss, epsilon: eps }) }));
    b.output("ln", b.layerNorm({ x, axes: [1], epsilon: eps }));
    const sub = b.const(Float32Array.of(1e-6, 2 ** -14, -3e-7, 0.5), "fp16", [1, 4], { name: "sub" });
    b.output("c", b.add({ x, y: sub }));
    const zero = { x: f32t([1, 4], [0, 0, 0, 0]) };
    const kept = interpret(b.program(), zero, { precision: "fp16", outputs: "fp32" });
    expect(kept.nonFinite).toEqual([]);
    const flushed = interpret(b.program(), zero, {
      precision: "fp16",
      flushSubnormals: true,
      outputs: "fp32",
    });
    expect([...(flushed.outputs.l2.data as Float32Array)].every(Number.isNaN)).toBe(true);
    expect([...(flushed.outputs.ln.data as Float32Array)].every(Number.isNaN)).toBe(true);
    expect(flushed.firstNonFinite?.opType).toBe("rsqrt");
    // a const op's subnormals are flushed, its normal values kept; fp32 mode keeps the stored values
    expect([...(flushed.outputs.c.data as Float32Array)]).toEqual([0, 2 ** -14, 0, 0.5]);
    const stored = interpret(b.program(), zero, { outputs: "fp32" }).outputs.c.data as Float32Array;
    expect(stored[0]).toBe(f16BitsToF32(f32ToF16Bits(1e-6)));
  });

  it("decompresses constexpr weights and loads blobs once, cached across runs and interpreters", () => {
    let loads = 0;
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 4]));
    const w = b.constexprLutToDense({
      indices: { data: [0, 1, 2, 3, 3, 2, 1, 0], dtype: "uint2", shape: [2, 4] },
      lut: { data: [0.5, 1, 1.5, 2], dtype: "fp16", shape: [1, 1, 4, 1] },
      name: "w",
    });
    b.output("y", b.linear({ x, weight: w }));
    // swap the lut for a blob-backed constant with a counting loader, as a package reader would
    const fn = b.function();
    const ops = fn.block.operations.map((op) => {
      if (op.type !== "constexpr_lut_to_dense") return op;
      const lut = op.inputs.lut[0];
      if (lut.kind !== "value" || !("data" in lut.value)) throw new Error("expected inline lut");
      const data = lut.value.data;
      const blobLut: ConstValue = {
        type: lut.value.type,
        blob: { fileName: "@model_path/weights/weight.bin", offset: 64 },
        load: () => {
          loads++;
          return data;
        },
      };
      return { ...op, inputs: { ...op.inputs, lut: [{ kind: "value" as const, value: blobLut }] } };
    });
    const p: Program = {
      version: 1,
      functions: { main: { ...fn, block: { ...fn.block, operations: ops } } },
    };
    const input = { x: f32t([1, 4], [1, 1, 1, 1]) };
    const a = new MilInterpreter(p);
    expect(Array.from(a.run(input, { outputs: "fp32" }).outputs.y.data as Float32Array)).toEqual([5, 5]);
    a.run(input);
    new MilInterpreter(p).run(input);
    expect(loads).toBe(1);
  });

  it("validates inputs and states", () => {
    const it = new MilInterpreter(kvProgram());
    const ok = {
      kv: f32t([1, 1, 2], [1, 2]),
      begin: tensor("i32", [3], new Int32Array(3)),
      end: tensor("i32", [3], Int32Array.from([1, 1, 2])),
    };
    expect(() => it.run({ ...ok, kv: f32t([1, 2], [1, 2]) })).toThrow(
      "input 'kv': expected tensor<fp16, [1, 1, 2]>, got f32 [1, 2]",
    );
    expect(() => it.run({ kv: ok.kv, begin: ok.begin } as never)).toThrow(/input 'end' .* is missing/);
    expect(() => it.run({ ...ok, extra: ok.kv })).toThrow(/'extra' is not an input/);
    expect(() => it.run({ ...ok, begin: f32t([3], [0, 0, 0]) })).toThrow(
      /expected tensor<int32, \[3\]> \(integers\), got f32/,
    );
    const state = it.newState();
    expect(() => state.set("cache", f32t([1, 4], [0, 0, 0, 0]))).toThrow(
      /state 'cache': expected tensor<fp16, \[1, 4, 2\]>/,
    );
    expect(() => state.get("nope")).toThrow(/no state 'nope'/);
    state.set("cache", f32t([1, 4, 2], [1, 1, 1, 1, 1, 1, 1, 1]));
    const r = it.run(ok, { state, outputs: "fp32" });
    expect(Array.from(r.outputs.total.data as Float32Array)).toEqual([4, 5]);
    expect(Object.keys(r.state.toTensors())).toEqual(["cache"]);
    expect(r.state.toTensors().cache.dtype).toBe("f16");
  });

  it("profiles op time by type on request", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4]));
    b.output("y", b.exp({ x: b.exp({ x }) }));
    const r = interpret(b.program(), { x: f32t([4], [0, 0, 0, 0]) }, { profile: true });
    expect(r.profile?.exp.calls).toBe(2);
    expect(r.profile?.exp.ms).toBeGreaterThanOrEqual(0);
  });

  it("picks the function of a multifunction program", () => {
    const b = new MilBuilder();
    b.output("y", b.relu({ x: b.input("x", f16([2])) }));
    const p: Program = { version: 1, functions: { decode: b.function() } };
    expect(new MilInterpreter(p).functionName).toBe("decode");
    expect(() => new MilInterpreter(p, { functionName: "prefill" })).toThrow(/no function 'prefill'/);
  });
});
