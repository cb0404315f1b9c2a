/**
 * The interpreter's op-buffer pool and the SIMD elementwise kernels that run on pooled results:
 * the same bits as the plain loops (checked against a float64-then-fp32 reference), nothing
 * stale when buffers are reused across runs, states never handed out again.
 */
import { type Tensor, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { roundF16InPlace } from "../../src/mil/fp16.js";
import { MilBuilder, MilInterpreter, type MilVar, tensorType } from "../../src/mil/index.js";
import { simdHeap } from "../../src/mil/kernels/simd.js";

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296 - 0.5;
  };
}

const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

function randomTensor(shape: number[], r: () => number): Tensor {
  const d = new Float32Array(numel(shape));
  for (let i = 0; i < d.length; i++) d[i] = r() * 2 ** ((i % 17) - 8);
  return tensor("f32", shape, d);
}

/** Strides of `shape` broadcast to `out` (0 along broadcast dims), right-aligned. */
function stridesTo(shape: readonly number[], out: readonly number[]): number[] {
  const full = [...new Array<number>(out.length - shape.length).fill(1), ...shape];
  const st = new Array<number>(out.length).fill(0);
  let s = 1;
  for (let d = out.length - 1; d >= 0; d--) {
    st[d] = full[d] === 1 ? 0 : s;
    s *= full[d];
  }
  return st;
}

/** x ∘ y by numpy broadcasting, each value computed in float64 and rounded to fp32 once. */
function reference(type: string, x: Tensor, y: Tensor, out: number[]): Float32Array {
  const sx = stridesTo(x.shape, out);
  const sy = stridesTo(y.shape, out);
  const xd = x.data as Float32Array;
  const yd = y.data as Float32Array;
  const o = new Float32Array(numel(out));
  const idx = new Array<number>(out.length).fill(0);
  for (let i = 0; i < o.length; i++) {
    let xi = 0;
    let yi = 0;
    for (let d = 0; d < out.length; d++) {
      xi += idx[d] * sx[d];
      yi += idx[d] * sy[d];
    }
    const a = xd[xi];
    const b = yd[yi];
    o[i] = type === "add" ? a + b : type === "sub" ? a - b : type === "mul" ? a * b : a / b;
    for (let d = out.length - 1; d >= 0 && ++idx[d] === out[d]; d--) idx[d] = 0;
  }
  return o;
}

function expectSameBits(got: Float32Array, want: Float32Array, what: string): void {
  expect(got.length).toBe(want.length);
  const g = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const w = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = 0; i < g.length; i++) {
    if (g[i] !== w[i]) expect.fail(`${what}: element ${i}: got ${got[i]}, want ${want[i]}`);
  }
}

/** `pool` copies an input into a computed (pooled, SIMD-heap) value first: x·1 keeps every bit. */
function pooled(b: MilBuilder, v: MilVar, name: string): MilVar {
  return b.mul({ x: v, y: b.const(Float32Array.of(1), "fp32", [], { name: `${name}_one` }), name });
}

describe("SIMD elementwise kernels on pooled results", () => {
  const cases: { x: number[]; y: number[] }[] = [
    { x: [1, 3, 37, 130], y: [1, 3, 37, 130] }, // vv, tail of 2
    { x: [1, 3, 37, 130], y: [1, 3, 37, 1] }, // vs per row
    { x: [1, 3, 37, 1], y: [1, 3, 1, 130] }, // sv: outer product
    { x: [2, 5, 9, 7], y: [1, 5, 1, 1] }, // rank-3 plan, short rows
    { x: [4, 1030], y: [1030] }, // vv rows broadcast along dim 0
  ];
  for (const type of ["add", "sub", "mul", "real_div"] as const) {
    it(`${type}: the bits of float64-then-fp32 arithmetic, every broadcast form`, () => {
      expect(simdHeap()).not.toBeNull();
      const r = lcg(11);
      for (const c of cases) {
        const b = new MilBuilder({ opset: "CoreML8" });
        const x = pooled(b, b.input("x", tensorType("fp32", c.x)), "px");
        const y = pooled(b, b.input("y", tensorType("fp32", c.y)), "py");
        const fn = { add: b.add, sub: b.sub, mul: b.mul, real_div: b.realDiv }[type].bind(b);
        b.output("z", fn({ x, y, name: "z" }));
        const it = new MilInterpreter(b.program(), { onNonFinite: "ignore" });
        const xs = randomTensor(c.x, r);
        const ys = randomTensor(c.y, r);
        const out = c.x.map((d, i) =>
          Math.max(d, [...new Array(c.x.length - c.y.length).fill(1), ...c.y][i]),
        );
        const want = reference(type, xs, ys, out);
        for (let run = 0; run < 2; run++) {
          // the second run takes its buffers from the pool
          const z = it.run({ x: xs, y: ys }, { outputs: "fp32" }).outputs.z;
          expectSameBits(z.data as Float32Array, want, `${type} ${c.x} ∘ ${c.y} run ${run}`);
        }
      }
    });
  }

  it("reduce_sum over a middle axis sums in float64 like the plain loop (tails included)", () => {
    const r = lcg(5);
    for (const shape of [
      [1, 16, 128, 128],
      [2, 3, 5, 13],
      [3, 7, 1],
    ]) {
      const b = new MilBuilder({ opset: "CoreML8" });
      const x = pooled(b, b.input("x", tensorType("fp32", shape)), "px");
      b.output("s", b.reduceSum({ x, axes: [shape.length - 2], keepDims: true, name: "s" }));
      const it = new MilInterpreter(b.program(), { onNonFinite: "ignore" });
      const xs = randomTensor(shape, r);
      const inner = shape[shape.length - 1];
      const R = shape[shape.length - 2];
      const outer = numel(shape) / (R * inner);
      const want = new Float32Array(outer * inner);
      const xd = xs.data as Float32Array;
      for (let p = 0; p < outer; p++)
        for (let i = 0; i < inner; i++) {
          let acc = 0;
          for (let q = 0; q < R; q++) acc += xd[(p * R + q) * inner + i];
          want[p * inner + i] = acc;
        }
      const got = it.run({ x: xs }, { outputs: "fp32" }).outputs.s;
      expectSameBits(got.data as Float32Array, want, `reduce_sum ${shape}`);
    }
  });
});

describe("fp16 rounding of pooled inputs and results", () => {
  for (const flushSubnormals of [false, true]) {
    it(`rounds like roundF16InPlace (edge values, a tail${flushSubnormals ? ", flushing subnormals" : ""})`, () => {
      const r = lcg(9);
      const n = 4099;
      const vals = new Float32Array(n);
      const edges = [
        0,
        -0,
        65504,
        65519.99,
        65520,
        -1e6,
        2 ** -14,
        2 ** -15,
        -(2 ** -24),
        3 * 2 ** -26,
        1e-8,
      ];
      edges.push(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN);
      for (let i = 0; i < n; i++) vals[i] = i < edges.length ? edges[i] : r() * 2 ** ((i % 44) - 30);
      const b = new MilBuilder({ opset: "CoreML8" });
      const x = b.input("x", tensorType("fp16", [1, n]));
      const two = b.const(Float32Array.of(2), "fp32", [], { name: "two" });
      b.output("y", b.mul({ x: b.cast({ x, dtype: "fp32", name: "x32" }), y: two, name: "y32" }));
      b.output("x16", b.mul({ x, y: b.const(Float32Array.of(1), "fp16", [], { name: "one" }), name: "x16" }));
      const it = new MilInterpreter(b.program(), {
        precision: "fp16",
        flushSubnormals,
        onNonFinite: "ignore",
      });
      const want = vals.slice();
      roundF16InPlace(want); // inputs are rounded to fp16 without flushing
      const wantX16 = want.slice();
      roundF16InPlace(wantX16, flushSubnormals);
      for (let run = 0; run < 2; run++) {
        const out = it.run({ x: tensor("f32", [1, n], vals) }, { outputs: "fp32" }).outputs;
        expectSameBits(out.x16.data as Float32Array, wantX16, `x·1 in fp16, run ${run}`);
        expectSameBits(
          out.y.data as Float32Array,
          want.map((v) => v * 2),
          `fp32 island, run ${run}`,
        );
      }
    });
  }
});

describe("op-buffer pool", () => {
  function stateProgram() {
    // s ← s·0.5 + x, out = s + x: a computed value written to a state each run
    const b = new MilBuilder({ opset: "CoreML8" });
    const st = b.state("s", tensorType("fp32", [4, 512]));
    const x = b.input("x", tensorType("fp32", [4, 512]));
    const half = b.const(Float32Array.of(0.5), "fp32", [], { name: "half" });
    const s = b.readState({ input: st, name: "s_read" });
    const next = b.add({ x: b.mul({ x: s, y: half, name: "decayed" }), y: x, name: "next" });
    b.writeState({ input: st, data: next, name: "s_write" });
    b.output("out", b.add({ x: next, y: x, name: "out" }));
    return b.program();
  }

  it("runs after runs give the results of a fresh interpreter, and states keep their values", () => {
    const prog = stateProgram();
    const r = lcg(3);
    const xs = [0, 1, 2, 3, 4].map(() => randomTensor([4, 512], r));
    const warm = new MilInterpreter(prog, { onNonFinite: "ignore" });
    const state = warm.newState();
    let s = new Float32Array(4 * 512);
    const snapshots: Float32Array[] = [];
    for (const x of xs) {
      const out = warm.run({ x }, { state, outputs: "fp32" }).outputs.out.data as Float32Array;
      const xd = x.data as Float32Array;
      const next = s.map((v, i) => Math.fround(Math.fround(v * 0.5) + xd[i]));
      expectSameBits(
        out,
        next.map((v, i) => Math.fround(v + xd[i])),
        "out",
      );
      s = next;
      // what the state holds now must survive every later run (its buffer is never reused)
      snapshots.push((state.get("s", "fp32").data as Float32Array).slice());
      expectSameBits(state.get("s", "fp32").data as Float32Array, s, "state");
    }
    const held = state.values.get("s")?.data as Float32Array;
    const copy = held.slice();
    for (const x of xs) warm.run({ x }); // fresh states: the pool hands its buffers out again
    expectSameBits(held, copy, "a state's array after later runs");
    expect(snapshots.length).toBe(xs.length);
  });
});

describe("outputs written into given tensors", () => {
  it("writes a carried output into the tensor that was its input, after reading it", () => {
    const b = new MilBuilder({ opset: "CoreML8" });
    const x = b.input("x", tensorType("fp32", [2, 600]));
    const two = b.const(Float32Array.of(2), "fp32", [], { name: "two" });
    b.output("next", b.add({ x: b.mul({ x, y: two, name: "x2" }), y: x, name: "next" }));
    const it = new MilInterpreter(b.program(), { onNonFinite: "ignore" });
    const r = lcg(2);
    const carried = randomTensor([2, 600], r);
    const first = (carried.data as Float32Array).slice();
    const out = it.run({ x: carried }, { outputs: "fp32", into: { next: carried } }).outputs.next;
    expect(out).toBe(carried); // no new tensor
    expectSameBits(
      carried.data as Float32Array,
      first.map((v) => Math.fround(Math.fround(v * 2) + v)),
      "x·2 + x written over x",
    );
    // a target of another shape or dtype is not used
    const other = tensor("f32", [600, 2], new Float32Array(1200));
    const fresh = it.run({ x: carried }, { outputs: "fp32", into: { next: other } }).outputs.next;
    expect(fresh).not.toBe(other);
    expect(fresh.shape).toEqual([2, 600]);
    expect((other.data as Float32Array).every((v) => v === 0)).toBe(true);
  });
});
