/**
 * Op-level numerics: every case in oracle/ops_cases.json (made by oracle/ops_oracle.py with
 * numpy, MLX and coremltools) is built with MilBuilder, type-checked against coremltools'
 * inference for the same op, and run by the interpreter in both precision modes.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { f32ToF16Bits, roundToF16 } from "../../src/dtype.js";
import {
  type Arg,
  type ConstInit,
  MilBuilder,
  MilInterpreter,
  type MilVar,
  type Precision,
  tensorType,
} from "../../src/mil/index.js";
import type { MilDType } from "../../src/mil/program.js";
import { type Tensor, tensor } from "../../src/tensor.js";

interface TensorSpec {
  dtype: MilDType;
  shape: number[];
  data: (number | boolean)[];
  const?: boolean;
}
interface OutSpec {
  dtype: MilDType;
  shape: number[];
  data: number[];
}
interface Case {
  name: string;
  op: string;
  inputs: Record<string, TensorSpec | TensorSpec[]>;
  params: Record<string, Arg>;
  expect: Record<Precision, OutSpec[]>;
  coremltools?: { dtype: string; shape: number[] }[];
}

const { cases } = JSON.parse(readFileSync(new URL("./oracle/ops_cases.json", import.meta.url), "utf8")) as {
  cases: Case[];
};

function feed(spec: TensorSpec): Tensor {
  if (spec.dtype === "bool")
    return tensor(
      "bool",
      spec.shape,
      Uint8Array.from(spec.data, (v) => (v ? 1 : 0)),
    );
  if (spec.dtype === "int32") return tensor("i32", spec.shape, Int32Array.from(spec.data as number[]));
  return tensor("f32", spec.shape, Float32Array.from(spec.data as number[]));
}

function build(c: Case): { b: MilBuilder; feeds: Record<string, Tensor>; outs: MilVar[] } {
  const b = new MilBuilder();
  const feeds: Record<string, Tensor> = {};
  const args: Record<string, Arg | MilVar[]> = {};
  const constexpr = c.op.startsWith("constexpr_");
  const bind = (name: string, s: TensorSpec): Arg => {
    if (s.const) {
      const init: ConstInit = { data: s.data as number[], dtype: s.dtype, shape: s.shape };
      return constexpr ? init : b.const(init.data, s.dtype, s.shape, { name });
    }
    feeds[name] = feed(s);
    return b.input(name, tensorType(s.dtype, s.shape));
  };
  for (const [k, v] of Object.entries(c.inputs)) {
    args[k] = Array.isArray(v) ? v.map((s, i) => bind(`${k}_${i}`, s) as MilVar) : bind(k, v);
  }
  let outs: MilVar[];
  if (c.op === "__chain_mul_add") {
    outs = [b.add({ x: b.mul({ x: args.x as MilVar, y: args.y as MilVar }), y: args.z as MilVar })];
  } else {
    outs = b.op(c.op, { ...args, ...c.params }, { name: "op" });
  }
  for (const [i, v] of outs.entries()) b.output(`out${i}`, v);
  return { b, feeds, outs };
}

/** Distance in fp16 ulps (ordered bit patterns). */
function f16Ulps(a: number, e: number): number {
  const ord = (v: number) => {
    const h = f32ToF16Bits(v);
    return h & 0x8000 ? -(h & 0x7fff) : h;
  };
  return Math.abs(ord(a) - ord(e));
}

function compare(c: Case, mode: Precision, i: number, got: Tensor, want: OutSpec): void {
  const where = `${c.name} [${mode}] out${i}`;
  expect(got.shape, where).toEqual(want.shape);
  const data = Array.from(got.data as ArrayLike<number>);
  expect(data.length, where).toBe(want.data.length);
  if (want.dtype !== "fp16" && want.dtype !== "fp32") {
    expect(data, where).toEqual(want.data);
    return;
  }
  for (let k = 0; k < data.length; k++) {
    const a = data[k];
    const e = want.data[k];
    if (mode === "fp16" && want.dtype === "fp16") {
      // an fp16 result: exactly representable, and within an ulp of numpy's float16 value
      expect(roundToF16(a), `${where}[${k}] is not an fp16 value`).toBe(a);
      if (f16Ulps(a, e) > 1)
        expect.fail(`${where}[${k}]: ${a} vs numpy float16 ${e} (${f16Ulps(a, e)} ulps)`);
    } else if (Math.abs(a - e) > 2e-5 * Math.abs(e) + 2e-6) {
      expect.fail(`${where}[${k}]: ${a} vs expected ${e}`);
    }
  }
}

describe("MIL op numerics against numpy / MLX / coremltools", () => {
  it("has the cases", () => {
    expect(cases.length).toBeGreaterThan(60);
  });
  for (const c of cases) {
    describe(c.name, () => {
      it("infers the output types coremltools infers", () => {
        const { outs } = build(c);
        if (!c.coremltools) return; // composite case, not one op
        expect(outs.map((o) => ({ dtype: o.dtype, shape: [...o.shape] }))).toEqual(c.coremltools);
      });
      for (const mode of ["fp32", "fp16"] as const) {
        it(`evaluates in ${mode} mode`, () => {
          const { b, feeds } = build(c);
          const res = new MilInterpreter(b.program(), { precision: mode }).run(feeds, { outputs: "fp32" });
          for (const [i, want] of c.expect[mode].entries()) compare(c, mode, i, res.outputs[`out${i}`], want);
        });
      }
    });
  }
});
