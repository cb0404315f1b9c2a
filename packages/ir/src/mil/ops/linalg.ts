/**
 * linear, matmul and conv.
 * Sources: coremltools ops/defs/iOS15/linear.py + iOS17/linear.py (weight/bias in domain U;
 * matmul's const/non-const dtype rule), iOS15/conv.py + iOS17/conv.py, defs/_utils.py
 * (spatial_dimensions_out_shape, aggregated_pad).
 */
import { gemmNT } from "../kernels/gemm.js";
import type { PackedWeight } from "../kernels/packed.js";
import type { TensorType } from "../program.js";
import { broadcastShapes, shapeStr, stridesOf } from "../shape.js";
import type { RtTensor } from "../values.js";
import { allocF32, allocRt, freeF32, numelOf } from "../values.js";
import { BOOL, FP, FP_I32, I32, lit, STR, tt } from "./common.js";
import type { OpArgs, OpDef } from "./opdef.js";

// ---------------------------------------------------------------------------------------------
// linear

/** Scalar reference for int32 (and any non-float) operands. */
function linearGeneric(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number>,
  o: Int32Array | Float32Array,
  M: number,
  N: number,
  K: number,
): void {
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let acc = b[n];
      for (let k = 0; k < K; k++) acc += x[m * K + k] * w[n * K + k];
      o[m * N + n] = acc;
    }
  }
}

const linear: OpDef = {
  type: "linear",
  version: "iOS17",
  available: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "weight", dtype: "U", const: true },
    {
      name: "bias",
      dtype: "U",
      const: true,
      optional: true,
      // coremltools: zeros [Dout] in the weight's dtype
      default: (a) => lit.zeros(a.type("weight").dtype, [a.type("weight").shape[0] ?? 0]),
    },
  ],
  domains: { T: FP_I32, U: FP_I32 },
  infer(a) {
    const x = a.type("x");
    const w = a.type("weight");
    const r = x.shape.length;
    if (r < 1 || r > 3) a.fail("x", `must have rank 1..3, got ${shapeStr(x.shape)}`);
    const din = x.shape[r - 1];
    if (w.shape.length !== 2 || w.shape[1] !== din)
      a.fail("weight", `must be [Dout, ${din}], got ${shapeStr(w.shape)}`);
    const b = a.typeOpt("bias");
    if (b && (b.shape.length !== 1 || b.shape[0] !== w.shape[0])) {
      a.fail("bias", `must be [${w.shape[0]}], got ${shapeStr(b.shape)}`);
    }
    return [tt(x.dtype, [...x.shape.slice(0, -1), w.shape[0]])];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const w = a.value("weight");
    const [N, K] = w.type.shape;
    const M = numelOf(x.type.shape) / K;
    const o = allocRt(out[0]);
    const bias = a.has("bias") ? (a.value("bias").data as Float32Array) : undefined;
    const wf = w.packed ?? (w.data instanceof Float32Array ? w.data : undefined);
    if (o instanceof Float32Array && x.data instanceof Float32Array && wf) {
      gemmNT(x.data, wf, o, M, N, K, {
        constWeight: a.info("weight").isConst,
        bias: bias && !isZero(bias, a.info("bias").isConst) ? bias : undefined,
      });
    } else {
      const b = bias ?? new Float32Array(N);
      linearGeneric(
        x.data as Int32Array,
        w.data as Int32Array,
        b as ArrayLike<number>,
        o as Int32Array,
        M,
        N,
        K,
      );
    }
    return [{ type: out[0], data: o }];
  },
};

/** Zero biases, by constant (a computed bias's buffer may be reused with other values). */
const zeroChecked = new WeakMap<Float32Array, boolean>();
function isZero(b: Float32Array, isConst: boolean): boolean {
  if (!isConst) return b.every((v) => v === 0);
  let z = zeroChecked.get(b);
  if (z === undefined) {
    z = b.every((v) => v === 0);
    zeroChecked.set(b, z);
  }
  return z;
}

// ---------------------------------------------------------------------------------------------
// matmul

interface MatmulPlan {
  batch: number[];
  xBatch: number[];
  yBatch: number[];
  M: number;
  N: number;
  K: number;
  out: number[];
}

function matmulPlan(a: OpArgs): MatmulPlan {
  const xs = [...a.type("x").shape];
  const ys = [...a.type("y").shape];
  const tx = a.bool("transpose_x");
  const ty = a.bool("transpose_y");
  if (xs.length === 0) a.fail("x", "must have rank >= 1");
  // coremltools indexes y's second-last dim and, for 1-D x, drops the first result dim, so
  // 1-D y and (1-D x with batched y) have no well-defined MIL type: reshape to 2-D first
  if (ys.length < 2) a.fail("y", `must have rank >= 2, got ${shapeStr(ys)}`);
  if (xs.length === 1 && ys.length > 2)
    a.fail("x", `is 1-D, so y must be 2-D, got ${shapeStr(ys)} (reshape x to [1, K])`);
  if (xs.length === 1 && tx) a.fail("transpose_x", "must be false when x is 1-D");
  const x2 = xs.length === 1 ? [1, xs[0]] : xs;
  const y2 = ys;
  const xr = x2.length;
  const yr = y2.length;
  const M = tx ? x2[xr - 1] : x2[xr - 2];
  const Kx = tx ? x2[xr - 2] : x2[xr - 1];
  const Ky = ty ? y2[yr - 1] : y2[yr - 2];
  const N = ty ? y2[yr - 2] : y2[yr - 1];
  if (Kx !== Ky) {
    a.fail(
      "y",
      `inner dimension ${Ky} does not match x's ${Kx} (x ${shapeStr(xs)}, y ${shapeStr(ys)}, transpose_x=${tx}, transpose_y=${ty})`,
    );
  }
  const xBatch = x2.slice(0, -2);
  const yBatch = y2.slice(0, -2);
  const batch = broadcastShapes(xBatch, yBatch);
  if (!batch) a.fail("y", `batch dims ${shapeStr(yBatch)} do not broadcast with x's ${shapeStr(xBatch)}`);
  const out = [...batch];
  if (xs.length > 1) out.push(M);
  out.push(N);
  return { batch, xBatch, yBatch, M, N, K: Kx, out };
}

function transpose2d(src: Float32Array, off: number, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = src[off + r * cols + c];
  return t;
}

/** Offsets of each broadcast batch index into a source with batch shape `src`. */
function batchOffsets(batch: readonly number[], src: readonly number[], matSize: number): number[] {
  const n = numelOf(batch);
  const full = [...new Array<number>(batch.length - src.length).fill(1), ...src];
  const strides = stridesOf(full).map((s, i) => (full[i] === 1 ? 0 : s * matSize));
  const offs = new Array<number>(n);
  const idx = new Array<number>(batch.length).fill(0);
  for (let i = 0; i < n; i++) {
    let o = 0;
    for (let d = 0; d < batch.length; d++) o += idx[d] * strides[d];
    offs[i] = o;
    for (let d = batch.length - 1; d >= 0; d--) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

const matmul: OpDef = {
  type: "matmul",
  version: "iOS17",
  available: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "y", dtype: "U" },
    { name: "transpose_x", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
    { name: "transpose_y", dtype: BOOL, const: true, optional: true, default: () => lit.bool(false) },
  ],
  domains: { T: FP_I32, U: FP_I32 },
  infer(a) {
    const xd = a.type("x").dtype;
    const yd = a.type("y").dtype;
    const xc = a.info("x").isConst;
    const yc = a.info("y").isConst;
    // iOS17: both const or both non-const -> same dtype; otherwise the non-const side decides
    if (xc === yc && xd !== yd)
      a.fail("y", `must have x's dtype ${xd} when both are ${xc ? "const" : "non-const"}, got ${yd}`);
    const p = matmulPlan(a);
    return [tt(xc && !yc ? yd : xd, p.out)];
  },
  evaluate(a, out) {
    const p = matmulPlan(a);
    const x = a.value("x");
    const y = a.value("y");
    const tx = a.bool("transpose_x");
    const ty = a.bool("transpose_y");
    const { M, N, K } = p;
    const o = allocRt(out[0]) as Float32Array;
    const xd = toF32(x.data);
    // a packed y [N, K] (transpose_y) is already in NT form
    const yPacked = ty && p.yBatch.length === 0 ? y.packed : undefined;
    const yd = yPacked ? undefined : toF32(y.data);
    const xOffs = batchOffsets(p.batch, p.xBatch, M * K);
    const yOffs = batchOffsets(p.batch, p.yBatch, K * N);
    const yConst = a.info("y").isConst;
    const tmp = new Float32Array(M * N);
    for (let b = 0; b < xOffs.length; b++) {
      const xm = tx ? transpose2d(xd, xOffs[b], K, M) : xd.subarray(xOffs[b], xOffs[b] + M * K);
      // NT form needs y as [N, K]
      const ym = !yd
        ? (yPacked as PackedWeight)
        : ty
          ? yd.subarray(yOffs[b], yOffs[b] + N * K)
          : transposeCached(yd, yOffs[b], K, N, yConst);
      gemmNT(xm, ym, tmp, M, N, K, { constWeight: yConst });
      o.set(tmp, b * M * N);
    }
    if (out[0].dtype === "int32") return [{ type: out[0], data: Int32Array.from(o, Math.round) }];
    return [{ type: out[0], data: o }];
  },
};

function toF32(d: unknown): Float32Array {
  return d instanceof Float32Array ? d : Float32Array.from(d as ArrayLike<number>);
}

const transposedConsts = new WeakMap<Float32Array, Map<number, Float32Array>>();
function transposeCached(
  src: Float32Array,
  off: number,
  rows: number,
  cols: number,
  isConst: boolean,
): Float32Array {
  if (!isConst) return transpose2d(src, off, rows, cols);
  let m = transposedConsts.get(src);
  if (!m) {
    m = new Map();
    transposedConsts.set(src, m);
  }
  let t = m.get(off);
  if (!t) {
    t = transpose2d(src, off, rows, cols);
    m.set(off, t);
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// conv

const PAD_TYPES = ["valid", "same", "same_lower", "custom"];

interface ConvPlan {
  S: number;
  strides: number[];
  dilations: number[];
  padBefore: number[];
  out: number[];
  groups: number;
}

function convPlan(a: OpArgs): ConvPlan {
  const x = a.type("x");
  const w = a.type("weight");
  const r = x.shape.length;
  if (r < 3 || r > 5)
    a.fail("x", `must be [N, C_in, *spatial] with 1..3 spatial dims, got ${shapeStr(x.shape)}`);
  const S = r - 2;
  if (w.shape.length !== r)
    a.fail("weight", `must be [C_out, C_in/groups, ${S} kernel dims], got ${shapeStr(w.shape)}`);
  const groups = a.int("groups");
  const cin = x.shape[1];
  const cout = w.shape[0];
  if (groups < 1 || cin % groups !== 0) a.fail("groups", `(${groups}) must divide C_in (${cin})`);
  if (cout % groups !== 0) a.fail("groups", `(${groups}) must divide C_out (${cout})`);
  if (w.shape[1] !== cin / groups) {
    a.fail(
      "weight",
      `must be [${cout}, ${cin / groups}, ...] (C_in/groups = ${cin}/${groups}), got ${shapeStr(w.shape)}`,
    );
  }
  const b = a.typeOpt("bias");
  if (b && (b.shape.length !== 1 || b.shape[0] !== cout))
    a.fail("bias", `must be [${cout}], got ${shapeStr(b.shape)}`);
  const strides = a.ints("strides");
  const dilations = a.ints("dilations");
  if (strides.length !== S || strides.some((s) => s < 1))
    a.fail("strides", `must be ${S} positive values, got [${strides.join(", ")}]`);
  if (dilations.length !== S || dilations.some((s) => s < 1)) {
    a.fail("dilations", `must be ${S} positive values, got [${dilations.join(", ")}]`);
  }
  const padType = a.str("pad_type");
  if (!PAD_TYPES.includes(padType))
    a.fail("pad_type", `must be one of ${PAD_TYPES.join(", ")}, got "${padType}"`);
  const pad = a.ints("pad");
  if (padType === "custom" && pad.length !== 2 * S)
    a.fail("pad", `must have ${2 * S} values for pad_type custom, got [${pad.join(", ")}]`);
  const padBefore: number[] = [];
  const out = [x.shape[0], cout];
  for (let d = 0; d < S; d++) {
    const i = x.shape[2 + d];
    const k = (w.shape[2 + d] - 1) * dilations[d] + 1;
    const s = strides[d];
    let before = 0;
    let total = 0;
    if (padType === "custom") {
      before = pad[2 * d];
      total = pad[2 * d] + pad[2 * d + 1];
    } else if (padType === "same" || padType === "same_lower") {
      total = Math.max(0, s * Math.ceil(i / s) - i + k - s);
      before = padType === "same" ? Math.floor(total / 2) : Math.ceil(total / 2);
    }
    const o = Math.floor((i + total - k) / s + 1);
    if (o <= 0)
      a.fail(
        "x",
        `spatial dim ${d} (${i}) gives output size ${o} with kernel ${k}, stride ${s}, padding ${total}`,
      );
    padBefore.push(before);
    out.push(o);
  }
  return { S, strides, dilations, padBefore, out, groups };
}

/** Plans by op (an op's constant inputs do not change between runs). */
const convPlans = new WeakMap<OpArgs, ConvPlan>();

function evalConv(a: OpArgs, outType: TensorType): RtTensor {
  let p = convPlans.get(a);
  if (!p) {
    p = convPlan(a);
    convPlans.set(a, p);
  }
  const x = a.value("x");
  const w = a.value("weight");
  const xd = x.data as Float32Array;
  const bias = a.has("bias") ? (a.value("bias").data as Float32Array) : undefined;
  // view every conv as 3-D: missing leading spatial dims are size 1
  const lift = (s: readonly number[], fill: number) => [...new Array<number>(3 - s.length).fill(fill), ...s];
  const [N, Cin] = x.type.shape;
  const Cout = w.type.shape[0];
  const [ID, IH, IW] = lift(x.type.shape.slice(2), 1);
  const [KD, KH, KW] = lift(w.type.shape.slice(2), 1);
  const [OD, OH, OW] = lift(p.out.slice(2), 1);
  const [sd, sh, sw] = lift(p.strides, 1);
  const [dd, dh, dw] = lift(p.dilations, 1);
  const [pd, ph, pw] = lift(p.padBefore, 0);
  const G = p.groups;
  const cig = Cin / G;
  const cog = Cout / G;
  const o = allocF32(numelOf(outType.shape));
  const inPlane = ID * IH * IW;
  const outPlane = OD * OH * OW;
  const kPlane = KD * KH * KW;
  // pointwise (1x1, stride 1, no padding): one matrix product per image
  if (kPlane === 1 && G === 1 && sd * sh * sw === 1 && pd + ph + pw === 0) {
    const xt = allocF32(inPlane * Cin, false);
    const tmp = allocF32(inPlane * Cout, false);
    for (let n = 0; n < N; n++) {
      const base = n * Cin * inPlane;
      for (let c = 0; c < Cin; c++)
        for (let s = 0; s < inPlane; s++) xt[s * Cin + c] = xd[base + c * inPlane + s];
      gemmNT(xt, w.packed ?? (w.data as Float32Array), tmp, inPlane, Cout, Cin, {
        constWeight: a.info("weight").isConst,
      });
      const ob = n * Cout * outPlane;
      for (let s = 0; s < inPlane; s++)
        for (let c = 0; c < Cout; c++) o[ob + c * outPlane + s] = tmp[s * Cout + c] + (bias ? bias[c] : 0);
    }
    freeF32(xt);
    freeF32(tmp);
    return { type: outType, data: o };
  }
  const wd = w.data as Float32Array;
  for (let n = 0; n < N; n++) {
    for (let co = 0; co < Cout; co++) {
      const g = Math.floor(co / cog);
      const b0 = bias ? bias[co] : 0;
      for (let od = 0; od < OD; od++) {
        for (let oh = 0; oh < OH; oh++) {
          for (let ow = 0; ow < OW; ow++) {
            let acc = b0;
            for (let ci = 0; ci < cig; ci++) {
              const xBase = (n * Cin + g * cig + ci) * inPlane;
              const wBase = (co * cig + ci) * kPlane;
              for (let kd = 0; kd < KD; kd++) {
                const id = od * sd - pd + kd * dd;
                if (id < 0 || id >= ID) continue;
                for (let kh = 0; kh < KH; kh++) {
                  const ih = oh * sh - ph + kh * dh;
                  if (ih < 0 || ih >= IH) continue;
                  const rowX = xBase + (id * IH + ih) * IW;
                  const rowW = wBase + (kd * KH + kh) * KW;
                  for (let kw = 0; kw < KW; kw++) {
                    const iw = ow * sw - pw + kw * dw;
                    if (iw < 0 || iw >= IW) continue;
                    acc += xd[rowX + iw] * wd[rowW + kw];
                  }
                }
              }
            }
            o[((n * Cout + co) * OD + od) * OH * OW + oh * OW + ow] = acc;
          }
        }
      }
    }
  }
  return { type: outType, data: o };
}

const conv: OpDef = {
  type: "conv",
  version: "iOS17",
  available: "iOS15",
  params: [
    { name: "x", dtype: "T" },
    { name: "weight", dtype: "U" },
    { name: "bias", dtype: "U", optional: true },
    { name: "strides", dtype: I32, const: true, optional: true, default: (a) => lit.i32s(spatialOnes(a)) },
    {
      name: "pad_type",
      dtype: STR,
      const: true,
      optional: true,
      values: PAD_TYPES,
      default: () => lit.str("valid"),
    },
    {
      name: "pad",
      dtype: I32,
      const: true,
      optional: true,
      default: (a) => lit.i32s([...spatialOnes(a), ...spatialOnes(a)].map(() => 0)),
    },
    { name: "dilations", dtype: I32, const: true, optional: true, default: (a) => lit.i32s(spatialOnes(a)) },
    { name: "groups", dtype: I32, const: true, optional: true, default: () => lit.i32(1) },
  ],
  domains: { T: FP, U: FP },
  infer(a) {
    return [tt(a.type("x").dtype, convPlan(a).out)];
  },
  evaluate: (a, out) => [evalConv(a, out[0])],
};

function spatialOnes(a: OpArgs): number[] {
  return new Array<number>(Math.max(0, a.type("x").shape.length - 2)).fill(1);
}

export const LINALG_OPS: readonly OpDef[] = [linear, matmul, conv];
