/**
 * Every op against an independent numpy (float64) implementation (test/oracle/numpy_ops.py), or against
 * properties derived by hand where the op is structural.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { type MxArray, mx } from "../src/index.js";
import {
  describeMlx,
  expectClose,
  numel,
  type OracleCase,
  type OracleTensor,
  oraclePython,
  rng,
  runOracle,
  uniform,
} from "./helpers.js";

const next = rng(20260101);
const A = { shape: [2, 3, 4], data: uniform(next, 24, -2, 2) };
const B = { shape: [3, 4], data: uniform(next, 12, -2, 2) };
const P = { shape: [2, 3, 4], data: uniform(next, 24, 0.1, 3) };
const M45 = { shape: [4, 5], data: uniform(next, 20) };
const BATCH = { shape: [2, 4, 2], data: uniform(next, 16) };
const TABLE = { shape: [5, 4], data: uniform(next, 20) };
const IDS = { shape: [4], data: Int32Array.from([3, 0, 1, 3]) };
const ALONG = { shape: [2, 3, 2], data: Int32Array.from([0, 3, 1, 1, 2, 0, 3, 3, 0, 2, 1, 0]) };
const COND = { shape: [3, 4], data: Uint8Array.from({ length: 12 }, () => (next() > 0.5 ? 1 : 0)) };
const DW_X = { shape: [1, 7, 6], data: uniform(next, 42) };
const DW_W = { shape: [6, 4, 1], data: uniform(next, 24) };
const CV_X = { shape: [2, 9, 3], data: uniform(next, 54) };
const CV_W = { shape: [4, 3, 3], data: uniform(next, 36) };
const NORM_X = { shape: [2, 3, 16], data: uniform(next, 96, -3, 3) };
const NORM_W = { shape: [16], data: uniform(next, 16, 0.5, 1.5) };
const ROPE_X = { shape: [1, 2, 5, 16], data: uniform(next, 160) };
const Q = { shape: [1, 4, 3, 8], data: uniform(next, 96) };
const K = { shape: [1, 2, 5, 8], data: uniform(next, 80) };
const V = { shape: [1, 2, 5, 8], data: uniform(next, 80) };
const BOOL_MASK = {
  shape: [3, 5],
  data: Uint8Array.from({ length: 15 }, (_, i) => (i % 5 === 0 || next() > 0.4 ? 1 : 0)),
};
const ADD_MASK = { shape: [3, 5], data: uniform(next, 15, -2, 0) };
const W_Q = { shape: [16, 128], data: uniform(next, 16 * 128) };
const X_Q = { shape: [3, 128], data: uniform(next, 3 * 128) };
const GA = { shape: [3, 2, 8], data: uniform(next, 48) };
const GB = { shape: [4, 8, 5], data: uniform(next, 160) };
const LHS = { shape: [4], data: Uint32Array.from([0, 2, 1, 2]) };
const RHS = { shape: [4], data: Uint32Array.from([3, 0, 1, 1]) };
const GX = { shape: [3, 1, 128], data: uniform(next, 384) };
const GW = { shape: [4, 8, 128], data: uniform(next, 4 * 8 * 128) };

const UNARY_ON_A = [
  "abs",
  "negative",
  "exp",
  "sigmoid",
  "tanh",
  "square",
  "sin",
  "cos",
  "floor",
  "ceil",
  "erf",
];
const UNARY_ON_P = ["log", "log1p", "sqrt", "rsqrt", "reciprocal"];
const UNARY_COMPOSITE = ["silu", "softplus"];
const BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "logaddexp"];
const COMPARE = ["equal", "notEqual", "greater", "greaterEqual", "less", "lessEqual"];

type Arr = { shape: number[]; data: ArrayLike<number> };
const cases: OracleCase[] = [];
const add = (id: string, op: string, inputs: Record<string, Arr>, params?: Record<string, unknown>) =>
  cases.push({ id, op, inputs, params });

for (const op of UNARY_ON_A) add(op, op, { a: A });
for (const op of [...UNARY_ON_P, ...UNARY_COMPOSITE])
  add(op, op, { a: op === "silu" || op === "softplus" ? A : P });
for (const op of BINARY) add(op, op, { a: A, b: B });
for (const op of COMPARE) add(op, op, { a: A, b: { shape: [], data: [A.data[5]] } });
add("divide", "divide", { a: A, b: P });
add("power", "power", { a: P, b: B });
add("remainder", "remainder", { a: A, b: P });
add("floorDivide", "floorDivide", { a: A, b: P });
add("add-scalar", "add", { a: A }, { b: 2.5 });
add("subtract-scalar-left", "subtract", { b: A }, { a: 1.5 });
add("sum-all", "sum", { a: A });
add("sum-02-keep", "sum", { a: A }, { axes: [0, 2], keepdims: true });
add("mean-1", "mean", { a: A }, { axes: 1 });
add("max-last", "max", { a: A }, { axes: -1 });
add("min-0", "min", { a: A }, { axes: 0 });
add("prod-2", "prod", { a: P }, { axes: 2 });
add("logsumexp-last", "logsumexp", { a: A }, { axes: -1 });
add("argmax-1", "argmax", { a: A }, { axis: 1 });
add("argmin-last", "argmin", { a: A }, { axis: -1 });
add("softmax-last", "softmax", { a: A }, { axes: -1 });
add("cumsum-2", "cumsum", { a: A }, { axis: 2 });
add("matmul", "matmul", { a: A, b: M45 });
add("matmul-batched", "matmul", { a: A, b: BATCH });
add("transpose", "transpose", { a: A }, { axes: [2, 0, 1] });
add("concatenate", "concatenate", { a: A, b: P }, { names: ["a", "b"], axis: 1 });
add("split-3", "split", { a: A }, { sections: 3, axis: 1 });
add("split-idx", "split", { a: A }, { sections: [1, 3], axis: 2 });
add("slice", "slice", { a: A }, { start: [1, 0, -3], stop: [2, 3, 4], strides: [1, 2, 1] });
add(
  "sliceUpdate",
  "sliceUpdate",
  { a: A, update: { shape: [2, 1, 2], data: [9, 8, 7, 6] } },
  {
    start: [0, 1, 1],
    stop: [2, 2, 3],
  },
);
add("take", "take", { a: TABLE, indices: IDS }, { axis: 0 });
add("takeAlongAxis", "takeAlongAxis", { a: A, indices: ALONG }, { axis: 2 });
add("where", "where", { cond: COND, x: A, y: B });
add("repeat", "repeat", { a: A }, { repeats: 2, axis: 1 });
add("topk", "sortDesc", { a: A });
add("conv1d-depthwise", "conv1d", { x: DW_X, w: DW_W }, { stride: 1, padding: 0, dilation: 1, groups: 6 });
add("conv1d-strided", "conv1d", { x: CV_X, w: CV_W }, { stride: 2, padding: 1, dilation: 2, groups: 1 });
add("rmsNorm", "rmsNorm", { x: NORM_X, w: NORM_W }, { eps: 1e-6 });
add("rmsNorm-noweight", "rmsNorm", { x: NORM_X }, { eps: 1e-5 });
add("rope-half", "rope", { x: ROPE_X }, { dims: 8, traditional: false, base: 10000, scale: 1, offset: 3 });
add("rope-trad", "rope", { x: ROPE_X }, { dims: 16, traditional: true, base: 1e6, scale: 0.5, offset: 0 });
const SCALE = 1 / Math.sqrt(8);
add("sdpa-none", "sdpa", { q: Q, k: K, v: V }, { scale: SCALE });
add("sdpa-causal", "sdpa", { q: Q, k: K, v: V }, { scale: SCALE, mask: "causal" });
add("sdpa-bool", "sdpa", { q: Q, k: K, v: V, mask: BOOL_MASK }, { scale: SCALE, mask: "bool" });
add("sdpa-additive", "sdpa", { q: Q, k: K, v: V, mask: ADD_MASK }, { scale: SCALE, mask: "additive" });
add("gatherMm", "gatherMm", { a: GA, b: GB, lhs: LHS, rhs: RHS });

let expected: Record<string, OracleTensor | OracleTensor[]> = {};
const live: MxArray[] = [];

/** An MxArray for test data (disposed after the suite). */
function mk(t: Arr, dtype?: "float32" | "int32" | "uint32" | "bool"): MxArray {
  const data =
    t.data instanceof Float32Array ||
    t.data instanceof Int32Array ||
    t.data instanceof Uint32Array ||
    t.data instanceof Uint8Array
      ? t.data
      : Float32Array.from(t.data);
  const a = mx.array(data, t.shape, dtype);
  live.push(a);
  return a;
}

function values(a: MxArray): number[] {
  const data = a.toTypedArray();
  return Array.from(data as ArrayLike<number | bigint>, Number);
}

function check(id: string, actual: MxArray, tol: { rtol?: number; atol?: number } = {}): void {
  const want = expected[id] as OracleTensor;
  expect(actual.shape, `${id} shape`).toEqual(want.shape);
  expectClose(values(actual), want.data, { rtol: 1e-5, atol: 1e-5, ...tol, label: id });
  actual.dispose();
}

describeMlx("ops vs numpy", () => {
  beforeAll(() => {
    if (!oraclePython()) throw new Error("the op tests need Python with numpy (set ANEMLL_PYTHON)");
    expected = runOracle(cases);
  });
  afterAll(() => mx.dispose(live));

  it("elementwise ops with one input", () => {
    const a = mk(A);
    const p = mk(P);
    for (const op of UNARY_ON_A) check(op, (mx as unknown as Record<string, (x: MxArray) => MxArray>)[op](a));
    for (const op of UNARY_ON_P) check(op, (mx as unknown as Record<string, (x: MxArray) => MxArray>)[op](p));
    check("silu", mx.silu(a));
    check("softplus", mx.softplus(a));
  });

  it("elementwise ops with two inputs, broadcasting and weak scalars", () => {
    const a = mk(A);
    const b = mk(B);
    const p = mk(P);
    const fns = mx as unknown as Record<string, (x: MxArray | number, y: MxArray | number) => MxArray>;
    for (const op of BINARY) check(op, fns[op](a, b));
    for (const op of COMPARE) {
      const r = fns[op](a, A.data[5]);
      expect(r.dtype).toBe("bool");
      check(op, r, { atol: 0, rtol: 0 });
    }
    check("divide", mx.divide(a, p));
    check("power", mx.power(p, b), { rtol: 2e-5 });
    check("remainder", mx.remainder(a, p));
    check("floorDivide", mx.floorDivide(a, p));
    check("add-scalar", mx.add(a, 2.5));
    check("subtract-scalar-left", mx.subtract(1.5, a));
    // A JS number does not promote the array's dtype (MLX's weak scalars).
    const half = mx.astype(a, "bfloat16");
    const shifted = mx.add(half, 2.5);
    expect(shifted.dtype).toBe("bfloat16");
    mx.dispose([half, shifted]);
  });

  it("reductions, softmax, logsumexp, cumsum", () => {
    const a = mk(A);
    check("sum-all", mx.sum(a));
    check("sum-02-keep", mx.sum(a, [0, 2], true));
    check("mean-1", mx.mean(a, 1));
    check("max-last", mx.max(a, -1));
    check("min-0", mx.min(a, 0));
    check("prod-2", mx.prod(mk(P), 2));
    check("logsumexp-last", mx.logsumexp(a, -1));
    check("argmax-1", mx.argmax(a, 1), { atol: 0 });
    check("argmin-last", mx.argmin(a, -1), { atol: 0 });
    check("softmax-last", mx.softmax(a, -1));
    check("cumsum-2", mx.cumsum(a, 2));
  });

  it("matmul, plain and batched", () => {
    const a = mk(A);
    check("matmul", mx.matmul(a, mk(M45)));
    check("matmul-batched", mx.matmul(a, mk(BATCH)));
  });

  it("shape ops: reshape, transpose, expandDims, squeeze, flatten, broadcastTo, concatenate, split", () => {
    const a = mk(A);
    const flat = Array.from(A.data);
    const r = mx.reshape(a, [4, -1]);
    expect(r.shape).toEqual([4, 6]);
    expectClose(values(r), flat, { atol: 0, rtol: 0 });
    check("transpose", mx.transpose(a, [2, 0, 1]));
    const e = mx.expandDims(a, [0, 3]);
    expect(e.shape).toEqual([1, 2, 3, 1, 4]);
    const s = mx.squeeze(e);
    expect(s.shape).toEqual([2, 3, 4]);
    expect(mx.squeeze(e, 0).shape).toEqual([2, 3, 1, 4]);
    expect(mx.flatten(a, 1).shape).toEqual([2, 12]);
    const bt = mx.broadcastTo(mk({ shape: [1, 4], data: [1, 2, 3, 4] }), [3, 4]);
    expect(values(bt)).toEqual([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
    check("concatenate", mx.concatenate([a, mk(P)], 1));
    const parts = mx.split(a, 3, 1);
    const want = expected["split-3"] as OracleTensor[];
    expect(parts.length).toBe(3);
    for (const [i, part] of parts.entries()) {
      expectClose(values(part), want[i].data, { atol: 0, rtol: 0, label: `split ${i}` });
    }
    const cuts = mx.split(a, [1, 3], 2);
    const wantCuts = expected["split-idx"] as OracleTensor[];
    expect(cuts.map((c) => c.shape)).toEqual(wantCuts.map((c) => c.shape));
    for (const [i, c] of cuts.entries()) expectClose(values(c), wantCuts[i].data, { atol: 0, rtol: 0 });
    mx.dispose([r, e, s, bt, parts, cuts]);
  });

  it("slice and sliceUpdate (negative starts, strides, partial specs)", () => {
    const a = mk(A);
    check("slice", mx.slice(a, [1, 0, -3], [2, 3, 4], [1, 2, 1]), { atol: 0 });
    check(
      "sliceUpdate",
      mx.sliceUpdate(a, mk({ shape: [2, 1, 2], data: [9, 8, 7, 6] }), [0, 1, 1], [2, 2, 3]),
      { atol: 0 },
    );
    // Leading-axes form: the other axes are taken whole.
    const lead = mx.slice(a, [1], [2]);
    expect(lead.shape).toEqual([1, 3, 4]);
    expectClose(values(lead), Array.from(A.data).slice(12), { atol: 0, rtol: 0 });
    lead.dispose();
  });

  it("take (embedding lookup), takeAlongAxis, where, repeat", () => {
    check("take", mx.take(mk(TABLE), mk(IDS), 0), { atol: 0 });
    check("takeAlongAxis", mx.takeAlongAxis(mk(A), mk(ALONG), 2), { atol: 0 });
    check("where", mx.where(mk(COND, "bool"), mk(A), mk(B)), { atol: 0 });
    check("repeat", mx.repeat(mk(A), 2, 1), { atol: 0 });
    const w = mx.where(mk(COND, "bool"), mk(B), 0);
    expect(values(w)).toEqual(Array.from(COND.data, (c, i) => (c ? B.data[i] : 0)));
    w.dispose();
  });

  it("topk, argpartition, argsort, sort", () => {
    const a = mk(A);
    const desc = (expected.topk as OracleTensor).data;
    const top = mx.topk(a, 2, -1);
    expect(top.shape).toEqual([2, 3, 2]);
    const topVals = values(top);
    for (let row = 0; row < 6; row++) {
      const got = topVals.slice(row * 2, row * 2 + 2).sort((x, y) => y - x);
      expectClose(got, desc.slice(row * 4, row * 4 + 2), { atol: 0, rtol: 0, label: `topk row ${row}` });
    }
    // argpartition(kth=1): element 1 is the 2nd smallest, everything before is <= it, after >= it.
    const part = values(mx.argpartition(a, 1, -1));
    for (let row = 0; row < 6; row++) {
      const rowVals = Array.from(A.data.slice(row * 4, row * 4 + 4));
      const idx = part.slice(row * 4, row * 4 + 4);
      expect([...idx].sort()).toEqual([0, 1, 2, 3]);
      const kth = rowVals[idx[1]];
      expect(kth).toBe([...rowVals].sort((x, y) => x - y)[1]);
      expect(rowVals[idx[0]]).toBeLessThanOrEqual(kth);
      for (const j of idx.slice(2)) expect(rowVals[j]).toBeGreaterThanOrEqual(kth);
    }
    const order = values(mx.argsort(a, -1));
    const sorted = values(mx.sort(a, -1));
    for (let row = 0; row < 6; row++) {
      const rowVals = Array.from(A.data.slice(row * 4, row * 4 + 4));
      const asc = [...rowVals].sort((x, y) => x - y);
      expect(sorted.slice(row * 4, row * 4 + 4)).toEqual(asc);
      expect(order.slice(row * 4, row * 4 + 4).map((j) => rowVals[j])).toEqual(asc);
    }
  });

  it("astype rounds to bfloat16/float16 bit patterns", () => {
    const a = mk({ shape: [5], data: Float32Array.from([1, -2, 0.5, 3.140625, 65504]) });
    expect(Array.from(mx.astype(a, "float16").toTypedArray() as Uint16Array)).toEqual([
      0x3c00, 0xc000, 0x3800, 0x4248, 0x7bff,
    ]);
    const r = mk({ shape: [3], data: Float32Array.from([1.00390625, 1.01171875, -3.0]) });
    // 1 + 2^-8 is a tie and rounds to even (1.0); 1 + 3·2^-8 rounds up to 1 + 2^-6.
    expect(Array.from(mx.astype(r, "bf16").toTypedArray() as Uint16Array)).toEqual([0x3f80, 0x3f82, 0xc040]);
    expect(mx.astype(a, "int32").toTypedArray()).toEqual(Int32Array.from([1, -2, 0, 3, 65504]));
  });

  it("conv1d: depthwise (groups = channels) and strided/padded/dilated", () => {
    check("conv1d-depthwise", mx.conv1d(mk(DW_X), mk(DW_W), { groups: 6 }));
    check("conv1d-strided", mx.conv1d(mk(CV_X), mk(CV_W), { stride: 2, padding: 1, dilation: 2 }));
  });

  it("fast.rms_norm with and without weight", () => {
    check("rmsNorm", mx.rmsNorm(mk(NORM_X), mk(NORM_W), 1e-6));
    check("rmsNorm-noweight", mx.rmsNorm(mk(NORM_X), null, 1e-5));
  });

  it("fast.rope: partial half-split and traditional, offsets and scale", () => {
    const x = mk(ROPE_X);
    check("rope-half", mx.rope(x, { dims: 8, base: 10000, offset: 3 }));
    check("rope-trad", mx.rope(x, { dims: 16, traditional: true, base: 1e6, scale: 0.5 }));
    // The offset may also be an array (a position held on the device).
    const pos = mx.array(new Int32Array([3]), [], "int32");
    check("rope-half", mx.rope(x, { dims: 8, base: 10000, offset: pos }));
    pos.dispose();
  });

  it("fast.scaled_dot_product_attention: GQA, causal, boolean and additive masks", () => {
    const [q, k, v] = [mk(Q), mk(K), mk(V)];
    check("sdpa-none", mx.scaledDotProductAttention(q, k, v, { scale: SCALE }));
    check("sdpa-causal", mx.scaledDotProductAttention(q, k, v, { scale: SCALE, mask: "causal" }));
    check("sdpa-bool", mx.scaledDotProductAttention(q, k, v, { scale: SCALE, mask: mk(BOOL_MASK, "bool") }));
    check("sdpa-additive", mx.scaledDotProductAttention(q, k, v, { scale: SCALE, mask: mk(ADD_MASK) }));
  });

  it("remaining ops, checked by hand: layerNorm, stack, logical ops, contiguous, random", () => {
    const x = mk({ shape: [2, 4], data: [1, 2, 3, 4, -1, 0, 1, 6] });
    // layer_norm: (x - mean) / sqrt(var + eps) * w + b per row.
    const w = mk({ shape: [4], data: [1, 2, 1, 0.5] });
    const b = mk({ shape: [4], data: [0, 1, 0, -1] });
    const want: number[] = [];
    for (const row of [
      [1, 2, 3, 4],
      [-1, 0, 1, 6],
    ]) {
      const m = row.reduce((s, v) => s + v, 0) / 4;
      const sd = Math.sqrt(row.reduce((s, v) => s + (v - m) ** 2, 0) / 4 + 1e-5);
      row.forEach((v, j) => {
        want.push(((v - m) / sd) * [1, 2, 1, 0.5][j] + [0, 1, 0, -1][j]);
      });
    }
    const ln = mx.layerNorm(x, w, b, 1e-5);
    expectClose(values(ln), want, { atol: 1e-5, label: "layerNorm" });
    const st = mx.stack([x, x], 1);
    expect(st.shape).toEqual([2, 2, 4]);
    expect(values(st)).toEqual([1, 2, 3, 4, 1, 2, 3, 4, -1, 0, 1, 6, -1, 0, 1, 6]);
    const pos = mx.greater(x, 0);
    const small = mx.less(x, 3);
    expect(values(mx.logicalAnd(pos, small))).toEqual([1, 1, 0, 0, 0, 0, 1, 0]);
    expect(values(mx.logicalOr(pos, small))).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(values(mx.logicalNot(pos))).toEqual([0, 0, 0, 0, 1, 1, 0, 0]);
    const t = mx.contiguous(mx.transpose(x));
    expect(values(t)).toEqual([1, -1, 2, 0, 3, 1, 4, 6]);
    // random: seeded draws repeat; uniform stays in range; categorical follows the logits.
    mx.randomSeed(42);
    const u1 = values(mx.randomUniform([64], { low: -2, high: 3 }));
    mx.randomSeed(42);
    const u2 = values(mx.randomUniform([64], { low: -2, high: 3 }));
    expect(u1).toEqual(u2);
    expect(Math.min(...u1)).toBeGreaterThanOrEqual(-2);
    expect(Math.max(...u1)).toBeLessThan(3);
    const logits = mk({ shape: [2, 3], data: [0, 0, 30, 30, 0, 0] });
    expect(values(mx.randomCategorical(logits))).toEqual([2, 0]);
    const draws = mx.randomCategorical(logits, { numSamples: 5 });
    expect(draws.shape).toEqual([2, 5]);
    const n = values(mx.randomNormal([4000], { loc: 1, scale: 2 }));
    const mean = n.reduce((s, v) => s + v, 0) / n.length;
    expect(Math.abs(mean - 1)).toBeLessThan(0.15);
  });

  it("gatherMm picks a matrix per row (MoE experts)", () => {
    check(
      "gatherMm",
      mx.gatherMm(mk(GA), mk(GB), { lhsIndices: mk(LHS, "uint32"), rhsIndices: mk(RHS, "uint32") }),
    );
  });
});

describeMlx("quantization vs numpy and vs fp32", () => {
  afterAll(() => mx.dispose(live));

  for (const bits of [4, 8]) {
    it(`${bits}-bit affine, group 64: dequantize, quantizedMatmul, error bounds`, () => {
      const w = mk(W_Q);
      const x = mk(X_Q);
      const { wq, scales, biases } = mx.quantize(w, { groupSize: 64, bits });
      expect(wq.dtype).toBe("uint32");
      expect(wq.shape).toEqual([16, (128 * bits) / 32]);
      expect(scales.shape).toEqual([16, 2]);
      const qmm = mx.quantizedMatmul(x, wq, scales, biases!, { groupSize: 64, bits });
      const deq = mx.dequantize(wq, scales, biases!, { groupSize: 64, bits });
      const raw = {
        wq: { shape: wq.shape, data: values(wq) },
        scales: { shape: scales.shape, data: values(scales) },
      };
      const oracle = runOracle([
        {
          id: "deq",
          op: "dequantize",
          inputs: { ...raw, biases: { shape: biases!.shape, data: values(biases!) } },
          params: { group: 64, bits },
        },
        {
          id: "qmm",
          op: "quantizedMatmul",
          inputs: { ...raw, biases: { shape: biases!.shape, data: values(biases!) }, x: X_Q },
          params: { group: 64, bits },
        },
        {
          id: "fp32",
          op: "matmul",
          inputs: { a: X_Q, b: { shape: [128, 16], data: transpose2d(W_Q.data, 16, 128) } },
        },
      ]) as Record<string, OracleTensor>;
      // MLX's dequantize and packing agree with an independent unpacking of its wq/scales/biases.
      expectClose(values(deq), oracle.deq.data, { atol: 1e-6, rtol: 1e-6, label: "dequantize" });
      expectClose(values(qmm), oracle.qmm.data, { atol: 1e-4, rtol: 1e-4, label: "quantizedMatmul" });

      // Each weight rounds to the nearest point of its group's grid biases + scales·q, q in [0, 2^bits − 1]
      // (values outside the grid clamp to its ends), and lies within 1.5 steps of (max − min) / (2^bits − 1):
      // MLX nudges the scale so that the group's largest-magnitude value is exact.
      const wHat = oracle.deq.data;
      const levels = 2 ** bits - 1;
      const sc = values(scales);
      const bi = values(biases!);
      const absErr = new Float64Array(16 * 128);
      for (let row = 0; row < 16; row++) {
        for (let g = 0; g < 2; g++) {
          const group = Array.from(W_Q.data.slice(row * 128 + g * 64, row * 128 + g * 64 + 64));
          const step = (Math.max(...group) - Math.min(...group)) / levels;
          const s = sc[row * 2 + g];
          const b = bi[row * 2 + g];
          const [lo, hi] = [Math.min(b, b + levels * s), Math.max(b, b + levels * s)];
          for (let j = 0; j < 64; j++) {
            const i = row * 128 + g * 64 + j;
            const w = W_Q.data[i];
            absErr[i] = Math.abs(w - wHat[i]);
            expect(absErr[i]).toBeLessThanOrEqual(Math.abs(s) / 2 + Math.max(0, lo - w, w - hi) + 1e-6);
            expect(absErr[i]).toBeLessThanOrEqual(1.5 * step);
          }
        }
      }
      // Against fp32 x @ wᵀ: |Σ x·(w − ŵ)| ≤ Σ |x|·|w − ŵ| for every output, and a small relative error.
      const got = values(qmm);
      let errSq = 0;
      let refSq = 0;
      for (let r = 0; r < 3; r++) {
        for (let c = 0; c < 16; c++) {
          let bound = 0;
          for (let k = 0; k < 128; k++) bound += Math.abs(X_Q.data[r * 128 + k]) * absErr[c * 128 + k];
          const ref = oracle.fp32.data[r * 16 + c];
          const err = got[r * 16 + c] - ref;
          expect(Math.abs(err)).toBeLessThanOrEqual(bound + 1e-4);
          errSq += err * err;
          refSq += ref * ref;
        }
      }
      const relative = Math.sqrt(errSq / refSq);
      expect(relative).toBeLessThan(bits === 4 ? 0.1 : 0.01);
      mx.dispose([wq, scales, biases, qmm, deq]);
    });
  }

  it("gatherQmm over quantized experts", () => {
    const gw = mk(GW);
    const { wq, scales, biases } = mx.quantize(gw, { groupSize: 64, bits: 4 });
    const out = mx.gatherQmm(mk(GX), wq, scales, biases!, {
      lhsIndices: mk(LHS, "uint32"),
      rhsIndices: mk(RHS, "uint32"),
      groupSize: 64,
      bits: 4,
    });
    const oracle = runOracle([
      {
        id: "g",
        op: "gatherQmm",
        inputs: {
          x: GX,
          wq: { shape: wq.shape, data: values(wq) },
          scales: { shape: scales.shape, data: values(scales) },
          biases: { shape: biases!.shape, data: values(biases!) },
          lhs: LHS,
          rhs: RHS,
        },
        params: { group: 64, bits: 4 },
      },
    ]) as Record<string, OracleTensor>;
    expect(out.shape).toEqual(oracle.g.shape);
    expectClose(values(out), oracle.g.data, { atol: 1e-4, rtol: 1e-4, label: "gatherQmm" });
    expect(numel(out.shape)).toBe(4 * 8);
    mx.dispose([wq, scales, biases, out]);
  });
});

function transpose2d(data: ArrayLike<number>, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
  return out;
}
