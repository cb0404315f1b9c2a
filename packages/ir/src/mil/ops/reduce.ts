/**
 * Reductions, softmax, layer_norm and cumsum.
 * Sources: coremltools ops/defs/iOS15/reduction.py (ReductionAxes: axes None = all, keep_dims
 * false), iOS17/reduction.py (reduce_argmax output_dtype), iOS15/activation.py (softmax),
 * iOS15/normalization.py + iOS17/normalization.py (layer_norm), iOS15/tensor_operation.py (cumsum).
 */

import { simdHeap } from "../kernels/simd.js";
import type { MilDType, TensorType } from "../program.js";
import { aroundAxis, permute, shapeStr } from "../shape.js";
import type { RtTensor } from "../values.js";
import { allocRt, numelOf } from "../values.js";
import { axesArg, axisArg, BOOL, FP, FP_I32, I32, lit, STR, tt } from "./common.js";
import type { OpArgs, OpDef } from "./opdef.js";

type Num = Float32Array | Int32Array;

/** x permuted so that `axes` (sorted) come last: returns the data and the reduced block size. */
function reducedLast(
  x: RtTensor,
  axes: readonly number[],
): { data: Num; outer: number; size: number; perm: number[] } {
  const rank = x.type.shape.length;
  const sorted = [...axes].sort((p, q) => p - q);
  const keep = [...Array(rank).keys()].filter((d) => !sorted.includes(d));
  const perm = [...keep, ...sorted];
  const size = sorted.reduce((n, d) => n * x.type.shape[d], 1);
  const outer = size === 0 ? 0 : numelOf(x.type.shape) / size;
  const trailing = sorted.every((d, i) => d === rank - sorted.length + i);
  const data = trailing ? (x.data as Num) : permute(x.data as Num, x.type.shape, perm);
  return { data, outer, size, perm };
}

function reducedShape(shape: readonly number[], axes: readonly number[], keep: boolean): number[] {
  return keep ? shape.map((d, i) => (axes.includes(i) ? 1 : d)) : shape.filter((_, i) => !axes.includes(i));
}

// ---------------------------------------------------------------------------------------------
// reduce_*

const REDUCERS = [
  "reduce_sum",
  "reduce_mean",
  "reduce_max",
  "reduce_min",
  "reduce_prod",
  "reduce_sum_square",
] as const;

function reduceAxes(a: OpArgs): number[] {
  const rank = a.type("x").shape.length;
  return a.has("axes") ? axesArg(a, "axes", rank) : [...Array(rank).keys()];
}

function reduceDef(type: (typeof REDUCERS)[number]): OpDef {
  return {
    type,
    version: "iOS15",
    params: [
      { name: "x", dtype: "T" },
      { name: "axes", dtype: I32, const: true, optional: true }, // None: all axes
      { name: "keep_dims", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
    ],
    domains: { T: FP_I32 },
    infer(a) {
      const x = a.type("x");
      return [tt(x.dtype, reducedShape(x.shape, reduceAxes(a), a.bool("keep_dims")))];
    },
    evaluate(a, out) {
      const x = a.value("x");
      const o = allocRt(out[0], false) as Num; // every element is written
      reduceInto(type, x, reduceAxes(a), o);
      return [{ type: out[0], data: o }];
    },
  };
}

type Reducer = (typeof REDUCERS)[number];

function initial(type: Reducer): number {
  return type === "reduce_prod"
    ? 1
    : type === "reduce_max"
      ? Number.NEGATIVE_INFINITY
      : type === "reduce_min"
        ? Number.POSITIVE_INFINITY
        : 0;
}

/**
 * Reduces x over `axes` into o. Consecutive axes reduce in place as (outer, R, inner) blocks —
 * rows when inner = 1, else whole inner rows accumulated at once; other axis sets are first
 * permuted to the end.
 */
function reduceInto(type: Reducer, x: RtTensor, axes: readonly number[], o: Num): void {
  const shape = x.type.shape;
  const sorted = [...axes].sort((p, q) => p - q);
  const consecutive = sorted.every((d, i) => i === 0 || d === sorted[i - 1] + 1);
  let data = x.data as Num;
  let outer: number;
  let R: number;
  let inner = 1;
  if (sorted.length === 0) {
    o.set(data);
    return;
  }
  if (consecutive) {
    const first = sorted[0];
    const last = sorted[sorted.length - 1];
    outer = numelOf(shape.slice(0, first));
    R = numelOf(shape.slice(first, last + 1));
    inner = numelOf(shape.slice(last + 1));
  } else {
    const r = reducedLast(x, axes);
    data = r.data;
    outer = r.outer;
    R = r.size;
  }
  if (type === "reduce_sum" && data instanceof Float32Array && o instanceof Float32Array) {
    // both in the SIMD heap: the same float64 sums by a kernel
    const h = simdHeap();
    const xo = h?.offsetOf(data);
    const oo = h?.offsetOf(o);
    if (h && xo !== undefined && oo !== undefined) {
      h.sumAxis(xo, oo, outer, R, inner);
      return;
    }
  }
  const init = initial(type);
  const acc = new Float64Array(inner);
  for (let p = 0; p < outer; p++) {
    acc.fill(init);
    for (let r = 0; r < R; r++) {
      const b = (p * R + r) * inner;
      switch (type) {
        case "reduce_sum":
        case "reduce_mean":
          for (let i = 0; i < inner; i++) acc[i] += data[b + i];
          break;
        case "reduce_sum_square":
          for (let i = 0; i < inner; i++) acc[i] += data[b + i] * data[b + i];
          break;
        case "reduce_prod":
          for (let i = 0; i < inner; i++) acc[i] *= data[b + i];
          break;
        case "reduce_max":
          for (let i = 0; i < inner; i++)
            if (data[b + i] > acc[i] || Number.isNaN(data[b + i])) acc[i] = data[b + i];
          break;
        default:
          for (let i = 0; i < inner; i++)
            if (data[b + i] < acc[i] || Number.isNaN(data[b + i])) acc[i] = data[b + i];
      }
    }
    const scale = type === "reduce_mean" ? 1 / R : 1;
    for (let i = 0; i < inner; i++) o[p * inner + i] = acc[i] * scale;
  }
}

// ---------------------------------------------------------------------------------------------
// reduce_argmax / reduce_argmin

function argDef(type: "reduce_argmax" | "reduce_argmin"): OpDef {
  const outDtypes: readonly MilDType[] = ["int32", "uint16"];
  return {
    type,
    version: "iOS17",
    available: "iOS15",
    params: [
      { name: "x", dtype: "T" },
      { name: "axis", dtype: I32, const: true, optional: true, default: () => lit.i32(-1) },
      { name: "keep_dims", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
      {
        name: "output_dtype",
        dtype: STR,
        const: true,
        optional: true,
        values: outDtypes,
        default: () => lit.str("int32"),
      },
    ],
    domains: { T: FP_I32 },
    infer(a) {
      const x = a.type("x");
      const axis = axisArg(a, "axis", x.shape.length);
      const d = a.str("output_dtype").toLowerCase() as MilDType;
      if (!outDtypes.includes(d)) a.fail("output_dtype", `must be "int32" or "uint16", got "${d}"`);
      return [tt(d, reducedShape(x.shape, [axis], a.bool("keep_dims")))];
    },
    evaluate(a, out) {
      const x = a.value("x");
      const xd = x.data as Num;
      const [outer, size, inner] = aroundAxis(x.type.shape, axisArg(a, "axis", x.type.shape.length));
      const o = allocRt(out[0]) as Int32Array;
      const max = type === "reduce_argmax";
      for (let p = 0; p < outer; p++) {
        for (let q = 0; q < inner; q++) {
          const base = p * size * inner + q;
          let best = xd[base];
          let bi = 0;
          for (let i = 1; i < size; i++) {
            const v = xd[base + i * inner];
            if (max ? v > best : v < best) {
              best = v;
              bi = i;
            }
          }
          o[p * inner + q] = bi; // ties: first index, as numpy
        }
      }
      return [{ type: out[0], data: o }];
    },
  };
}

// ---------------------------------------------------------------------------------------------
// softmax

/** x's type, once `axis` is checked against its rank (softmax, cumsum). */
function sameTypeAlongAxis(a: OpArgs): TensorType[] {
  const x = a.type("x");
  axisArg(a, "axis", x.shape.length);
  return [x];
}

const softmax: OpDef = {
  type: "softmax",
  version: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "axis", dtype: I32, const: true, optional: true, default: () => lit.i32(-1) },
  ],
  domains: { T: FP },
  infer: sameTypeAlongAxis,
  evaluate(a, out) {
    const x = a.value("x");
    return [
      {
        type: out[0],
        data: softmaxAlong(x.data as Float32Array, x.type.shape, axisArg(a, "axis", x.type.shape.length)),
      },
    ];
  },
};

/** Numerically stable softmax along `axis` (max subtracted, sums in float64). */
export function softmaxAlong(xd: Float32Array, shape: readonly number[], axis: number): Float32Array {
  const [outer, size, inner] = aroundAxis(shape, axis);
  const o = new Float32Array(xd.length);
  const e = new Float64Array(size);
  for (let p = 0; p < outer; p++) {
    for (let q = 0; q < inner; q++) {
      const base = p * size * inner + q;
      let m = Number.NEGATIVE_INFINITY;
      for (let i = 0; i < size; i++) if (xd[base + i * inner] > m) m = xd[base + i * inner];
      let s = 0;
      for (let i = 0; i < size; i++) {
        const v = Math.exp(xd[base + i * inner] - m);
        e[i] = v;
        s += v;
      }
      for (let i = 0; i < size; i++) o[base + i * inner] = e[i] / s;
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// layer_norm

function normalizedShape(x: TensorType, axes: readonly number[]): number[] {
  return x.shape.filter((_, i) => axes.includes(i));
}

const layerNorm: OpDef = {
  type: "layer_norm",
  version: "iOS17",
  available: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    // coremltools' default is range(rank); it cannot emit that default itself, so emit the list
    {
      name: "axes",
      dtype: I32,
      const: true,
      optional: true,
      default: (a) => lit.i32s([...Array(a.type("x").shape.length).keys()]),
    },
    { name: "gamma", dtype: "U", const: true, optional: true },
    { name: "beta", dtype: "U", const: true, optional: true },
    { name: "epsilon", dtype: "U", const: true, optional: true, default: () => lit.fp("fp32", 1e-5) },
  ],
  domains: { T: FP, U: FP },
  infer(a) {
    const x = a.type("x");
    const axes = axesArg(a, "axes", x.shape.length);
    const ns = normalizedShape(x, axes);
    for (const p of ["gamma", "beta"]) {
      const t = a.typeOpt(p);
      if (t && shapeStr(t.shape) !== shapeStr(ns))
        a.fail(p, `must be ${shapeStr(ns)} (x's normalized dims), got ${shapeStr(t.shape)}`);
    }
    return [x];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const axes = axesArg(a, "axes", x.type.shape.length);
    const eps = a.num("epsilon");
    const gamma = a.has("gamma") ? (a.value("gamma").data as Float32Array) : undefined;
    const beta = a.has("beta") ? (a.value("beta").data as Float32Array) : undefined;
    const { data, outer, size, perm } = reducedLast(x, axes);
    const o = new Float32Array(data.length);
    for (let r = 0; r < outer; r++) {
      const b = r * size;
      let mean = 0;
      for (let i = 0; i < size; i++) mean += data[b + i];
      mean /= size;
      let v = 0;
      for (let i = 0; i < size; i++) {
        const d = data[b + i] - mean;
        v += d * d;
      }
      const inv = 1 / Math.sqrt(v / size + eps);
      for (let i = 0; i < size; i++) {
        let y = (data[b + i] - mean) * inv;
        if (gamma) y *= gamma[i];
        if (beta) y += beta[i];
        o[b + i] = y;
      }
    }
    const identity = perm.every((p, i) => p === i);
    if (identity) return [{ type: out[0], data: o }];
    const permShape = perm.map((p) => x.type.shape[p]);
    const inv = perm.map((_, i) => perm.indexOf(i));
    return [{ type: out[0], data: permute(o, permShape, inv) }];
  },
};

// ---------------------------------------------------------------------------------------------
// cumsum

const cumsum: OpDef = {
  type: "cumsum",
  version: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "axis", dtype: I32, const: true, optional: true, default: () => lit.i32(0) },
    { name: "exclusive", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
    { name: "reverse", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
  ],
  domains: { T: FP_I32 },
  infer: sameTypeAlongAxis,
  evaluate(a, out) {
    const x = a.value("x");
    const xd = x.data as Num;
    const [outer, size, inner] = aroundAxis(x.type.shape, axisArg(a, "axis", x.type.shape.length));
    const excl = a.bool("exclusive");
    const rev = a.bool("reverse");
    const o = allocRt(out[0]) as Num;
    for (let p = 0; p < outer; p++) {
      for (let q = 0; q < inner; q++) {
        let acc = 0;
        for (let j = 0; j < size; j++) {
          const i = rev ? size - 1 - j : j;
          const idx = p * size * inner + i * inner + q;
          if (excl) {
            o[idx] = acc;
            acc += xd[idx];
          } else {
            acc += xd[idx];
            o[idx] = acc;
          }
        }
      }
    }
    return [{ type: out[0], data: o }];
  },
};

export const REDUCE_OPS: readonly OpDef[] = [
  ...REDUCERS.map(reduceDef),
  argDef("reduce_argmax"),
  argDef("reduce_argmin"),
  softmax,
  layerNorm,
  cumsum,
];
