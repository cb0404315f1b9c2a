/**
 * WebAssembly SIMD kernels for the large float elementwise ops of a step — in a decode step of
 * Qwen3.5 the Gated DeltaNet state update: products, sums and axis reductions over [1, H, dk, dv]
 * states — run on op results that live in the SIMD heap (the interpreter's buffer pool puts them
 * there). Same bits as the JavaScript loops they stand in for: those compute each +, −, ×, ÷ in
 * float64 and round once to fp32, which equals the fp32 operation (float64 has more than
 * 2·24 + 2 bits), and the reductions add in float64 in the same order.
 *
 *   `ew_<op>_<form>(x, y, out, rows, n, xs, ys)`: for r < rows, i < n:
 *       out[r·n + i] = x(r, i) ∘ y(r, i)   with x(r, i) = x[r·xs + i] ("v") or x[r·xs] ("s")
 *     form vv, vs or sv; byte pointers, xs/ys row strides in bytes, out contiguous.
 *   `rsum(x, out, outer, R, inner)`: out[p·inner + i] = fp32(Σ_r x[(p·R + r)·inner + i]), the sum
 *     in float64 over ascending r.
 *   `round_f16(x, n)` / `round_f16_flush(x, n)`: x[i] = fp16(x[i]) in place, as roundF16InPlace;
 *     whole vectors, so up to 3 values past n are rounded too (heap blocks are 64-byte multiples).
 */
import { emitRoundF16 } from "./packed-kernels.js";
import { Fn, type FuncSpec, op } from "./wasm-asm.js";

export const EW_OPS = ["add", "sub", "mul", "real_div"] as const;
export type EwOp = (typeof EW_OPS)[number];
export type EwForm = "vv" | "vs" | "sv";
export const EW_FORMS: readonly EwForm[] = ["vv", "vs", "sv"];

const get = op.localGet;
const addConst = (a: number, c: number) => [...get(a), ...op.i32Const(c), ...op.i32Add];
const VEC: Record<EwOp, number[]> = {
  add: op.f32x4Add,
  sub: op.f32x4Sub,
  mul: op.f32x4Mul,
  real_div: op.f32x4Div,
};
const SCALAR: Record<EwOp, number[]> = {
  add: op.f32Add,
  sub: op.f32Sub,
  mul: op.f32Mul,
  real_div: op.f32Div,
};

export function ewName(o: EwOp, form: EwForm): string {
  return `ew_${o}_${form}`;
}

function binaryKernel(o: EwOp, form: EwForm): FuncSpec {
  const [X, Y, OUT, ROWS, N, XS, YS] = [0, 1, 2, 3, 4, 5, 6];
  const f = new Fn(ewName(o, form), 7);
  const r = f.i32();
  const i = f.i32();
  const n4 = f.i32();
  const nb = f.i32();
  const xp = f.i32();
  const yp = f.i32();
  const op_ = f.i32();
  const xs = f.v128();
  const ys = f.v128();
  const xScalar = form === "sv";
  const yScalar = form === "vs";
  f.set(nb, get(N), op.i32Const(2), op.i32Shl);
  f.set(n4, get(N), op.i32Const(-4), op.i32And, op.i32Const(2), op.i32Shl);
  f.set(xp, get(X));
  f.set(yp, get(Y));
  f.set(op_, get(OUT));
  f.set(r, op.i32Const(0));
  f.whileLt(r, ROWS, () => {
    if (xScalar) f.set(xs, get(xp), op.f32Load(), op.f32x4Splat);
    if (yScalar) f.set(ys, get(yp), op.f32Load(), op.f32x4Splat);
    f.set(i, op.i32Const(0));
    f.whileLt(i, n4, () => {
      f.emit(get(op_), get(i), op.i32Add);
      f.emit(...(xScalar ? [get(xs)] : [get(xp), get(i), op.i32Add, op.v128Load()]));
      f.emit(...(yScalar ? [get(ys)] : [get(yp), get(i), op.i32Add, op.v128Load()]));
      f.emit(VEC[o], op.v128Store());
      f.set(i, addConst(i, 16));
    });
    f.whileLt(i, nb, () => {
      f.emit(get(op_), get(i), op.i32Add);
      f.emit(get(xp), ...(xScalar ? [] : [get(i), op.i32Add]), op.f32Load());
      f.emit(get(yp), ...(yScalar ? [] : [get(i), op.i32Add]), op.f32Load());
      f.emit(SCALAR[o], op.f32Store());
      f.set(i, addConst(i, 4));
    });
    f.set(op_, get(op_), get(nb), op.i32Add);
    f.set(xp, get(xp), get(XS), op.i32Add);
    f.set(yp, get(yp), get(YS), op.i32Add);
    f.set(r, addConst(r, 1));
  });
  return f.spec();
}

/** Low two lanes of a, then low two lanes of b. */
const JOIN_LOW_PAIRS = [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23];

function sumKernel(): FuncSpec {
  const [X, OUT, OUTER, R, INNER] = [0, 1, 2, 3, 4];
  const f = new Fn("rsum", 5);
  const p = f.i32();
  const i = f.i32();
  const r = f.i32();
  const rowB = f.i32();
  const blockB = f.i32();
  const i8 = f.i32();
  const ib = f.i32();
  const src = f.i32();
  const dst = f.i32();
  const base = f.i32();
  const acc = [f.v128(), f.v128(), f.v128(), f.v128()];
  const s = f.v128();
  f.set(rowB, get(INNER), op.i32Const(2), op.i32Shl);
  f.set(blockB, get(rowB), get(R), op.i32Mul);
  f.set(i8, get(INNER), op.i32Const(-8), op.i32And, op.i32Const(2), op.i32Shl);
  f.set(ib, get(rowB));
  f.set(base, get(X));
  f.set(dst, get(OUT));
  f.set(p, op.i32Const(0));
  f.whileLt(p, OUTER, () => {
    // 8 columns at a time: four float64 pairs
    f.set(i, op.i32Const(0));
    f.whileLt(i, i8, () => {
      for (const a of acc) f.set(a, op.v128Zero);
      f.set(src, get(base), get(i), op.i32Add);
      f.set(r, op.i32Const(0));
      f.whileLt(r, R, () => {
        acc.forEach((a, j) => {
          f.set(a, get(a), get(src), op.v128Load64Zero(8 * j), op.f64x2PromoteLowF32x4, op.f64x2Add);
        });
        f.set(src, get(src), get(rowB), op.i32Add);
        f.set(r, addConst(r, 1));
      });
      for (let j = 0; j < 4; j += 2) {
        f.emit(get(dst), get(i), op.i32Add);
        f.emit(get(acc[j]), op.f32x4DemoteF64x2Zero, get(acc[j + 1]), op.f32x4DemoteF64x2Zero);
        f.emit(op.i8x16Shuffle(JOIN_LOW_PAIRS), op.v128Store(8 * j));
      }
      f.set(i, addConst(i, 32));
    });
    // the last columns one at a time
    f.whileLt(i, ib, () => {
      f.set(s, op.v128Zero);
      f.set(src, get(base), get(i), op.i32Add);
      f.set(r, op.i32Const(0));
      f.whileLt(r, R, () => {
        f.set(s, get(s), get(src), op.v128Load32Zero(), op.f64x2PromoteLowF32x4, op.f64x2Add);
        f.set(src, get(src), get(rowB), op.i32Add);
        f.set(r, addConst(r, 1));
      });
      f.emit(get(dst), get(i), op.i32Add, get(s), op.f64x2ExtractLane(0), op.f32DemoteF64, op.f32Store());
      f.set(i, addConst(i, 4));
    });
    f.set(base, get(base), get(blockB), op.i32Add);
    f.set(dst, get(dst), get(rowB), op.i32Add);
    f.set(p, addConst(p, 1));
  });
  return f.spec();
}

function roundKernel(flush: boolean): FuncSpec {
  const [X, N] = [0, 1];
  const f = new Fn(flush ? "round_f16_flush" : "round_f16", 2);
  const p = f.i32();
  const end = f.i32();
  const w = f.v128();
  const t = [f.v128(), f.v128(), f.v128(), f.v128()];
  f.set(p, get(X));
  f.set(end, get(X), get(N), op.i32Const(2), op.i32Shl, op.i32Add);
  f.whileLt(p, end, () => {
    f.set(w, get(p), op.v128Load());
    emitRoundF16(f, w, flush, t);
    f.emit(get(p), get(w), op.v128Store());
    f.set(p, addConst(p, 16));
  });
  return f.spec();
}

/** Every elementwise kernel: the binary ones in EW_OPS × EW_FORMS order, `rsum`, the roundings. */
export function elementwiseKernels(): FuncSpec[] {
  return [
    ...EW_OPS.flatMap((o) => EW_FORMS.map((form) => binaryKernel(o, form))),
    sumKernel(),
    roundKernel(false),
    roundKernel(true),
  ];
}
