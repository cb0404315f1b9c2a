/**
 * Tensor transformations: reshape, transpose, expand_dims, squeeze, concat, split,
 * slice_by_index, slice_update, gather, gather_along_axis, fill, topk, band_part, tile.
 * Sources: coremltools ops/defs/iOS15/tensor_operation.py, tensor_transformation.py,
 * iOS17/tensor_transformation.py, iOS17/scatter_gather.py, iOS17/tensor_operation.py (topk),
 * iOS18/tensor_transformation.py (slice_update), defs/_utils.py (solve_slice_by_index_shape).
 */
import type { MilDType, TensorType } from "../program.js";
import { aroundAxis, copyRun, normAxis, permute, shapeStr, stridesOf } from "../shape.js";
import type { RtData, RtTensor } from "../values.js";
import { allocRt, numelOf } from "../values.js";
import {
  ANY17,
  axesArg,
  axisArg,
  BOOL,
  FP_I32_BOOL,
  GATHER_I,
  GATHER_T,
  I32,
  IDX17,
  lit,
  STR,
  tt,
} from "./common.js";
import type { OpArgs, OpDef, ParamDef } from "./opdef.js";

type Num = Float32Array | Int32Array | Uint8Array;

function like(d: RtData, n: number): Num {
  return new (d.constructor as { new (n: number): Num })(n);
}

// ---------------------------------------------------------------------------------------------
// reshape, transpose, expand_dims, squeeze

function reshapeShape(a: OpArgs): number[] {
  const x = a.type("x");
  const st = a.type("shape");
  if (st.shape.length !== 1) a.fail("shape", `must be 1-D, got ${shapeStr(st.shape)}`);
  const v = a.info("shape").value();
  if (!v)
    a.fail("shape", "must be known when the op is built (a runtime shape makes the output shape dynamic)");
  const to = Array.from(v.data as Int32Array);
  // 0 copies the input dim, right-aligned (coremltools replace_zeros_in_shape)
  for (let i = 0; i < to.length; i++) {
    if (to[i] === 0) {
      const j = x.shape.length - (to.length - i);
      to[i] = j >= 0 ? x.shape[j] : 1;
    }
  }
  const neg = to.filter((d) => d === -1).length;
  if (neg > 1)
    a.fail("shape", `may hold at most one -1, got [${Array.from(v.data as Int32Array).join(", ")}]`);
  const n = numelOf(x.shape);
  if (neg === 1) {
    const rest = to.reduce((p, d) => (d === -1 ? p : p * d), 1);
    if (rest === 0 || n % rest !== 0)
      a.fail("shape", `[${to.join(", ")}] cannot hold ${n} elements of x ${shapeStr(x.shape)}`);
    to[to.indexOf(-1)] = n / rest;
  }
  if (to.some((d) => d < 0) || numelOf(to) !== n) {
    a.fail(
      "shape",
      `[${Array.from(v.data as Int32Array).join(", ")}] does not match the ${n} elements of x ${shapeStr(x.shape)}`,
    );
  }
  return to;
}

const reshape: OpDef = {
  type: "reshape",
  version: "iOS17",
  available: "iOS15",
  view: true,
  params: [
    { name: "x", dtype: "T" },
    { name: "shape", dtype: "U" },
  ],
  domains: { T: ANY17, U: IDX17 },
  infer: (a) => [tt(a.type("x").dtype, reshapeShape(a))],
  evaluate: (a, out) => [{ type: out[0], data: a.value("x").data }],
};

function permArg(a: OpArgs, rank: number): number[] {
  const perm = a.ints("perm");
  const ok =
    perm.length === rank &&
    [...perm]
      .map((p) => normAxis(p, rank))
      .sort()
      .every((p, i) => p === i);
  if (!ok) a.fail("perm", `must be a permutation of 0..${rank - 1}, got [${perm.join(", ")}]`);
  return perm.map((p) => normAxis(p, rank) as number);
}

const transpose: OpDef = {
  type: "transpose",
  version: "iOS17",
  available: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "perm", dtype: I32, const: true },
  ],
  domains: { T: ANY17 },
  infer(a) {
    const x = a.type("x");
    const perm = permArg(a, x.shape.length);
    return [
      tt(
        x.dtype,
        perm.map((p) => x.shape[p]),
      ),
    ];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const perm = permArg(a, x.type.shape.length);
    return [{ type: out[0], data: permute(x.data as Num, x.type.shape, perm) }];
  },
};

const expandDims: OpDef = {
  type: "expand_dims",
  version: "iOS17",
  available: "iOS15",
  view: true,
  params: [
    { name: "x", dtype: "T" },
    { name: "axes", dtype: I32, const: true },
  ],
  domains: { T: ANY17 },
  infer(a) {
    const x = a.type("x");
    const outRank = x.shape.length + a.ints("axes").length;
    const axes = axesArg(a, "axes", outRank).sort((p, q) => p - q);
    const shape = [...x.shape];
    for (const ax of axes) shape.splice(ax, 0, 1);
    return [tt(x.dtype, shape)];
  },
  evaluate: (a, out) => [{ type: out[0], data: a.value("x").data }],
};

const squeeze: OpDef = {
  type: "squeeze",
  version: "iOS17",
  available: "iOS15",
  view: true,
  params: [
    { name: "x", dtype: "T" },
    { name: "axes", dtype: I32, const: true, optional: true }, // None: every size-1 dim
  ],
  domains: { T: ANY17 },
  infer(a) {
    const x = a.type("x");
    const axes = a.has("axes") ? axesArg(a, "axes", x.shape.length) : undefined;
    // like coremltools: only size-1 dims are removed; listed dims of another size stay
    return [
      tt(
        x.dtype,
        x.shape.filter((d, i) => !(d === 1 && (axes === undefined || axes.includes(i)))),
      ),
    ];
  },
  evaluate: (a, out) => [{ type: out[0], data: a.value("x").data }],
};

// ---------------------------------------------------------------------------------------------
// concat, split

const concat: OpDef = {
  type: "concat",
  version: "iOS15",
  params: [
    { name: "values", variadic: true },
    { name: "axis", dtype: I32, const: true },
    { name: "interleave", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
  ],
  infer(a) {
    const vs = a.types("values");
    if (vs.length === 0) a.fail("values", "must hold at least one tensor");
    const first = vs[0];
    const rank = first.shape.length;
    const axis = rank === 0 ? 0 : axisArg(a, "axis", rank);
    const inter = a.bool("interleave");
    let len = 0;
    vs.forEach((v, i) => {
      if (v.dtype !== first.dtype)
        a.fail("values", `must share one dtype: values[0] is ${first.dtype}, values[${i}] is ${v.dtype}`);
      if (v.shape.length !== rank)
        a.fail(
          "values",
          `must share one rank: values[0] is ${shapeStr(first.shape)}, values[${i}] is ${shapeStr(v.shape)}`,
        );
      v.shape.forEach((d, j) => {
        if ((j !== axis || inter) && d !== first.shape[j]) {
          a.fail(
            "values",
            `values[${i}] ${shapeStr(v.shape)} does not match values[0] ${shapeStr(first.shape)} off axis ${axis}${inter ? " (interleave needs equal shapes)" : ""}`,
          );
        }
      });
      len += rank === 0 ? 1 : v.shape[axis];
    });
    const shape = rank === 0 ? [len] : first.shape.map((d, j) => (j === axis ? len : d));
    return [tt(first.dtype, shape)];
  },
  evaluate(a, out) {
    const vs = a.values("values");
    const t = out[0];
    const rank = vs[0].type.shape.length;
    const axis = rank === 0 ? 0 : axisArg(a, "axis", rank);
    const o = allocRt(t) as Num;
    const [outer, total, inner] = aroundAxis(t.shape, axis);
    if (a.bool("interleave")) {
      const size = rank === 0 ? 1 : vs[0].type.shape[axis];
      const nv = vs.length;
      vs.forEach((v, j) => {
        const d = v.data as Num;
        for (let p = 0; p < outer; p++)
          for (let i = 0; i < size; i++) {
            copyRun(d, (p * size + i) * inner, o, (p * total + i * nv + j) * inner, inner);
          }
      });
    } else {
      let at = 0;
      for (const v of vs) {
        const size = rank === 0 ? 1 : v.type.shape[axis];
        const d = v.data as Num;
        const block = size * inner;
        for (let p = 0; p < outer; p++) copyRun(d, p * block, o, (p * total + at) * inner, block);
        at += size;
      }
    }
    return [{ type: t, data: o }];
  },
};

function splitSizes(a: OpArgs): number[] {
  const x = a.type("x");
  const axis = axisArg(a, "axis", x.shape.length);
  const dim = x.shape[axis];
  if (a.has("split_sizes")) {
    const sizes = a.ints("split_sizes");
    if (a.has("num_splits") && a.int("num_splits") !== sizes.length) {
      a.fail("num_splits", `(${a.int("num_splits")}) must equal the number of split_sizes (${sizes.length})`);
    }
    if (sizes.some((s) => s < 0) || sizes.reduce((p, s) => p + s, 0) !== dim) {
      a.fail(
        "split_sizes",
        `[${sizes.join(", ")}] must be non-negative and sum to x's axis ${axis} size ${dim}`,
      );
    }
    return sizes;
  }
  if (!a.has("num_splits")) a.fail("num_splits", "or split_sizes must be given");
  const n = a.int("num_splits");
  if (n < 1 || dim % n !== 0) a.fail("num_splits", `(${n}) must divide x's axis ${axis} size ${dim}`);
  return new Array<number>(n).fill(dim / n);
}

const split: OpDef = {
  type: "split",
  version: "iOS15",
  outputs: "many",
  doc: "Outputs are named `<name>_0`, `<name>_1`, ...",
  params: [
    { name: "x", dtype: "T" },
    { name: "num_splits", dtype: I32, const: true, optional: true },
    { name: "split_sizes", dtype: I32, const: true, optional: true },
    { name: "axis", dtype: I32, const: true },
  ],
  domains: { T: FP_I32_BOOL },
  infer(a) {
    const x = a.type("x");
    const axis = axisArg(a, "axis", x.shape.length);
    return splitSizes(a).map((s) =>
      tt(
        x.dtype,
        x.shape.map((d, i) => (i === axis ? s : d)),
      ),
    );
  },
  evaluate(a, out) {
    const x = a.value("x");
    const axis = axisArg(a, "axis", x.type.shape.length);
    const [outer, total, inner] = aroundAxis(x.type.shape, axis);
    const d = x.data as Num;
    let at = 0;
    return out.map((t) => {
      const size = t.shape[axis];
      const o = allocRt(t) as Num;
      const block = size * inner;
      for (let p = 0; p < outer; p++) copyRun(d, (p * total + at) * inner, o, p * block, block);
      at += size;
      return { type: t, data: o };
    });
  },
};

// ---------------------------------------------------------------------------------------------
// slice_by_index, slice_update

interface DimSlice {
  start: number;
  step: number;
  count: number;
  squeeze: boolean;
}

/** Python/numpy slice semantics per dim (masks select the full range). */
function sliceDims(
  shape: readonly number[],
  begin: readonly number[],
  end: readonly number[],
  stride: readonly number[],
  bm: readonly boolean[],
  em: readonly boolean[],
  sq: readonly boolean[],
): DimSlice[] {
  return shape.map((dim, d) => {
    const step = stride[d];
    let start: number;
    let stop: number;
    if (step > 0) {
      start = bm[d] ? 0 : begin[d] < 0 ? begin[d] + dim : begin[d];
      stop = em[d] ? dim : end[d] < 0 ? end[d] + dim : end[d];
      start = Math.min(Math.max(start, 0), dim);
      stop = Math.min(Math.max(stop, 0), dim);
    } else {
      start = bm[d] ? dim - 1 : begin[d] < 0 ? begin[d] + dim : begin[d];
      stop = em[d] ? -1 : end[d] < 0 ? end[d] + dim : end[d];
      start = Math.min(Math.max(start, -1), dim - 1);
      stop = Math.min(Math.max(stop, -1), dim - 1);
    }
    const count =
      step > 0
        ? Math.max(0, Math.ceil((stop - start) / step))
        : Math.max(0, Math.ceil((start - stop) / -step));
    if (sq[d]) {
      // squeeze takes the single element at begin
      const s = begin[d] < 0 ? begin[d] + dim : begin[d];
      return { start: s, step: 1, count: 1, squeeze: true };
    }
    return { start, step, count, squeeze: false };
  });
}

interface SliceParams {
  rank: number;
  stride: number[];
  bm: boolean[];
  em: boolean[];
  sq: boolean[];
}

function sliceParams(a: OpArgs, x: TensorType): SliceParams {
  const rank = x.shape.length;
  const vec = (p: string, fill: boolean): boolean[] => {
    if (!a.has(p)) return new Array<boolean>(rank).fill(fill);
    const v = a.bools(p);
    if (v.length !== rank) a.fail(p, `must have ${rank} entries (x's rank), got ${v.length}`);
    return v;
  };
  let stride = new Array<number>(rank).fill(1);
  if (a.has("stride")) {
    stride = a.ints("stride");
    if (stride.length !== rank || stride.includes(0))
      a.fail("stride", `must be ${rank} non-zero values, got [${stride.join(", ")}]`);
  }
  for (const p of ["begin", "end"]) {
    const t = a.type(p);
    if (t.shape.length !== 1 || t.shape[0] !== rank)
      a.fail(p, `must be [${rank}] (x's rank), got ${shapeStr(t.shape)}`);
  }
  return {
    rank,
    stride,
    bm: vec("begin_mask", false),
    em: vec("end_mask", false),
    sq: vec("squeeze_mask", false),
  };
}

/** The slice's shape (squeezed dims dropped); `undefined` entries are not known statically. */
function sliceShape(a: OpArgs, x: TensorType, forUpdate: boolean): (number | undefined)[] {
  const p = sliceParams(a, x);
  const bv = a.info("begin").value();
  const ev = a.info("end").value();
  if (bv && ev) {
    const dims = sliceDims(x.shape, ints(bv), ints(ev), p.stride, p.bm, p.em, p.sq);
    dims.forEach((d, i) => {
      if (d.squeeze && (d.start < 0 || d.start >= x.shape[i]))
        a.fail("begin", `[${i}] = ${ints(bv)[i]} is out of range for squeezed dim of size ${x.shape[i]}`);
    });
    return dims.filter((d) => !d.squeeze).map((d) => d.count);
  }
  // runtime begin/end: only dims fixed by masks or of size 1 are static (as coremltools infers)
  const out: (number | undefined)[] = [];
  for (let d = 0; d < p.rank; d++) {
    if (p.sq[d]) continue;
    if (p.bm[d] && p.em[d]) out.push(Math.ceil(x.shape[d] / Math.abs(p.stride[d])));
    else if (x.shape[d] === 1) out.push(1);
    else out.push(undefined);
  }
  if (!forUpdate && out.some((d) => d === undefined)) {
    a.fail(
      "begin",
      `and end are runtime values, so output dims ${out
        .map((d, i) => (d === undefined ? i : -1))
        .filter((i) => i >= 0)
        .join(", ")} would be dynamic; use masks, slice_update or gather`,
    );
  }
  return out;
}

function ints(t: RtTensor): number[] {
  return Array.from(t.data as Int32Array);
}

/** Visits the flat source offsets of a slice in row-major order of the slice. */
function sliceOffsets(shape: readonly number[], dims: readonly DimSlice[]): Int32Array {
  const strides = stridesOf(shape);
  const n = dims.reduce((p, d) => p * d.count, 1);
  const offs = new Int32Array(n);
  if (n === 0) return offs;
  const rank = dims.length;
  const idx = new Array<number>(rank).fill(0);
  let base = dims.reduce((p, d, i) => p + d.start * strides[i], 0);
  for (let i = 0; i < n; i++) {
    offs[i] = base;
    for (let d = rank - 1; d >= 0; d--) {
      idx[d]++;
      base += dims[d].step * strides[d];
      if (idx[d] < dims[d].count) break;
      base -= dims[d].step * strides[d] * dims[d].count;
      idx[d] = 0;
    }
  }
  return offs;
}

function runtimeDims(a: OpArgs, x: RtTensor): DimSlice[] {
  const p = sliceParams(a, x.type);
  const b = ints(a.value("begin"));
  const e = ints(a.value("end"));
  const dims = sliceDims(x.type.shape, b, e, p.stride, p.bm, p.em, p.sq);
  dims.forEach((d, i) => {
    if (d.squeeze && (d.start < 0 || d.start >= x.type.shape[i]))
      a.fail("begin", `[${i}] = ${b[i]} is out of range for dim of size ${x.type.shape[i]}`);
  });
  return dims;
}

/** What slice_by_index and slice_update select: begin/end (with an optional stride) and the masks. */
const SLICE_BOUNDS: readonly ParamDef[] = [
  { name: "begin", dtype: "U" },
  { name: "end", dtype: "U" },
  { name: "stride", dtype: "U", const: true, optional: true },
  { name: "begin_mask", dtype: BOOL, const: true, optional: true },
  { name: "end_mask", dtype: BOOL, const: true, optional: true },
  { name: "squeeze_mask", dtype: BOOL, const: true, optional: true },
];

const sliceByIndex: OpDef = {
  type: "slice_by_index",
  version: "iOS17",
  available: "iOS15",
  params: [{ name: "x", dtype: "T" }, ...SLICE_BOUNDS],
  domains: { T: ANY17, U: IDX17 },
  infer: (a) => [tt(a.type("x").dtype, sliceShape(a, a.type("x"), false) as number[])],
  evaluate(a, out) {
    const x = a.value("x");
    const dims = runtimeDims(a, x);
    const got = dims.filter((d) => !d.squeeze).map((d) => d.count);
    if (shapeStr(got) !== shapeStr(out[0].shape))
      a.fail("begin", `selects ${shapeStr(got)} at run time, declared ${shapeStr(out[0].shape)}`);
    const offs = sliceOffsets(x.type.shape, dims);
    const src = x.data as Num;
    const o = allocRt(out[0]) as Num;
    for (let i = 0; i < offs.length; i++) o[i] = src[offs[i]];
    return [{ type: out[0], data: o }];
  },
};

const sliceUpdate: OpDef = {
  type: "slice_update",
  version: "iOS18",
  params: [{ name: "x", dtype: "T" }, { name: "update", dtype: "T" }, ...SLICE_BOUNDS],
  domains: { T: ANY17, U: IDX17 },
  infer(a) {
    const x = a.type("x");
    const u = a.type("update");
    if (u.shape.length === 0)
      a.fail("update", "must not be rank 0 (Core ML's slice_update does not take scalar updates)");
    const want = sliceShape(a, x, true);
    const fits = want.length === u.shape.length && want.every((d, i) => d === undefined || d === u.shape[i]);
    if (!fits)
      a.fail(
        "update",
        `must have the slice's shape [${want.map((d) => d ?? "?").join(", ")}], got ${shapeStr(u.shape)}`,
      );
    return [x];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const u = a.value("update");
    const dims = runtimeDims(a, x);
    const got = dims.filter((d) => !d.squeeze).map((d) => d.count);
    if (shapeStr(got) !== shapeStr(u.type.shape)) {
      a.fail(
        "update",
        `${shapeStr(u.type.shape)} does not fit the slice ${shapeStr(got)} selected by begin [${ints(a.value("begin")).join(", ")}] / end [${ints(a.value("end")).join(", ")}]`,
      );
    }
    const o = (x.data as Num).slice();
    const offs = sliceOffsets(x.type.shape, dims);
    const ud = u.data as Num;
    for (let i = 0; i < offs.length; i++) o[offs[i]] = ud[i];
    return [{ type: out[0], data: o }];
  },
};

// ---------------------------------------------------------------------------------------------
// gather, gather_along_axis

function checkIndex(a: OpArgs, v: number, dim: number): number {
  const i = v < 0 ? v + dim : v;
  if (i < 0 || i >= dim) a.fail("indices", `value ${v} is out of range for a dim of size ${dim}`);
  return i;
}

/** gather's and gather_along_axis's inputs: x, the indices, a const axis, `extra`, validate_indices. */
function gatherParams(...extra: ParamDef[]): ParamDef[] {
  return [
    { name: "x", dtype: "T" },
    { name: "indices", dtype: "I" },
    { name: "axis", dtype: I32, const: true, optional: true, default: () => lit.i32(0) },
    ...extra,
    { name: "validate_indices", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
  ];
}

const gather: OpDef = {
  type: "gather",
  version: "iOS17",
  available: "iOS15",
  params: gatherParams({
    name: "batch_dims",
    dtype: I32,
    const: true,
    optional: true,
    default: () => lit.i32(0),
  }),
  domains: { T: GATHER_T, I: GATHER_I },
  infer(a) {
    const x = a.type("x");
    const idx = a.type("indices");
    const axis = axisArg(a, "axis", x.shape.length);
    const bd = a.int("batch_dims");
    if (bd < 0 || bd >= x.shape.length || bd > idx.shape.length || bd > axis) {
      a.fail("batch_dims", `(${bd}) must be in [0, min(axis ${axis}, indices rank ${idx.shape.length})]`);
    }
    for (let d = 0; d < bd; d++) {
      if (x.shape[d] !== idx.shape[d])
        a.fail("indices", `batch dim ${d} is ${idx.shape[d]}, x's is ${x.shape[d]}`);
    }
    if (a.bool("validate_indices")) {
      const v = a.info("indices").value();
      if (v) for (const i of v.data as Int32Array) checkIndex(a, i, x.shape[axis]);
    }
    return [tt(x.dtype, [...x.shape.slice(0, axis), ...idx.shape.slice(bd), ...x.shape.slice(axis + 1)])];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const idx = a.value("indices");
    const xs = x.type.shape;
    const axis = axisArg(a, "axis", xs.length);
    const bd = a.int("batch_dims");
    const batch = numelOf(xs.slice(0, bd));
    const mid = numelOf(xs.slice(bd, axis));
    const A = xs[axis];
    const inner = numelOf(xs.slice(axis + 1));
    const I = numelOf(idx.type.shape.slice(bd));
    const id = idx.data as Int32Array;
    const o = allocRt(out[0]) as Num;
    if (x.rows && axis === 0 && o instanceof Float32Array) {
      // a large table (e.g. the embedding) read by row: only the rows asked for
      for (let i = 0; i < I; i++) x.rows.readRows(checkIndex(a, id[i], A), 1, o, i * inner);
      return [{ type: out[0], data: o }];
    }
    const src = x.data as Num;
    for (let b = 0; b < batch; b++) {
      for (let m = 0; m < mid; m++) {
        const row = b * mid + m;
        for (let i = 0; i < I; i++) {
          const k = checkIndex(a, id[b * I + i], A);
          copyRun(src, (row * A + k) * inner, o, (row * I + i) * inner, inner);
        }
      }
    }
    return [{ type: out[0], data: o }];
  },
};

const gatherAlongAxis: OpDef = {
  type: "gather_along_axis",
  version: "iOS17",
  available: "iOS15",
  params: gatherParams(),
  domains: { T: GATHER_T, I: GATHER_I },
  infer(a) {
    const x = a.type("x");
    const idx = a.type("indices");
    const axis = axisArg(a, "axis", x.shape.length);
    if (idx.shape.length !== x.shape.length)
      a.fail("indices", `must have x's rank ${x.shape.length}, got ${shapeStr(idx.shape)}`);
    idx.shape.forEach((d, i) => {
      if (i !== axis && d !== x.shape[i])
        a.fail("indices", `${shapeStr(idx.shape)} must match x ${shapeStr(x.shape)} off axis ${axis}`);
    });
    return [tt(x.dtype, idx.shape)];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const idx = a.value("indices");
    const axis = axisArg(a, "axis", x.type.shape.length);
    const [outer, A, inner] = aroundAxis(x.type.shape, axis);
    const L = idx.type.shape[axis];
    const id = idx.data as Int32Array;
    const src = x.data as Num;
    const o = allocRt(out[0]) as Num;
    for (let p = 0; p < outer; p++)
      for (let l = 0; l < L; l++)
        for (let q = 0; q < inner; q++) {
          const at = (p * L + l) * inner + q;
          o[at] = src[(p * A + checkIndex(a, id[at], A)) * inner + q];
        }
    return [{ type: out[0], data: o }];
  },
};

// ---------------------------------------------------------------------------------------------
// fill, topk, band_part, tile

const fill: OpDef = {
  type: "fill",
  version: "iOS15",
  params: [
    { name: "shape", dtype: I32 },
    // coremltools' default 0.0 is an fp32 const, so the default output is fp32
    { name: "value", dtype: "T", const: true, optional: true, default: () => lit.fp("fp32", 0) },
  ],
  domains: { T: FP_I32_BOOL },
  infer(a) {
    const st = a.type("shape");
    if (st.shape.length !== 1) a.fail("shape", `must be 1-D, got ${shapeStr(st.shape)}`);
    const v = a.info("shape").value();
    if (!v)
      return a.fail(
        "shape",
        "must be known when the op is built (a runtime shape makes the output shape dynamic)",
      );
    const shape = ints(v);
    if (shape.some((d) => d < 0)) a.fail("shape", `must be non-negative, got [${shape.join(", ")}]`);
    const val = a.type("value");
    if (val.shape.length !== 0) a.fail("value", `must be a scalar, got ${shapeStr(val.shape)}`);
    return [tt(val.dtype, shape)];
  },
  evaluate(a, out) {
    const o = allocRt(out[0]) as Num;
    o.fill((a.value("value").data as Num)[0]);
    return [{ type: out[0], data: o }];
  },
};

const topk: OpDef = {
  type: "topk",
  version: "iOS17",
  available: "iOS15",
  outputs: "many",
  doc: "[values, indices] (indices only with returnIndices, the default).",
  params: [
    { name: "x", dtype: "T" },
    { name: "k", dtype: "K", const: true, optional: true, default: () => lit.i32(1) },
    { name: "axis", dtype: I32, const: true, optional: true, default: () => lit.i32(-1) },
    { name: "ascending", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
    { name: "sort", dtype: BOOL, const: true, optional: true, default: () => lit.bool(true) },
    { name: "return_indices", dtype: BOOL, const: true, optional: true, default: () => lit.bool(true) },
    {
      name: "output_indices_dtype",
      dtype: STR,
      const: true,
      optional: true,
      values: ["int32", "uint16"],
      // only with return_indices (coremltools iOS17 topk.default_inputs)
      default: (a) => (a.has("return_indices") && !a.bool("return_indices") ? undefined : lit.str("int32")),
    },
  ],
  domains: { T: ["fp16", "fp32", "int8", "int16", "int32", "uint8", "uint16"], K: IDX17 },
  infer(a) {
    const x = a.type("x");
    const axis = axisArg(a, "axis", x.shape.length);
    const k = a.int("k");
    if (k < 1 || k > x.shape[axis])
      a.fail("k", `(${k}) must be in [1, ${x.shape[axis]}] (x's axis ${axis} size)`);
    const shape = x.shape.map((d, i) => (i === axis ? k : d));
    if (!a.bool("return_indices")) {
      if (a.has("output_indices_dtype"))
        a.fail("output_indices_dtype", "can only be set when return_indices is true");
      return [tt(x.dtype, shape)];
    }
    const d = a.str("output_indices_dtype") as MilDType;
    if (d !== "int32" && d !== "uint16")
      a.fail("output_indices_dtype", `must be "int32" or "uint16", got "${d}"`);
    return [tt(x.dtype, shape), tt(d, shape)];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const xd = x.data as Num;
    const axis = axisArg(a, "axis", x.type.shape.length);
    const [outer, size, inner] = aroundAxis(x.type.shape, axis);
    const k = a.int("k");
    const asc = a.bool("ascending");
    const vals = allocRt(out[0]) as Num;
    const idxs = out[1] ? (allocRt(out[1]) as Int32Array) : undefined;
    const order = new Array<number>(size);
    for (let p = 0; p < outer; p++) {
      for (let q = 0; q < inner; q++) {
        const base = p * size * inner + q;
        for (let i = 0; i < size; i++) order[i] = i;
        // ties keep the lower index first
        order.sort((i, j) => {
          const d = xd[base + i * inner] - xd[base + j * inner];
          return (asc ? d : -d) || i - j;
        });
        for (let i = 0; i < k; i++) {
          const at = (p * k + i) * inner + q;
          vals[at] = xd[base + order[i] * inner];
          if (idxs) idxs[at] = order[i];
        }
      }
    }
    return idxs && out[1]
      ? [
          { type: out[0], data: vals },
          { type: out[1], data: idxs },
        ]
      : [{ type: out[0], data: vals }];
  },
};

const bandPart: OpDef = {
  type: "band_part",
  version: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "lower", dtype: I32, const: true, optional: true, default: () => lit.i32(-1) },
    { name: "upper", dtype: I32, const: true, optional: true, default: () => lit.i32(-1) },
  ],
  domains: { T: FP_I32_BOOL },
  infer(a) {
    const x = a.type("x");
    if (x.shape.length < 2) a.fail("x", `must have rank >= 2, got ${shapeStr(x.shape)}`);
    return [x];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const s = x.type.shape;
    const M = s[s.length - 2];
    const N = s[s.length - 1];
    const lower = a.int("lower");
    const upper = a.int("upper");
    const o = (x.data as Num).slice();
    for (let b = 0; b < o.length / (M * N); b++)
      for (let m = 0; m < M; m++)
        for (let n = 0; n < N; n++) {
          const keep = (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper);
          if (!keep) o[(b * M + m) * N + n] = 0;
        }
    return [{ type: out[0], data: o }];
  },
};

const tile: OpDef = {
  type: "tile",
  version: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "reps", dtype: I32 },
  ],
  domains: { T: FP_I32_BOOL },
  infer(a) {
    const x = a.type("x");
    const v = a.info("reps").value();
    if (!v) return a.fail("reps", "must be known when the op is built");
    const reps = ints(v);
    if (reps.length !== x.shape.length || reps.some((r) => r < 1)) {
      a.fail("reps", `must be ${x.shape.length} positive values (x's rank), got [${reps.join(", ")}]`);
    }
    return [
      tt(
        x.dtype,
        x.shape.map((d, i) => d * reps[i]),
      ),
    ];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const xs = x.type.shape;
    const os = out[0].shape;
    const xStr = stridesOf(xs);
    const src = x.data as Num;
    const o = like(x.data, numelOf(os));
    const idx = new Array<number>(os.length).fill(0);
    for (let i = 0; i < o.length; i++) {
      let s = 0;
      for (let d = 0; d < os.length; d++) s += (idx[d] % xs[d]) * xStr[d];
      o[i] = src[s];
      for (let d = os.length - 1; d >= 0; d--) {
        if (++idx[d] < os[d]) break;
        idx[d] = 0;
      }
    }
    return [{ type: out[0], data: o }];
  },
};

export const TENSOR_OPS: readonly OpDef[] = [
  reshape,
  transpose,
  expandDims,
  squeeze,
  concat,
  split,
  sliceByIndex,
  sliceUpdate,
  gather,
  gatherAlongAxis,
  fill,
  topk,
  bandPart,
  tile,
];
