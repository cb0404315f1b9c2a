/**
 * WebAssembly SIMD kernels over compressed constant weights: LUT indices (constexpr_lut_to_dense)
 * and int8 blocks (constexpr_blockwise_shift_scale) are decoded 16 values at a time in registers
 * and fed straight into the same multiply-add sequence as the dense `nt` kernel, so a weight is
 * read in its stored size (0.5 byte per LUT4 value instead of 4 for fp32) and the result has the
 * bits the dense product of the expanded weight has.
 *
 * Every kernel has the signature (desc, x, out, M, ldo, scratch, n0, n1), byte offsets into the
 * heap's memory, and covers weight rows [n0, n1):
 *   `<fmt>_mv`  out[n] = Σ_k x[k]·w[n][k] for one row of x (M = 1), decoding in registers;
 *   `<fmt>_dec` writes the fp32 rows [n0, n1) to scratch (row n at scratch + (n − n0)·K·4);
 *   `<fmt>_mm`  M rows of x: decodes `blockRows` rows at a time into scratch, then runs `ntr`.
 * `desc` points at a weight's descriptor (DESC fields below).
 *
 * Exactness: the dense kernel accumulates lane j of one f32x4 accumulator over k ≡ j (mod 4)
 * in ascending k (a mul, then an add: no fused multiply-add), then sums (l0 + l1) + (l2 + l3).
 * The `_mv` kernels do exactly that with the decoded vectors; `_mm` runs the dense kernel itself.
 *
 * LUT decoding: a group's palette of fp32 values is stored as 4 "byte planes" of 16 bytes
 * (plane p holds byte p of every entry); i8x16.swizzle looks 16 indices up in each plane and two
 * rounds of byte/half-word interleaving put the bytes back together as 4 f32x4 vectors. Up to
 * 64 entries (6-bit indices) use 4 planes sets (swizzle gives 0 for indices out of 0..15, so
 * the lookups of idx − 16t are OR-ed); 7- and 8-bit indices are looked up one value at a time.
 */
import { Fn, type FuncSpec, op } from "./wasm-asm.js";

/** Descriptor fields (i32, byte offsets within the descriptor). */
export const DESC = {
  /** Packed indices or int8 data; row n starts at src + n·rowBytes. */
  src: 0,
  /** Palettes (byte planes, or fp32 entries for 7/8-bit indices) or int8 scales (f32). */
  tab: 4,
  /** int8 offsets (f64), when present. */
  off: 8,
  K: 12,
  rowBytes: 16,
  /** Rows sharing one palette / one row of scale blocks. */
  groupRows: 20,
  /** Bytes of tab per group. */
  tabStride: 24,
  /** Scale blocks per row (1 for LUTs) and values per block (K for LUTs, a multiple of 16). */
  blocks: 28,
  block: 32,
  /** Rows `_mm` decodes at a time (a multiple of 4). */
  blockRows: 36,
} as const;
export const DESC_BYTES = 64;

/** How the 16 values of one chunk are stored. */
export type PackedFormat =
  | {
      readonly kind: "lut";
      readonly layout: "nibble" | "byte";
      readonly entries: number;
      /**
       * Byte planes looked up: 3 when every palette entry's low byte is 0 (true of fp16 values,
       * whose fp32 form has 13 zero mantissa bits), else 4.
       */
      readonly planes: 3 | 4;
    }
  | {
      readonly kind: "int8";
      readonly signed: boolean;
      readonly offset: boolean;
      /** Round each value to fp16 (the constexpr's output dtype), flushing subnormals or not. */
      readonly round: "none" | "f16" | "f16-flush";
    };

/** Name of the kernel family of a format (exports are `${name}_mv`, `_dec`, `_mm`). */
export function formatName(f: PackedFormat): string {
  if (f.kind === "lut") return `lut_${f.layout === "nibble" ? "nib" : `b${lutTables(f)}`}_p${f.planes}`;
  return `i8${f.signed ? "s" : "u"}${f.offset ? "_off" : ""}_${f.round.replace("-", "_")}`;
}

/** 16-entry tables a byte-indexed palette is looked up in (16 = one value at a time). */
function lutTables(f: { entries: number }): number {
  const t = Math.max(1, Math.ceil(f.entries / 16));
  return t <= 4 ? t : 16;
}

/** Bytes of packed source per 16 values. */
export function chunkBytes(f: PackedFormat): number {
  return f.kind === "lut" && f.layout === "nibble" ? 8 : 16;
}

/** Bytes of `tab` per group: byte planes (16 per table and plane) or 256 fp32 entries. */
export function lutTabStride(f: { entries: number; layout: "nibble" | "byte" }): number {
  if (f.layout === "nibble") return 64;
  const t = lutTables(f);
  return t === 16 ? 1024 : 64 * t;
}

/** Every format a kernel is generated for. */
export const PACKED_FORMATS: readonly PackedFormat[] = [
  ...([3, 4] as const).flatMap((planes) => [
    { kind: "lut" as const, layout: "nibble" as const, entries: 16, planes },
    { kind: "lut" as const, layout: "byte" as const, entries: 64, planes },
  ]),
  { kind: "lut", layout: "byte", entries: 256, planes: 4 },
  ...[true, false].flatMap((signed) =>
    [false, true].flatMap((offset) =>
      (["none", "f16", "f16-flush"] as const).map((round) => ({
        kind: "int8" as const,
        signed,
        offset,
        round,
      })),
    ),
  ),
];

const splat8 = (v: number) => new Array<number>(16).fill(v & 0xff);
const splat32 = (v: number) => {
  const b: number[] = [];
  for (let i = 0; i < 4; i++) b.push(v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff);
  return b;
};
const f32Bits = (v: number) => new Uint32Array(Float32Array.of(v).buffer)[0];
const range = (a: number, n: number, step = 1) => Array.from({ length: n }, (_, i) => a + i * step);
/** Byte interleaves (punpcklbw / punpckhbw) and 16-bit interleaves (punpcklwd / punpckhwd). */
const LO8 = range(0, 8).flatMap((i) => [i, 16 + i]);
const HI8 = range(8, 8).flatMap((i) => [i, 16 + i]);
const LO16 = range(0, 4).flatMap((i) => [2 * i, 2 * i + 1, 16 + 2 * i, 17 + 2 * i]);
const HI16 = range(4, 4).flatMap((i) => [2 * i, 2 * i + 1, 16 + 2 * i, 17 + 2 * i]);
/** Lanes 2, 3 of an i32x4 moved to lanes 0, 1. */
const HIGH_PAIR = [8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15];
/** Low two lanes of a, then low two lanes of b. */
const JOIN_LOW_PAIRS = [...range(0, 8), ...range(16, 8)];

const get = op.localGet;
const add = (a: number, c: number) => [...get(a), ...op.i32Const(c), ...op.i32Add];

/** Kernel parameters. */
const P = { desc: 0, x: 1, out: 2, M: 3, ldo: 4, scratch: 5, n0: 6, n1: 7 } as const;

interface RowLocals {
  src: number;
  tab: number;
  off: number;
  /** fused: accumulator; decode: destination pointer. */
  acc: number;
  dst: number;
  scale: number;
  scale64: number;
  offset64: number;
}

interface Desc {
  src: number;
  tab: number;
  off: number;
  kb: number;
  rowBytes: number;
  groupRows: number;
  tabStride: number;
  blocks: number;
  blockBytes: number;
}

function loadDesc(f: Fn): Desc {
  const field = (at: number) => {
    const l = f.i32();
    f.set(l, get(P.desc), op.i32Load(at));
    return l;
  };
  const d: Desc = {
    src: field(DESC.src),
    tab: field(DESC.tab),
    off: field(DESC.off),
    kb: field(DESC.K),
    rowBytes: field(DESC.rowBytes),
    groupRows: field(DESC.groupRows),
    tabStride: field(DESC.tabStride),
    blocks: field(DESC.blocks),
    blockBytes: field(DESC.block),
  };
  // K and block in bytes of fp32
  f.set(d.kb, get(d.kb), op.i32Const(2), op.i32Shl);
  f.set(d.blockBytes, get(d.blockBytes), op.i32Const(2), op.i32Shl);
  return d;
}

/** Emits the decode of 16 values of one row into W[0..3] (f32x4, in k order). */
function emitDecode16(
  f: Fn,
  fmt: PackedFormat,
  r: RowLocals,
  W: readonly number[],
  t: readonly number[],
): void {
  if (fmt.kind === "int8") {
    const [v, h0, h1] = t;
    const sgn = fmt.signed;
    f.set(v, get(r.src), op.v128Load());
    f.set(h0, get(v), sgn ? op.i16x8ExtendLowI8x16S : op.i16x8ExtendLowI8x16U);
    f.set(h1, get(v), sgn ? op.i16x8ExtendHighI8x16S : op.i16x8ExtendHighI8x16U);
    const lo = sgn ? op.i32x4ExtendLowI16x8S : op.i32x4ExtendLowI16x8U;
    const hi = sgn ? op.i32x4ExtendHighI16x8S : op.i32x4ExtendHighI16x8U;
    const ints = [
      [...get(h0), ...lo],
      [...get(h0), ...hi],
      [...get(h1), ...lo],
      [...get(h1), ...hi],
    ];
    for (let j = 0; j < 4; j++) {
      if (!fmt.offset) {
        // scale · q: exact in float64, rounded once to fp32 — what f32x4.mul does
        f.set(W[j], ints[j], op.f32x4ConvertI32x4S, get(r.scale), op.f32x4Mul);
      } else {
        // scale · (q − offset) in float64, then rounded to fp32, as the dense decode computes it
        f.set(v, ints[j]);
        const half = (sel: readonly number[]) => [
          ...get(v),
          ...sel,
          ...op.f64x2ConvertLowI32x4S,
          ...get(r.offset64),
          ...op.f64x2Sub,
          ...get(r.scale64),
          ...op.f64x2Mul,
          ...op.f32x4DemoteF64x2Zero,
        ];
        f.set(
          W[j],
          half([]),
          half([...get(v), ...op.i8x16Shuffle(HIGH_PAIR)]),
          op.i8x16Shuffle(JOIN_LOW_PAIRS),
        );
      }
      if (fmt.round !== "none") emitRoundF16(f, W[j], fmt.round === "f16-flush", t.slice(3));
    }
    return;
  }
  const tables = lutTables(fmt);
  if (tables === 16) {
    // one value at a time from the fp32 palette
    for (let j = 0; j < 4; j++) {
      const lookup = (lane: number) => [
        ...get(r.tab),
        ...get(r.src),
        ...op.i32Load8U(4 * j + lane),
        ...op.i32Const(2),
        ...op.i32Shl,
        ...op.i32Add,
        ...op.f32Load(),
      ];
      f.set(W[j], lookup(0), op.f32x4Splat);
      for (let lane = 1; lane < 4; lane++) f.set(W[j], get(W[j]), lookup(lane), op.f32x4ReplaceLane(lane));
    }
    return;
  }
  const [ix, it, q0, q1, q2, q3, a, b] = t;
  const q = [q0, q1, q2, q3];
  if (fmt.layout === "nibble") {
    // 8 bytes → 16 nibbles, LSB first: byte i holds values 2i (low) and 2i + 1 (high)
    f.set(ix, get(r.src), op.v128Load64Zero());
    f.set(
      ix,
      get(ix),
      op.v128Const(splat8(0x0f)),
      op.v128And,
      get(ix),
      op.i32Const(4),
      op.i8x16ShrU,
      op.i8x16Shuffle(LO8),
    );
  } else {
    f.set(ix, get(r.src), op.v128Load());
  }
  for (let tb = 0; tb < tables; tb++) {
    const idx = tb === 0 ? ix : it;
    if (tb > 0) f.set(it, get(ix), op.v128Const(splat8(16 * tb)), op.i8x16Sub);
    for (let p = 4 - fmt.planes; p < 4; p++) {
      const look = [...get(r.tab), ...op.v128Load(64 * tb + 16 * p), ...get(idx), ...op.i8x16Swizzle];
      if (tb === 0) f.set(q[p], look);
      else f.set(q[p], get(q[p]), look, op.v128Or);
    }
  }
  // bytes (b0, b1) and (b2, b3) of each value side by side, then whole values
  const plane0 = fmt.planes === 3 ? op.v128Zero : get(q0);
  f.set(a, plane0, get(q1), op.i8x16Shuffle(LO8));
  f.set(b, get(q2), get(q3), op.i8x16Shuffle(LO8));
  f.set(W[0], get(a), get(b), op.i8x16Shuffle(LO16));
  f.set(W[1], get(a), get(b), op.i8x16Shuffle(HI16));
  f.set(a, plane0, get(q1), op.i8x16Shuffle(HI8));
  f.set(b, get(q2), get(q3), op.i8x16Shuffle(HI8));
  f.set(W[2], get(a), get(b), op.i8x16Shuffle(LO16));
  f.set(W[3], get(a), get(b), op.i8x16Shuffle(HI16));
}

/**
 * w = fp16(w) exactly as roundF16InPlace: |x| ≥ 65520 → ±inf (NaN kept); |x| < 2^-14 → a
 * multiple of 2^-24 (RNE; (|x| + 0.5) − 0.5 in fp32 rounds there) or ±0 when flushing;
 * otherwise 10 mantissa bits, round to nearest even.
 */
export function emitRoundF16(f: Fn, w: number, flush: boolean, t: readonly number[]): void {
  const [abs, sign, r, mask] = t;
  const c32 = (v: number) => op.v128Const(splat32(v));
  f.set(abs, get(w), c32(0x7fffffff), op.v128And);
  f.set(sign, get(w), c32(0x80000000), op.v128And);
  // normal: (b + 0xfff + ((b >> 13) & 1)) & 0xffffe000
  f.set(
    r,
    get(w),
    c32(0xfff),
    op.i32x4Add,
    get(w),
    op.i32Const(13),
    op.i32x4ShrU,
    c32(1),
    op.v128And,
    op.i32x4Add,
    c32(0xffffe000),
    op.v128And,
  );
  // overflow: ±inf, NaN unchanged
  f.set(mask, get(abs), c32(0x477ff000), op.i32x4GeU);
  f.set(
    r,
    get(w),
    get(sign),
    c32(0x7f800000),
    op.v128Or,
    get(abs),
    c32(0x7f800000),
    op.i32x4GtU,
    op.v128Bitselect,
    get(r),
    get(mask),
    op.v128Bitselect,
  );
  // subnormal range
  f.set(mask, get(abs), c32(0x38800000), op.i32x4LtU);
  if (flush) f.set(w, get(sign), get(r), get(mask), op.v128Bitselect);
  else {
    f.set(
      w,
      get(abs),
      c32(f32Bits(0.5)),
      op.f32x4Add,
      c32(f32Bits(0.5)),
      op.f32x4Sub,
      get(sign),
      op.v128Or,
      get(r),
      get(mask),
      op.v128Bitselect,
    );
  }
}

/**
 * The row loop shared by `_mv` (fused) and `_dec` (decode to scratch): one row at a time (one
 * accumulator keeps enough values in flight; more rows per pass spill registers and measured
 * slower), per row its palette / scale row, per scale block its scale, 16 values per step.
 */
function rowKernel(name: string, fmt: PackedFormat, fused: boolean): FuncSpec {
  const f = new Fn(name, 8);
  const d = loadDesc(f);
  const n = f.i32();
  const kx = f.i32();
  const blockEnd = f.i32();
  const bi = f.i32();
  const g = f.i32();
  const W = [f.v128(), f.v128(), f.v128(), f.v128()];
  const tmp = range(0, 8).map(() => f.v128());
  const L: RowLocals = {
    src: f.i32(),
    tab: f.i32(),
    off: f.i32(),
    acc: f.v128(),
    dst: f.i32(),
    scale: f.v128(),
    scale64: f.v128(),
    offset64: f.v128(),
  };
  const step = chunkBytes(fmt);
  f.set(n, get(P.n0));
  f.whileLt(n, P.n1, () => {
    f.set(L.src, get(n), get(d.rowBytes), op.i32Mul, get(d.src), op.i32Add);
    f.set(g, get(n), get(d.groupRows), op.i32DivU);
    f.set(L.tab, get(g), get(d.tabStride), op.i32Mul, get(d.tab), op.i32Add);
    if (fmt.kind === "int8" && fmt.offset)
      f.set(L.off, get(g), get(d.blocks), op.i32Mul, op.i32Const(3), op.i32Shl, get(d.off), op.i32Add);
    if (fused) f.set(L.acc, op.v128Zero);
    else f.set(L.dst, get(n), get(P.n0), op.i32Sub, get(d.kb), op.i32Mul, get(P.scratch), op.i32Add);
    f.set(kx, op.i32Const(0));
    f.set(bi, op.i32Const(0));
    f.whileLt(bi, d.blocks, () => {
      if (fmt.kind === "int8") {
        const scaleAt = [...get(L.tab), ...get(bi), ...op.i32Const(2), ...op.i32Shl, ...op.i32Add];
        f.set(L.scale, scaleAt, op.f32Load(), op.f32x4Splat);
        if (fmt.offset) {
          f.set(L.scale64, get(L.scale), op.f64x2PromoteLowF32x4);
          f.set(L.offset64, get(L.off), get(bi), op.i32Const(3), op.i32Shl, op.i32Add, op.v128Load64Splat());
        }
      }
      f.set(blockEnd, get(kx), get(d.blockBytes), op.i32Add);
      f.whileLt(kx, blockEnd, () => {
        if (!fused && fmt.kind === "lut" && lutTables(fmt) === 16) {
          // one value at a time, straight to the row
          for (let i = 0; i < 16; i++) {
            f.emit(get(L.dst), get(kx), op.i32Add);
            f.emit(
              get(L.tab),
              get(L.src),
              op.i32Load8U(i),
              op.i32Const(2),
              op.i32Shl,
              op.i32Add,
              op.f32Load(),
            );
            f.emit(op.f32Store(4 * i));
          }
        } else {
          emitDecode16(f, fmt, L, W, tmp);
          for (let j = 0; j < 4; j++) {
            const xj = [...get(P.x), ...get(kx), ...op.i32Add, ...op.v128Load(16 * j)];
            if (fused) f.set(L.acc, get(L.acc), xj, get(W[j]), op.f32x4Mul, op.f32x4Add);
            else f.emit(get(L.dst), get(kx), op.i32Add, get(W[j]), op.v128Store(16 * j));
          }
        }
        f.set(L.src, add(L.src, step));
        f.set(kx, add(kx, 64));
      });
      f.set(bi, add(bi, 1));
    });
    if (fused) {
      // (l0 + l1) + (l2 + l3), as the dense kernel sums its accumulator
      const a = L.acc;
      f.emit(get(P.out), get(n), op.i32Const(2), op.i32Shl, op.i32Add);
      f.emit(get(a), op.f32x4ExtractLane(0), get(a), op.f32x4ExtractLane(1), op.f32Add);
      f.emit(get(a), op.f32x4ExtractLane(2), get(a), op.f32x4ExtractLane(3), op.f32Add, op.f32Add);
      f.emit(op.f32Store());
    }
    f.set(n, add(n, 1));
  });
  return f.spec();
}

/**
 * `_mm`: for each block of `blockRows` rows: decode them into scratch (`dec`), then the dense
 * kernel over the block for all M rows of x (`ntr`).
 */
function blockKernel(name: string, dec: number, ntr: number): FuncSpec {
  const f = new Fn(name, 8);
  const b = f.i32();
  const e = f.i32();
  const blockRows = f.i32();
  const kb = f.i32();
  f.set(blockRows, get(P.desc), op.i32Load(DESC.blockRows));
  f.set(kb, get(P.desc), op.i32Load(DESC.K), op.i32Const(2), op.i32Shl);
  f.set(b, get(P.n0));
  f.whileLt(b, P.n1, () => {
    f.set(e, get(b), get(blockRows), op.i32Add);
    f.emit(get(e), get(P.n1), op.i32GeU, op.if);
    f.set(e, get(P.n1));
    f.emit(op.end);
    f.emit(...[P.desc, P.x, P.out, P.M, P.ldo, P.scratch].map((p) => get(p)), get(b), get(e), op.call(dec));
    // ntr(x, w = scratch, out + b·4, M, kb, ldo, 0, e − b)
    f.emit(get(P.x), get(P.scratch), get(P.out), get(b), op.i32Const(2), op.i32Shl, op.i32Add, get(P.M));
    f.emit(get(kb), get(P.ldo), op.i32Const(0), get(e), get(b), op.i32Sub, op.call(ntr));
    f.set(b, get(e));
  });
  return f.spec();
}

/**
 * `ntr(x, w, out, M, kb, ldo, n0, n1)`: the dense product over weight rows [n0, n1) (a multiple
 * of 4 rows) for M rows of x — rows of x in pairs through nt2, the last through nt1.
 */
export function ntRangeKernel(nt1: number, nt2: number): FuncSpec {
  const f = new Fn("ntr", 8);
  const [X, Wp, OUT, M, KB, LDO, N0, N1] = range(0, 8);
  const m = f.i32();
  const M1 = f.i32();
  const call = (fn: number) => {
    // nt(x + m·kb, w + n0·kb, out + m·ldo + n0·4, n1 − n0, kb, ldo)
    f.emit(get(X), get(m), get(KB), op.i32Mul, op.i32Add);
    f.emit(get(Wp), get(N0), get(KB), op.i32Mul, op.i32Add);
    f.emit(get(OUT), get(m), get(LDO), op.i32Mul, op.i32Add, get(N0), op.i32Const(2), op.i32Shl, op.i32Add);
    f.emit(get(N1), get(N0), op.i32Sub, get(KB), get(LDO), op.call(fn));
  };
  f.set(m, op.i32Const(0));
  f.set(M1, get(M), op.i32Const(1), op.i32Sub);
  f.whileLt(m, M1, () => {
    call(nt2);
    f.set(m, add(m, 2));
  });
  f.emit(get(m), get(M), op.i32LtU, op.if);
  call(nt1);
  f.emit(op.end);
  return f.spec();
}

/** The kernels of every packed format; `indexOf` gives the function index of an earlier export. */
export function packedKernels(first: number, ntr: number): FuncSpec[] {
  const out: FuncSpec[] = [];
  for (const fmt of PACKED_FORMATS) {
    const name = formatName(fmt);
    out.push(rowKernel(`${name}_mv`, fmt, true));
    const dec = first + out.length;
    out.push(rowKernel(`${name}_dec`, fmt, false));
    out.push(blockKernel(`${name}_mm`, dec, ntr));
  }
  return out;
}
