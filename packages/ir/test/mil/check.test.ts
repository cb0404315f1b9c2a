import { describe, expect, it } from "vitest";
import {
  type Binding,
  checkProgram,
  MilBindingError,
  MilBuilder,
  type MilFunction,
  MilOutputTypeError,
  MilProgramError,
  MilTypeError,
  MilUnknownOpError,
  type Operation,
  type Program,
  resolveFunction,
  type TensorType,
  tensorType,
} from "../../src/mil/index.js";
import { literal, toMilData } from "../../src/mil/values.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);
const v = (name: string): Binding[] => [{ kind: "var", name }];
const constOp = (name: string, type: TensorType, values: number[]): Operation => ({
  type: "const",
  name,
  inputs: {},
  outputs: [{ name, type }],
  value: { type, data: toMilData(type.dtype, values) },
});

function program(
  ops: Operation[],
  outputs: string[],
  inputs = [{ name: "x", type: f16([1, 4]) }],
  opset = "CoreML8",
): Program {
  const fn: MilFunction = { inputs, opset, block: { inputs: [], outputs, operations: ops } };
  return { version: 1, functions: { main: fn } };
}

const w = constOp("w", f16([2, 4]), [1, 2, 3, 4, 5, 6, 7, 8]);
/** y = linear(x, w) with no bias, declared with output type fp16 `yShape`. */
const linearProgram = (yShape: number[]) =>
  program(
    [
      w,
      {
        type: "linear",
        name: "y",
        inputs: { x: v("x"), weight: v("w") },
        outputs: [{ name: "y", type: f16(yShape) }],
      },
    ],
    ["y"],
  );

describe("checkProgram", () => {
  it("accepts a program whose optional inputs were left out (defaults filled like coremltools' loader)", () => {
    const p = linearProgram([1, 2]);
    expect(checkProgram(p)).toEqual({ functions: 1, operations: 2 });
    const [, lin] = resolveFunction(p.functions.main);
    expect(lin.def.type).toBe("linear");
    expect(lin.args.has("bias")).toBe(true); // default filled in
    expect(lin.outputs).toEqual([f16([1, 2])]);
  });

  it("names an unknown op", () => {
    const p = program(
      [{ type: "frobnicate", name: "f", inputs: { x: v("x") }, outputs: [{ name: "f", type: f16([1, 4]) }] }],
      ["f"],
    );
    expect(() => checkProgram(p)).toThrow(MilUnknownOpError);
    expect(() => checkProgram(p)).toThrow("main: frobnicate 'f': op type 'frobnicate' is not a known MIL op");
  });

  it("names op, output, declared and inferred types on a mismatch", () => {
    const p = linearProgram([1, 3]);
    let err: unknown;
    try {
      checkProgram(p);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MilOutputTypeError);
    const e = err as MilOutputTypeError;
    expect([e.opType, e.opName, e.output, e.declared, e.inferred]).toEqual([
      "linear",
      "y",
      "y",
      "tensor<fp16, [1, 3]>",
      "tensor<fp16, [1, 2]>",
    ]);
    const dtype = program(
      [
        {
          type: "relu",
          name: "r",
          inputs: { x: v("x") },
          outputs: [{ name: "r", type: tensorType("fp32", [1, 4]) }],
        },
      ],
      ["r"],
    );
    expect(() => checkProgram(dtype)).toThrow(
      /relu 'r': output 'r' is declared tensor<fp32, \[1, 4\]> but the op infers tensor<fp16, \[1, 4\]>/,
    );
  });

  it("reports a wrong number of declared outputs", () => {
    const ops: Operation[] = [
      constOp("n", tensorType("int32", []), [2]),
      constOp("ax", tensorType("int32", []), [1]),
      {
        type: "split",
        name: "s",
        inputs: { x: v("x"), num_splits: v("n"), axis: v("ax") },
        outputs: [{ name: "s0", type: f16([1, 2]) }],
      },
    ];
    expect(() => checkProgram(program(ops, ["s0"]))).toThrow(
      /declared 1 output\(s\) but the op infers 2 output\(s\)/,
    );
  });

  it("names a binding to an unknown variable", () => {
    const p = program(
      [{ type: "relu", name: "r", inputs: { x: v("nope") }, outputs: [{ name: "r", type: f16([1, 4]) }] }],
      ["r"],
    );
    expect(() => checkProgram(p)).toThrow(MilBindingError);
    expect(() => checkProgram(p)).toThrow(
      "main: relu 'r': x binds to 'nope', which is not defined before this op",
    );
  });

  it("names a missing required input and a non-const weight", () => {
    const missing = program(
      [{ type: "linear", name: "l", inputs: { x: v("x") }, outputs: [{ name: "l", type: f16([1, 2]) }] }],
      ["l"],
    );
    expect(() => checkProgram(missing)).toThrow(MilTypeError);
    expect(() => checkProgram(missing)).toThrow("linear 'l': weight is required but missing");
    const runtimeWeight = program(
      [
        {
          type: "linear",
          name: "l",
          inputs: { x: v("x"), weight: v("w2") },
          outputs: [{ name: "l", type: f16([1, 2]) }],
        },
      ],
      ["l"],
      [
        { name: "x", type: f16([1, 4]) },
        { name: "w2", type: f16([2, 4]) },
      ],
    );
    expect(() => checkProgram(runtimeWeight)).toThrow("weight must be a compile-time constant");
  });

  it("accepts inline values and rejects ops missing from the function's opset", () => {
    const eps: Binding[] = [{ kind: "value", value: literal("fp16", 0.001) }];
    const ok = program(
      [
        {
          type: "rsqrt",
          name: "r",
          inputs: { x: v("x"), epsilon: eps },
          outputs: [{ name: "r", type: f16([1, 4]) }],
        },
      ],
      ["r"],
    );
    expect(checkProgram(ok).operations).toBe(1);
    const sdpa: Operation = {
      type: "scaled_dot_product_attention",
      name: "a",
      inputs: { query: v("q"), key: v("q"), value: v("q") },
      outputs: [{ name: "a", type: f16([1, 2, 4]) }],
    };
    const q = [{ name: "q", type: f16([1, 2, 4]) }];
    expect(checkProgram(program([sdpa], ["a"], q)).operations).toBe(1);
    expect(() => checkProgram(program([sdpa], ["a"], q, "CoreML7"))).toThrow(
      /is not available in opset CoreML7/,
    );
    expect(() => checkProgram(program([sdpa], ["a"], q, "CoreML99"))).toThrow(MilProgramError);
  });

  it("checks block outputs, duplicate names and const values", () => {
    expect(() => checkProgram(program([], ["missing"]))).toThrow(/block output 'missing' is not defined/);
    const dup = program(
      [{ type: "relu", name: "x", inputs: { x: v("x") }, outputs: [{ name: "x", type: f16([1, 4]) }] }],
      ["x"],
    );
    expect(() => checkProgram(dup)).toThrow(/'x' redefines an existing name/);
    const noVal = program(
      [{ type: "const", name: "c", inputs: {}, outputs: [{ name: "c", type: f16([1]) }] }],
      ["c"],
    );
    expect(() => checkProgram(noVal)).toThrow(/const 'c': val is missing/);
    expect(() => checkProgram({ version: 1, functions: {} })).toThrow(/no functions/);
  });

  it("accepts what the builder makes", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 2, 8]));
    const k = b.state("k", f16([1, 4, 8]));
    const kc = b.coremlUpdateState(
      k,
      b.sliceUpdate({ x: b.readState({ input: k }), update: x, begin: [0, 1, 0], end: [1, 3, 8] }),
    );
    b.output("y", b.scaledDotProductAttention({ query: x, key: kc, value: kc }));
    expect(checkProgram(b.program()).operations).toBe(b.function().block.operations.length);
  });
});
