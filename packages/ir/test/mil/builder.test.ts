import { f16BitsToF32, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  type BlobRef,
  type BlobSink,
  type ConstValue,
  checkProgram,
  MilBuilder,
  MilProgramBuilder,
  MilTypeError,
  MilUnknownOpError,
  type Operation,
  type TensorType,
  tensorType,
} from "../../src/mil/index.js";
import { toMilData } from "../../src/mil/values.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);

function opsOf(b: MilBuilder): Operation[] {
  return [...b.function().block.operations];
}

function constOf(ops: Operation[], name: string): ConstValue {
  const op = ops.find((o) => o.type === "const" && o.outputs[0].name === name);
  if (!op?.value) throw new Error(`no const ${name}`);
  return op.value;
}

describe("MilBuilder: typing and errors", () => {
  it("infers output types as ops are added", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 3, 64]));
    const w = b.const(new Float32Array(32 * 64), "fp16", [32, 64]);
    const y = b.linear({ x, weight: w, name: "q_proj" });
    expect(y.name).toBe("q_proj");
    expect(y.type).toEqual(f16([1, 3, 32]));
    const [a, c] = b.split({ x: y, axis: -1, splitSizes: [8, 24] });
    expect(a.shape).toEqual([1, 3, 8]);
    expect(c.shape).toEqual([1, 3, 24]);
    expect(b.matmul({ x: b.transpose({ x: a, perm: [0, 2, 1] }), y: c }).shape).toEqual([1, 8, 24]);
    expect(b.matmul({ x: a, y: c, transposeX: true }).shape).toEqual([1, 8, 24]);
  });

  it("names the op, the input and what was expected on a bad weight shape", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 1, 64]));
    const w = b.const(new Float32Array(32 * 48), "fp16", [32, 48]);
    let err: unknown;
    try {
      b.linear({ x, weight: w, name: "q_proj" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MilTypeError);
    expect((err as MilTypeError).message).toContain(
      "linear 'q_proj': weight must be [Dout, 64], got [32, 48]",
    );
    expect((err as MilTypeError).param).toBe("weight");
    // the failed op left nothing behind: the name is free again
    expect(
      b.linear({ x, weight: b.const(new Float32Array(32 * 64), "fp16", [32, 64]), name: "q_proj" }).name,
    ).toBe("q_proj");
  });

  it("rejects mixed dtypes in one type domain", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4]));
    const y = b.input("y", tensorType("fp32", [4]));
    expect(() => b.mul({ x, y, name: "m" })).toThrow(
      /mul 'm': y must have the same dtype as x \(fp16\), got fp32/,
    );
  });

  it("rejects dtypes outside the op's domain", () => {
    const b = new MilBuilder();
    const i = b.input("i", tensorType("int32", [4]));
    expect(() => b.sigmoid({ x: i })).toThrow(/sigmoid 'sigmoid_0': x must be fp16 or fp32, got int32/);
  });

  it("requires compile-time constants where the signature says so", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 8]));
    const w = b.input("w", f16([4, 8]));
    expect(() => b.linear({ x, weight: w, name: "l" })).toThrow(
      /linear 'l': weight must be a compile-time constant/,
    );
  });

  it("reports missing, unknown and misplaced inputs", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([2, 4]));
    expect(() => b.op("linear", { x }, { name: "l" })).toThrow(/linear 'l': weight is required but missing/);
    expect(() => b.op("relu", { x, alpha: 1 }, { name: "r" })).toThrow(
      /relu 'r': alpha is not an input of relu/,
    );
    expect(() => b.op("frobnicate", { x }, { name: "f" })).toThrow(MilUnknownOpError);
    expect(() => b.reshape({ x, shape: [3, -1] })).toThrow(
      /reshape 'reshape_\d+': shape \[3, -1\] cannot hold 8 elements/,
    );
    const s = b.state("s", f16([2, 4]));
    expect(() => b.add({ x: s, y: x })).toThrow(/x must be a tensor, got a state/);
  });

  it("rejects ops newer than the opset", () => {
    const b = new MilBuilder({ opset: "CoreML7" });
    const x = b.input("x", f16([1, 2, 4, 8]));
    expect(() => b.scaledDotProductAttention({ query: x, key: x, value: x, name: "a" })).toThrow(
      /not available in opset CoreML7/,
    );
    expect(
      b.linear({ x: b.input("v", f16([1, 8])), weight: b.const(new Float32Array(16), "fp16", [2, 8]) }).shape,
    ).toEqual([1, 2]);
  });

  it("rejects bad and duplicate names", () => {
    const b = new MilBuilder();
    b.input("x", f16([2]));
    expect(() => b.input("x", f16([2]))).toThrow(/'x' is already used/);
    expect(() => b.input("layers.0", f16([2]))).toThrow(/not a MIL identifier/);
  });

  it("refuses runtime shapes that would make the output shape dynamic", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4, 6]));
    const begin = b.input("begin", tensorType("int32", [2]));
    expect(() => b.sliceByIndex({ x, begin, end: [4, 6], name: "s" })).toThrow(
      /slice_by_index 's': begin and end are runtime values/,
    );
    // masks pin every dim: fine
    expect(
      b.sliceByIndex({ x, begin, end: [4, 6], beginMask: [true, true], endMask: [true, true] }).shape,
    ).toEqual([4, 6]);
    // slice_update keeps x's shape: runtime bounds are the KV-cache pattern
    const u = b.input("u", f16([1, 6]));
    expect(
      b.sliceUpdate({ x, update: u, begin, end: b.input("end", tensorType("int32", [2])) }).shape,
    ).toEqual([4, 6]);
  });
});

describe("MilBuilder: default inputs (emitted explicitly, as coremltools does)", () => {
  it("linear gets a zero bias of Dout in the weight's dtype", () => {
    const b = new MilBuilder();
    const y = b.linear({
      x: b.input("x", f16([1, 8])),
      weight: b.const(new Float32Array(24), "fp16", [3, 8]),
      name: "p",
    });
    b.output("y", y);
    const ops = opsOf(b);
    const lin = ops.find((o) => o.type === "linear") as Operation;
    expect(Object.keys(lin.inputs)).toEqual(["x", "weight", "bias"]);
    expect(lin.inputs.bias[0]).toEqual({ kind: "var", name: "p_bias" });
    const bias = constOf(ops, "p_bias");
    expect(bias.type).toEqual(f16([3]));
    expect(Array.from((bias as { data: Uint16Array }).data)).toEqual([0, 0, 0]);
  });

  it("fills matmul, conv, reduce, topk, gather and epsilon defaults", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 4, 6]));
    b.matmul({ x, y: b.input("y", f16([6, 2])), name: "mm" });
    b.conv({ x, weight: b.const(new Float32Array(4 * 3), "fp16", [4, 1, 3]), groups: 4, name: "cv" });
    b.reduceSum({ x, axes: [1], name: "rs" });
    b.topk({ x, name: "tk" });
    b.rsqrt({ x, name: "rq" });
    b.layerNorm({ x, name: "ln" });
    b.output("out", b.gather({ x, indices: [0], name: "g" }));
    const ops = opsOf(b);
    const v = (name: string) => {
      const c = constOf(ops, name);
      const d = (c as { data: ArrayLike<number> | string[] }).data;
      return { dtype: c.type.dtype, shape: c.type.shape, values: Array.from(d as ArrayLike<number>) };
    };
    expect(v("mm_transpose_x")).toEqual({ dtype: "bool", shape: [], values: [0] });
    expect(v("mm_transpose_y").values).toEqual([0]);
    expect(v("cv_strides")).toEqual({ dtype: "int32", shape: [1], values: [1] });
    expect(v("cv_pad")).toEqual({ dtype: "int32", shape: [2], values: [0, 0] });
    expect(v("cv_dilations").values).toEqual([1]);
    expect(v("cv_pad_type")).toEqual({ dtype: "string", shape: [], values: ["valid"] });
    expect(ops.find((o) => o.name === "cv")?.inputs.bias).toBeUndefined(); // conv bias default is None
    expect(v("rs_keep_dims").values).toEqual([0]);
    expect(v("tk_k")).toEqual({ dtype: "int32", shape: [], values: [1] });
    expect(v("tk_axis").values).toEqual([-1]);
    expect(v("tk_ascending").values).toEqual([0]);
    expect(v("tk_sort").values).toEqual([1]);
    expect(v("tk_return_indices").values).toEqual([1]);
    expect(v("tk_output_indices_dtype").values).toEqual(["int32"]);
    // rsqrt: 1e-12 in x's dtype — fp16 rounds it to 0, exactly as coremltools emits it
    expect(v("rq_epsilon")).toEqual({ dtype: "fp16", shape: [], values: [0] });
    // layer_norm: axes = all dims, epsilon 1e-5 as fp32 (its own type domain)
    expect(v("ln_axes").values).toEqual([0, 1, 2]);
    expect(v("ln_epsilon").dtype).toBe("fp32");
    expect(v("g_axis").values).toEqual([0]);
    expect(v("g_batch_dims").values).toEqual([0]);
    expect(v("g_validate_indices").values).toEqual([0]);
  });

  it("types literals from the signature and the other inputs", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([2, 2]));
    b.output("y", b.mul({ x, y: 0.5, name: "half" }));
    b.layerNorm({
      x,
      axes: [-1],
      gamma: { data: [1, 1], dtype: "fp16", shape: [2] },
      epsilon: 1e-3,
      name: "ln",
    });
    const ops = opsOf(b);
    expect(constOf(ops, "half_y").type).toEqual(f16([]));
    expect(f16BitsToF32((constOf(ops, "half_y") as { data: Uint16Array }).data[0])).toBe(0.5);
    // epsilon joins gamma's fp16 domain
    expect(constOf(ops, "ln_epsilon").type.dtype).toBe("fp16");
  });
});

describe("MilBuilder: outputs, states, blobs, functions", () => {
  it("renames an op result to the output name, and routes inputs through identity", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([2]));
    b.output("y", b.relu({ x }));
    b.output("x_out", x);
    const fn = b.function();
    expect(fn.block.outputs).toEqual(["y", "x_out"]);
    expect(fn.block.operations.map((o) => `${o.type}:${o.outputs[0].name}`)).toEqual([
      "relu:y",
      "identity:x_out",
    ]);
    expect(() => new MilBuilder().function()).toThrow(/has no outputs/);
  });

  it("coremlUpdateState emits write_state then read_state", () => {
    const b = new MilBuilder();
    const s = b.state("cache", f16([1, 4]));
    const v = b.input("v", f16([1, 4]));
    const r = b.coremlUpdateState(s, v, { name: "cache_now" });
    b.output("out", b.add({ x: r, y: v }));
    const ops = opsOf(b);
    expect(ops.map((o) => o.type)).toEqual(["write_state", "read_state", "add"]);
    expect(ops[0].outputs).toEqual([]);
    expect(ops[0].inputs).toEqual({
      input: [{ kind: "var", name: "cache" }],
      data: [{ kind: "var", name: "v" }],
    });
    expect(r.type).toEqual(f16([1, 4]));
    expect(b.function().inputs[0]).toEqual({ name: "cache", type: { kind: "state", wrapped: f16([1, 4]) } });
    expect(() => b.writeState({ input: s, data: b.input("w", f16([1, 3])) })).toThrow(
      /data must be the state's type/,
    );
  });

  it("streams constants of >= 10 elements to the BlobSink and keeps small ones inline", () => {
    const written: { type: TensorType; n: number }[] = [];
    const sink: BlobSink = {
      write(type, data): BlobRef {
        written.push({ type, n: data.length });
        return { fileName: "@model_path/weights/weight.bin", offset: 64 + 64 * written.length };
      },
    };
    const b = new MilBuilder({ blobSink: sink });
    const x = b.input("x", f16([1, 16]));
    const w = b.const(new Float32Array(8 * 16), "fp16", [8, 16], { name: "w" });
    b.output("y", b.linear({ x, weight: w, name: "p" }));
    const ops = opsOf(b);
    expect("blob" in constOf(ops, "w")).toBe(true);
    expect("data" in constOf(ops, "p_bias")).toBe(true); // 8 elements: inline
    expect(written).toEqual([{ type: f16([8, 16]), n: 128 }]);
    // constexpr inputs go inline as values (blob refs when large), not as const ops
    const idx = { data: new Uint8Array(8 * 16).fill(3), dtype: "uint4" as const, shape: [8, 16] };
    const lut = {
      data: new Float32Array(16).map((_, i) => i / 8),
      dtype: "fp16" as const,
      shape: [1, 1, 16, 1],
    };
    const dense = b.constexprLutToDense({ indices: idx, lut, name: "w_pal" });
    expect(dense.type).toEqual(f16([8, 16]));
    const op = opsOf(b).find((o) => o.type === "constexpr_lut_to_dense") as Operation;
    expect(op.inputs.indices[0].kind).toBe("value");
    expect(written.map((w) => w.type.dtype)).toEqual(["fp16", "uint4", "fp16"]);
  });

  it("accepts Tensors as constants", () => {
    const b = new MilBuilder();
    const t = tensor("f32", [2, 2], Float32Array.from([1, 2, 3, 4]));
    const c = b.const(t);
    expect(c.type).toEqual(tensorType("fp32", [2, 2]));
    expect(b.const(t, "fp16").type).toEqual(f16([2, 2]));
    expect(() => b.const([1, 2, 3], "fp16", [2, 2])).toThrow(/needs 4 values, got 3/);
    expect(() => b.const([1, 300], "int8", [2])).toThrow(/not a valid int8/);
  });

  it("builds multifunction programs", () => {
    const pb = new MilProgramBuilder();
    for (const [name, s] of [
      ["prefill", 8],
      ["decode", 1],
    ] as const) {
      const f = pb.function(name);
      const x = f.input("x", f16([1, s, 4]));
      f.output("y", f.softmax({ x }));
    }
    const model = pb.model({ defaultFunctionName: "decode" });
    expect(model.specificationVersion).toBe(9);
    expect(model.defaultFunctionName).toBe("decode");
    expect(Object.keys(model.program.functions)).toEqual(["prefill", "decode"]);
    expect(checkProgram(model.program)).toEqual({ functions: 2, operations: 4 });
    expect(() => pb.model({ defaultFunctionName: "main" })).toThrow(/default function 'main'/);
  });

  it("makes a spec-9 model from a single function", () => {
    const b = new MilBuilder();
    b.output("y", b.exp({ x: b.input("x", f16([2])) }));
    const m = b.model({ metadata: { author: "test" } });
    expect(m.specificationVersion).toBe(9);
    expect(m.program.functions.main.opset).toBe("CoreML8");
    expect(m.metadata?.author).toBe("test");
  });
});

describe("const data", () => {
  it("keeps uint/int8 typed data as given (no copy of large LUT indices), range-checked", () => {
    const idx = Uint8Array.of(0, 15, 7);
    expect(toMilData("uint4", idx)).toBe(idx);
    const q = Int8Array.of(-128, 127);
    expect(toMilData("int8", q)).toBe(q);
    expect(() => toMilData("uint4", Uint8Array.of(16))).toThrow(/value 16 at index 0 is not a valid uint4/);
    expect(() => toMilData("int4", Int8Array.of(-9))).toThrow(/not a valid int4/);
    // other representations are still converted
    expect(toMilData("uint16", Uint8Array.of(3))).toEqual(Uint16Array.of(3));
  });
});

describe("MilBuilder.adopt", () => {
  it("puts another function's const and constexpr weights in this function over the same blob refs, writing nothing", () => {
    const writes: TensorType[] = [];
    const sink: BlobSink = {
      write: (type) => {
        writes.push(type);
        return { fileName: "@model_path/weights/weight.bin", offset: 64 * writes.length } as BlobRef;
      },
    };
    const p = new MilProgramBuilder({ blobSink: sink });
    const a = p.function("decode");
    const w = a.const(new Float32Array(32), "fp16", [4, 8], { name: "w" });
    const lut = a.constexprLutToDense({
      indices: { data: new Uint8Array(32), dtype: "uint4", shape: [4, 8] },
      lut: { data: new Uint16Array(4 * 16), dtype: "fp16", shape: [4, 1, 16, 1] },
      name: "w_lut",
    });
    a.output("y", a.add({ x: w, y: lut, name: "sum" }));
    const before = writes.length;
    const b = p.function("prefill");
    const w2 = b.adopt(w);
    const lut2 = b.adopt(lut);
    b.output("y", b.mul({ x: w2, y: lut2, name: "prod" }));
    expect(writes).toHaveLength(before);
    const fa = p.program().functions.decode.block.operations;
    const fb = p.program().functions.prefill.block.operations;
    const value = (ops: readonly Operation[], name: string) => ops.find((o) => o.outputs[0].name === name);
    expect(value(fb, "w")?.value).toBe(value(fa, "w")?.value);
    expect(value(fb, "w_lut")?.inputs).toEqual(value(fa, "w_lut")?.inputs);
    expect(() => b.adopt(a.add({ x: w, y: w, name: "not_const" }))).toThrow(/not a constant/);
    expect(() => new MilBuilder().adopt(w)).toThrow(/same program/);
    checkProgram(p.program());
  });
});
