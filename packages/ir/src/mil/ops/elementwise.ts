/**
 * Elementwise ops: binary arithmetic and comparisons with numpy broadcasting, unary math and
 * activations, cast, select, clip and identity.
 * Sources: coremltools ops/defs/iOS15/elementwise_binary.py, elementwise_unary.py, activation.py,
 * iOS17/elementwise_unary.py (rsqrt/log/inverse epsilon in domain U, cast dtypes).
 */
import { EW_OPS, type EwForm, type EwOp } from "../kernels/elementwise-kernels.js";
import { simdHeap } from "../kernels/simd.js";
import type { MilDType, TensorType } from "../program.js";
import { broadcastPlan, broadcastShapes, expandTo, sameShape, shapeStr } from "../shape.js";
import type { RtTensor } from "../values.js";
import { allocRt } from "../values.js";
import { ANY17, BOOL, FP, FP_I32, FP_I32_BOOL, lit, STR, tt } from "./common.js";
import type { OpArgs, OpDef } from "./opdef.js";

type Num = Float32Array | Int32Array | Uint8Array;

/** Operand arrays aligned to the output: same-shape operands step 1, size-1 operands step 0. */
function aligned(t: RtTensor, out: readonly number[]): [Num, number] {
  const d = t.data as Num;
  if (sameShape(t.type.shape, out)) return [d, 1];
  if (d.length === 1) return [d, 0];
  return [expandTo(d, t.type.shape, out), 1];
}

function broadcastOut(a: OpArgs, ...ps: string[]): number[] {
  let shape: number[] = [];
  for (const p of ps) {
    const s = a.type(p).shape;
    const b = broadcastShapes(shape, s);
    if (!b) a.fail(p, `shape ${shapeStr(s)} does not broadcast with ${shapeStr(shape)} (${ps.join(", ")})`);
    shape = b;
  }
  return shape;
}

// ---------------------------------------------------------------------------------------------
// Binary

const COMPARISONS = new Set(["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]);
const LOGICAL = new Set(["logical_and", "logical_or", "logical_xor"]);

function evalBinary(type: string, x: RtTensor, y: RtTensor, out: TensorType): RtTensor {
  const xd = x.data as Num;
  const yd = y.data as Num;
  const o = allocRt(out, false) as Num; // every element is written
  const n = o.length;
  if (n === 0) return { type: out, data: o };
  const { dims, strides } = broadcastPlan(out.shape, x.type.shape, y.type.shape);
  const [sx, sy] = strides;
  const rank = dims.length;
  const inner = dims[rank - 1];
  const ix = sx[rank - 1];
  const iy = sy[rank - 1];
  if (binarySimd(type, xd, yd, o, dims, sx, sy)) return { type: out, data: o };
  const isInt = x.data instanceof Int32Array;
  forEachBlock(dims, sx, sy, 1, (xb, yb, ob) => binaryRow(type, isInt, xd, xb, ix, yd, yb, iy, o, ob, inner));
  return { type: out, data: o };
}

/**
 * Calls visit(xb, yb, ob) for each block of the last `blockDims` plan dims: ob the block's output
 * offset (the output is contiguous in plan order), xb / yb the operands', moved by an odometer
 * over the dims before the block.
 */
function forEachBlock(
  dims: readonly number[],
  sx: readonly number[],
  sy: readonly number[],
  blockDims: number,
  visit: (xb: number, yb: number, ob: number) => void,
): void {
  const outer = Math.max(0, dims.length - blockDims);
  let block = 1;
  for (let d = outer; d < dims.length; d++) block *= dims[d];
  let total = block;
  for (let d = 0; d < outer; d++) total *= dims[d];
  const idx = new Array<number>(outer).fill(0);
  let xb = 0;
  let yb = 0;
  for (let ob = 0; ob < total; ob += block) {
    visit(xb, yb, ob);
    for (let d = outer - 1; d >= 0; d--) {
      xb += sx[d];
      yb += sy[d];
      if (++idx[d] < dims[d]) break;
      xb -= sx[d] * dims[d];
      yb -= sy[d] * dims[d];
      idx[d] = 0;
    }
  }
}

const SIMD_OPS: ReadonlySet<string> = new Set(EW_OPS);
/** Operands outside the SIMD heap up to this many values are copied in for the SIMD kernels. */
const SMALL_OPERAND = 8192;

/**
 * Float add/sub/mul/real_div whose operands and result all live in the SIMD heap (the
 * interpreter's pooled results and large constants do), innermost rows vector∘vector,
 * vector∘scalar or scalar∘vector: the last two plan dims per kernel call. false: not this case.
 */
function binarySimd(
  type: string,
  xd: Num,
  yd: Num,
  o: Num,
  dims: readonly number[],
  sx: readonly number[],
  sy: readonly number[],
): boolean {
  if (!SIMD_OPS.has(type) || !(o instanceof Float32Array)) return false;
  if (!(xd instanceof Float32Array && yd instanceof Float32Array)) return false;
  const h = simdHeap();
  const oo = h?.offsetOf(o);
  if (!h || oo === undefined) return false;
  let xo = h.offsetOf(xd);
  let yo = h.offsetOf(yd);
  if (xo === undefined || yo === undefined) {
    // a small operand (a per-head scalar, a bias) outside the heap: copied into its scratch
    const xn = xo === undefined ? xd.length : 0;
    const yn = yo === undefined ? yd.length : 0;
    if (xn + yn > SMALL_OPERAND) return false;
    const at = h.ewScratch.ensure(h, 4 * (xn + yn) + 64);
    if (at === undefined) return false;
    if (xn) h.view(at, xn).set(xd);
    if (yn) h.view(at + 4 * xn, yn).set(yd);
    xo ??= at;
    yo ??= at + 4 * xn;
  }
  const rank = dims.length;
  const ix = sx[rank - 1];
  const iy = sy[rank - 1];
  const form: EwForm | undefined =
    ix === 1 && iy === 1 ? "vv" : ix === 1 && iy === 0 ? "vs" : ix === 0 && iy === 1 ? "sv" : undefined;
  if (!form) return false;
  const n = dims[rank - 1];
  const rows = rank > 1 ? dims[rank - 2] : 1;
  const rowX = rank > 1 ? sx[rank - 2] * 4 : 0;
  const rowY = rank > 1 ? sy[rank - 2] * 4 : 0;
  const [x0, y0, o0] = [xo, yo, oo];
  forEachBlock(dims, sx, sy, 2, (xb, yb, ob) =>
    h.binary(type as EwOp, form, x0 + 4 * xb, y0 + 4 * yb, o0 + 4 * ob, rows, n, rowX, rowY),
  );
  return true;
}

/**
 * The hot float cases (add/sub/mul/real_div over a row of vector∘vector, vector∘scalar or
 * scalar∘vector) as plain contiguous loops, which run 2–3× faster than the strided form.
 */
function arithmeticRow(
  type: string,
  xd: Float32Array,
  xb: number,
  sx: number,
  yd: Float32Array,
  yb: number,
  sy: number,
  o: Float32Array,
  ob: number,
  n: number,
): boolean {
  if (sx === 1 && sy === 1) {
    if (type === "add") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] + yd[yb + i];
    else if (type === "mul") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] * yd[yb + i];
    else if (type === "sub") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] - yd[yb + i];
    else if (type === "real_div") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] / yd[yb + i];
    else return false;
    return true;
  }
  if (sx === 1 && sy === 0) {
    const v = yd[yb];
    if (type === "add") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] + v;
    else if (type === "mul") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] * v;
    else if (type === "sub") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] - v;
    else if (type === "real_div") for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i] / v;
    else return false;
    return true;
  }
  if (sx === 0 && sy === 1) {
    const v = xd[xb];
    if (type === "add") for (let i = 0; i < n; i++) o[ob + i] = v + yd[yb + i];
    else if (type === "mul") for (let i = 0; i < n; i++) o[ob + i] = v * yd[yb + i];
    else if (type === "sub") for (let i = 0; i < n; i++) o[ob + i] = v - yd[yb + i];
    else if (type === "real_div") for (let i = 0; i < n; i++) o[ob + i] = v / yd[yb + i];
    else return false;
    return true;
  }
  return false;
}

function binaryRow(
  type: string,
  isInt: boolean,
  xd: Num,
  xb: number,
  sx: number,
  yd: Num,
  yb: number,
  sy: number,
  o: Num,
  ob: number,
  n: number,
): void {
  if (
    !isInt &&
    o instanceof Float32Array &&
    arithmeticRow(type, xd as Float32Array, xb, sx, yd as Float32Array, yb, sy, o, ob, n)
  )
    return;
  switch (type) {
    case "add":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] + yd[yb + i * sy];
      break;
    case "sub":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] - yd[yb + i * sy];
      break;
    case "mul":
      if (isInt) for (let i = 0; i < n; i++) o[ob + i] = Math.imul(xd[xb + i * sx], yd[yb + i * sy]);
      else for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] * yd[yb + i * sy];
      break;
    case "real_div": // int32 operands: the quotient truncated toward zero by the int32 store
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] / yd[yb + i * sy];
      break;
    case "floor_div":
      for (let i = 0; i < n; i++) o[ob + i] = Math.floor(xd[xb + i * sx] / yd[yb + i * sy]);
      break;
    case "mod": // numpy / Python semantics: the result takes the divisor's sign
      for (let i = 0; i < n; i++) {
        const a = xd[xb + i * sx];
        const b = yd[yb + i * sy];
        o[ob + i] = a - Math.floor(a / b) * b;
      }
      break;
    case "pow":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] ** yd[yb + i * sy];
      break;
    case "maximum":
      for (let i = 0; i < n; i++) {
        const a = xd[xb + i * sx];
        const b = yd[yb + i * sy];
        o[ob + i] = a > b || Number.isNaN(a) ? a : b; // NaN propagates, like numpy.maximum
      }
      break;
    case "minimum":
      for (let i = 0; i < n; i++) {
        const a = xd[xb + i * sx];
        const b = yd[yb + i * sy];
        o[ob + i] = a < b || Number.isNaN(a) ? a : b;
      }
      break;
    case "equal":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] === yd[yb + i * sy] ? 1 : 0;
      break;
    case "not_equal":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] !== yd[yb + i * sy] ? 1 : 0;
      break;
    case "less":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] < yd[yb + i * sy] ? 1 : 0;
      break;
    case "less_equal":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] <= yd[yb + i * sy] ? 1 : 0;
      break;
    case "greater":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] > yd[yb + i * sy] ? 1 : 0;
      break;
    case "greater_equal":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] >= yd[yb + i * sy] ? 1 : 0;
      break;
    case "logical_and":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] & yd[yb + i * sy];
      break;
    case "logical_or":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] | yd[yb + i * sy];
      break;
    case "logical_xor":
      for (let i = 0; i < n; i++) o[ob + i] = xd[xb + i * sx] ^ yd[yb + i * sy];
      break;
    default:
      throw new Error(`no binary kernel for ${type}`);
  }
}

function binaryDef(type: string): OpDef {
  const boolOut = COMPARISONS.has(type) || LOGICAL.has(type);
  const domain = LOGICAL.has(type) ? BOOL : FP_I32;
  return {
    type,
    version: "iOS15",
    params: [
      { name: "x", dtype: "T" },
      { name: "y", dtype: "T" },
    ],
    domains: { T: domain },
    infer: (a) => [tt(boolOut ? "bool" : a.type("x").dtype, broadcastOut(a, "x", "y"))],
    evaluate: (a, out) => [evalBinary(type, a.value("x"), a.value("y"), out[0])],
  };
}

// ---------------------------------------------------------------------------------------------
// Unary

/** Unary ops, their domains and (for rsqrt/log/inverse) the epsilon default in x's dtype. */
const UNARY: Record<
  string,
  { domain: readonly MilDType[]; epsilon?: number; version?: "iOS17"; flops?: number }
> = {
  abs: { domain: FP_I32 },
  square: { domain: FP_I32 },
  sqrt: { domain: FP },
  rsqrt: { domain: FP, epsilon: 1e-12, version: "iOS17" },
  inverse: { domain: FP, epsilon: 1e-4, version: "iOS17" },
  exp: { domain: FP, flops: 4 },
  log: { domain: FP, epsilon: 1e-45, version: "iOS17", flops: 4 },
  tanh: { domain: FP, flops: 4 },
  sigmoid: { domain: FP, flops: 4 },
  silu: { domain: FP, flops: 5 },
  softplus: { domain: FP, flops: 6 },
  relu: { domain: FP },
  sin: { domain: FP, flops: 4 },
  cos: { domain: FP, flops: 4 },
  floor: { domain: FP },
  ceil: { domain: FP },
  logical_not: { domain: BOOL },
};

function evalUnary(type: string, x: RtTensor, out: TensorType, eps: number): RtTensor {
  const xd = x.data as Num;
  const o = allocRt(out) as Num;
  const n = o.length;
  switch (type) {
    case "abs":
      for (let i = 0; i < n; i++) o[i] = Math.abs(xd[i]);
      break;
    case "square":
      if (x.data instanceof Int32Array) for (let i = 0; i < n; i++) o[i] = Math.imul(xd[i], xd[i]);
      else for (let i = 0; i < n; i++) o[i] = xd[i] * xd[i];
      break;
    case "sqrt":
      for (let i = 0; i < n; i++) o[i] = Math.sqrt(xd[i]);
      break;
    case "rsqrt":
      for (let i = 0; i < n; i++) o[i] = 1 / Math.sqrt(xd[i] + eps);
      break;
    case "inverse":
      for (let i = 0; i < n; i++) o[i] = 1 / (xd[i] + eps);
      break;
    case "exp":
      for (let i = 0; i < n; i++) o[i] = Math.exp(xd[i]);
      break;
    case "log":
      for (let i = 0; i < n; i++) o[i] = Math.log(xd[i] + eps);
      break;
    case "tanh":
      for (let i = 0; i < n; i++) o[i] = Math.tanh(xd[i]);
      break;
    case "sigmoid":
      for (let i = 0; i < n; i++) o[i] = 1 / (1 + Math.exp(-xd[i]));
      break;
    case "silu":
      for (let i = 0; i < n; i++) o[i] = xd[i] / (1 + Math.exp(-xd[i]));
      break;
    case "softplus":
      for (let i = 0; i < n; i++) {
        const v = xd[i];
        o[i] = Math.max(v, 0) + Math.log1p(Math.exp(-Math.abs(v)));
      }
      break;
    case "relu":
      for (let i = 0; i < n; i++) o[i] = Math.max(xd[i], 0);
      break;
    case "sin":
      for (let i = 0; i < n; i++) o[i] = Math.sin(xd[i]);
      break;
    case "cos":
      for (let i = 0; i < n; i++) o[i] = Math.cos(xd[i]);
      break;
    case "floor":
      for (let i = 0; i < n; i++) o[i] = Math.floor(xd[i]);
      break;
    case "ceil":
      for (let i = 0; i < n; i++) o[i] = Math.ceil(xd[i]);
      break;
    case "logical_not":
      for (let i = 0; i < n; i++) o[i] = xd[i] ? 0 : 1;
      break;
    default:
      throw new Error(`no unary kernel for ${type}`);
  }
  return { type: out, data: o };
}

function unaryDef(type: string): OpDef {
  const u = UNARY[type];
  const eps = u.epsilon;
  return {
    type,
    version: u.version ?? "iOS15",
    doc:
      eps === undefined
        ? undefined
        : `${type}(x) with an epsilon that defaults to ${eps} in x's dtype (0 in fp16), as coremltools.`,
    params:
      eps === undefined
        ? [{ name: "x", dtype: "T" }]
        : [
            { name: "x", dtype: "T" },
            // default in x's dtype, as coremltools' default_inputs() does (fp16(1e-12) is 0)
            {
              name: "epsilon",
              dtype: "U",
              const: true,
              optional: true,
              default: (a) => lit.fp(a.type("x").dtype, eps),
            },
          ],
    domains: eps === undefined ? { T: u.domain } : { T: u.domain, U: FP },
    infer: (a) => [a.type("x")],
    evaluate: (a, out) => [evalUnary(type, a.value("x"), out[0], eps === undefined ? 0 : a.num("epsilon"))],
  };
}

// ---------------------------------------------------------------------------------------------
// cast, select, clip, identity

/** iOS17 cast targets: the iOS17 tensor domain. */
const CAST_DTYPES = ANY17;

const cast: OpDef = {
  type: "cast",
  version: "iOS17",
  params: [
    { name: "x", dtype: CAST_DTYPES },
    { name: "dtype", dtype: STR, const: true, values: CAST_DTYPES },
  ],
  infer(a) {
    const d = a.str("dtype") as MilDType;
    if (!CAST_DTYPES.includes(d)) a.fail("dtype", `must be one of ${CAST_DTYPES.join(", ")}, got "${d}"`);
    return [tt(d, a.type("x").shape)];
  },
  evaluate(a, out) {
    const x = a.value("x");
    const t = out[0];
    const src = x.data as Num;
    const o = allocRt(t) as Num;
    if (t.dtype === "bool") {
      for (let i = 0; i < o.length; i++) o[i] = src[i] !== 0 ? 1 : 0;
    } else if (o instanceof Int32Array) {
      // float -> int truncates toward zero, then wraps to the target width (numpy astype)
      const w = t.dtype === "int8" ? new Int8Array(1) : t.dtype === "uint8" ? new Uint8Array(1) : undefined;
      const w16 =
        t.dtype === "int16" ? new Int16Array(1) : t.dtype === "uint16" ? new Uint16Array(1) : undefined;
      const box = w ?? w16;
      for (let i = 0; i < o.length; i++) {
        const v = Math.trunc(src[i]);
        if (box) {
          box[0] = v;
          o[i] = box[0];
        } else o[i] = v;
      }
    } else {
      for (let i = 0; i < o.length; i++) o[i] = src[i];
    }
    return [{ type: t, data: o }];
  },
};

const select: OpDef = {
  type: "select",
  version: "iOS15",
  params: [
    { name: "cond", dtype: BOOL },
    { name: "a", dtype: "T" },
    { name: "b", dtype: "T" },
  ],
  domains: { T: FP_I32_BOOL },
  infer: (a) => [tt(a.type("a").dtype, broadcastOut(a, "cond", "a", "b"))],
  evaluate(a, out) {
    const t = out[0];
    const [c, sc] = aligned(a.value("cond"), t.shape);
    const [x, sx] = aligned(a.value("a"), t.shape);
    const [y, sy] = aligned(a.value("b"), t.shape);
    const o = allocRt(t) as Num;
    for (let i = 0; i < o.length; i++) o[i] = c[i * sc] ? x[i * sx] : y[i * sy];
    return [{ type: t, data: o }];
  },
};

const clip: OpDef = {
  type: "clip",
  version: "iOS17",
  params: [
    { name: "x", dtype: "T" },
    { name: "alpha", dtype: "U", const: true },
    { name: "beta", dtype: "U", const: true },
  ],
  domains: { T: FP, U: FP },
  infer(a) {
    if (a.num("beta") < a.num("alpha"))
      a.fail("beta", `(${a.num("beta")}) must be >= alpha (${a.num("alpha")})`);
    return [a.type("x")];
  },
  evaluate(a, out) {
    const x = a.value("x").data as Float32Array;
    const lo = a.num("alpha");
    const hi = a.num("beta");
    const o = new Float32Array(x.length);
    for (let i = 0; i < x.length; i++) o[i] = Math.min(Math.max(x[i], lo), hi);
    return [{ type: out[0], data: o }];
  },
};

const identity: OpDef = {
  type: "identity",
  version: "iOS15",
  view: true,
  params: [{ name: "x" }],
  infer: (a) => [a.type("x")],
  evaluate: (a, out) => [{ type: out[0], data: a.value("x").data }],
};

export const ELEMENTWISE_OPS: readonly OpDef[] = [
  ...[
    "add",
    "sub",
    "mul",
    "real_div",
    "floor_div",
    "mod",
    "pow",
    "maximum",
    "minimum",
    ...COMPARISONS,
    ...LOGICAL,
  ].map(binaryDef),
  ...Object.keys(UNARY).map(unaryDef),
  cast,
  select,
  clip,
  identity,
];
