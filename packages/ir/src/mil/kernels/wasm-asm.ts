/**
 * A minimal WebAssembly binary encoder — just enough to emit the interpreter's SIMD matrix
 * kernels and the converter's k-means DP at startup without a toolchain. Encodings follow the
 * WebAssembly core spec (binary format, §5) and the fixed-width SIMD proposal (0xFD-prefixed
 * opcodes).
 */

export const I32 = 0x7f;
export const F32 = 0x7d;
export const F64 = 0x7c;
export const V128 = 0x7b;

export function uleb(n: number): number[] {
  const out: number[] = [];
  let v = n >>> 0;
  do {
    let b = v & 0x7f;
    v >>>= 7;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}

export function sleb(n: number): number[] {
  const out: number[] = [];
  let v = n | 0;
  for (;;) {
    const b = v & 0x7f;
    v >>= 7;
    if ((v === 0 && !(b & 0x40)) || (v === -1 && b & 0x40)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
}

function vec(items: readonly number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}

function name(s: string): number[] {
  const bytes = [...new TextEncoder().encode(s)];
  return [...uleb(bytes.length), ...bytes];
}

const simd = (code: number, ...imm: number[]): number[] => [0xfd, ...uleb(code), ...imm];

/** Instruction encoders (only those the kernels use). */
export const op = {
  localGet: (i: number) => [0x20, ...uleb(i)],
  localSet: (i: number) => [0x21, ...uleb(i)],
  localTee: (i: number) => [0x22, ...uleb(i)],
  i32Const: (v: number) => [0x41, ...sleb(v)],
  i32Add: [0x6a],
  i32Sub: [0x6b],
  i32Mul: [0x6c],
  i32Shl: [0x74],
  i32LtU: [0x49],
  i32GeU: [0x4f],
  i32Eqz: [0x45],
  i32And: [0x71],
  i32ShrU: [0x76],
  i32DivU: [0x6e],
  /** i32.load8_u / i32.load with a constant byte offset. */
  i32Load8U: (offset = 0) => [0x2d, 0, ...uleb(offset)],
  i32Load: (offset = 0) => [0x28, 2, ...uleb(offset)],
  block: [0x02, 0x40],
  loop: [0x03, 0x40],
  end: [0x0b],
  /** if (no result) … else … end */
  if: [0x04, 0x40],
  else: [0x05],
  call: (func: number) => [0x10, ...uleb(func)],
  br: (depth: number) => [0x0c, ...uleb(depth)],
  brIf: (depth: number) => [0x0d, ...uleb(depth)],
  f32Add: [0x92],
  /** f32.store with natural alignment (2^2) and a constant byte offset. */
  f32Store: (offset = 0) => [0x38, 2, ...uleb(offset)],
  f32Load: (offset = 0) => [0x2a, 2, ...uleb(offset)],
  f32Mul: [0x94],
  f32Sub: [0x93],
  f32Div: [0x95],
  f32DemoteF64: [0xb6],
  f64PromoteF32: [0xbb],
  /** v128.load, alignment hint 2^2 (element-aligned; unaligned access is legal). */
  v128Load: (offset = 0) => simd(0x00, 2, ...uleb(offset)),
  v128Store: (offset = 0) => simd(0x0b, 2, ...uleb(offset)),
  v128Zero: simd(0x0c, ...new Array<number>(16).fill(0)),
  /** v128.load64_zero: 8 bytes into the low half, the high half zero. */
  v128Load64Zero: (offset = 0) => simd(0x5d, 0, ...uleb(offset)),
  /** v128.load32_zero: 4 bytes into lane 0, the rest zero. */
  v128Load32Zero: (offset = 0) => simd(0x5c, 0, ...uleb(offset)),
  v128Load64Splat: (offset = 0) => simd(0x0a, 0, ...uleb(offset)),
  /** v128.const from 16 bytes. */
  v128Const: (bytes: readonly number[]) => simd(0x0c, ...bytes),
  /** i8x16.shuffle: lane i of the result is byte `lanes[i]` of a‖b (0..31). */
  i8x16Shuffle: (lanes: readonly number[]) => simd(0x0d, ...lanes),
  /** i8x16.swizzle: result byte i = table[idx[i]], 0 where idx[i] >= 16. */
  i8x16Swizzle: simd(0x0e),
  i8x16Splat: simd(0x0f),
  i32x4Splat: simd(0x11),
  f32x4Splat: simd(0x13),
  f32x4ExtractLane: (lane: number) => simd(0x1f, lane),
  f32x4ReplaceLane: (lane: number) => simd(0x20, lane),
  i32x4GeU: simd(0x40),
  i32x4LtU: simd(0x3a),
  i32x4GtU: simd(0x3c),
  v128And: simd(0x4e),
  v128Or: simd(0x50),
  v128Bitselect: simd(0x52),
  i8x16ShrU: simd(0x6d),
  i8x16Sub: simd(0x71),
  i16x8ExtendLowI8x16S: simd(0x87),
  i16x8ExtendHighI8x16S: simd(0x88),
  i16x8ExtendLowI8x16U: simd(0x89),
  i16x8ExtendHighI8x16U: simd(0x8a),
  i32x4ExtendLowI16x8S: simd(0xa7),
  i32x4ExtendHighI16x8S: simd(0xa8),
  i32x4ExtendLowI16x8U: simd(0xa9),
  i32x4ExtendHighI16x8U: simd(0xaa),
  i32x4ShrU: simd(0xad),
  i32x4Add: simd(0xae),
  f32x4DemoteF64x2Zero: simd(0x5e),
  f64x2PromoteLowF32x4: simd(0x5f),
  f32x4Add: simd(0xe4),
  f32x4Sub: simd(0xe5),
  f32x4Mul: simd(0xe6),
  f32x4Div: simd(0xe7),
  f64x2Sub: simd(0xf1),
  f64x2Mul: simd(0xf2),
  f32x4ConvertI32x4S: simd(0xfa),
  f64x2ConvertLowI32x4S: simd(0xfe),
  // scalar control, i32 and f64
  select: [0x1b],
  i32Eq: [0x46],
  i32LtS: [0x48],
  i32GtS: [0x4a],
  i32LeS: [0x4c],
  i32GeS: [0x4e],
  i32Or: [0x72],
  /** i32.store, natural alignment (2^2). */
  i32Store: (offset = 0) => [0x36, 2, ...uleb(offset)],
  /** f64.load / f64.store, natural alignment (2^3). */
  f64Load: (offset = 0) => [0x2b, 3, ...uleb(offset)],
  f64Store: (offset = 0) => [0x39, 3, ...uleb(offset)],
  f64Const: (v: number) => [0x44, ...new Uint8Array(new Float64Array([v]).buffer)],
  f64Eq: [0x61],
  f64Lt: [0x63],
  f64Add: [0xa0],
  f64Sub: [0xa1],
  f64Mul: [0xa2],
  f64Div: [0xa3],
  i32TruncF64S: [0xaa],
  f64ConvertI32S: [0xb7],
  // f64x2 lanes (IEEE per lane, no fusing: bit-identical to the scalar ops)
  f64x2Splat: simd(0x14),
  f64x2ExtractLane: (lane: number) => simd(0x21, lane),
  f64x2ReplaceLane: (lane: number) => simd(0x22, lane),
  f64x2Lt: simd(0x49),
  f64x2Add: simd(0xf0),
  f64x2Div: simd(0xf3),
};

export interface FuncSpec {
  readonly name: string;
  readonly params: readonly number[];
  readonly results: readonly number[];
  /** Extra locals, in order after the params. */
  readonly locals: readonly number[];
  readonly body: readonly number[];
}

/**
 * A module importing one shared memory `env.mem` (growable to 4 GiB, so views stay valid
 * when it grows) and exporting `funcs`.
 */
export function assembleModule(funcs: readonly FuncSpec[]): Uint8Array {
  const section = (id: number, bytes: number[]): number[] => [id, ...uleb(bytes.length), ...bytes];
  const types = funcs.map((f) => [0x60, ...vec(f.params.map((p) => [p])), ...vec(f.results.map((r) => [r]))]);
  const imports = [[...name("env"), ...name("mem"), 0x02, 0x03, ...uleb(1), ...uleb(65536)]];
  const exports = funcs.map((f, i) => [...name(f.name), 0x00, ...uleb(i)]);
  const codes = funcs.map((f) => {
    // run-length encode the locals' types
    const groups: number[][] = [];
    for (const t of f.locals) {
      const last = groups[groups.length - 1];
      if (last && last[1] === t) last[0]++;
      else groups.push([1, t]);
    }
    const body = [...vec(groups.map(([n, t]) => [...uleb(n), t])), ...f.body, ...op.end];
    return [...uleb(body.length), ...body];
  });
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, vec(types)),
    ...section(2, vec(imports)),
    ...section(3, vec(funcs.map((_, i) => uleb(i)))),
    ...section(7, vec(exports)),
    ...section(10, vec(codes)),
  ]);
}

/** A function under construction: params are i32, locals are allocated by type. */
export class Fn {
  readonly body: number[] = [];
  private readonly locals: number[] = [];

  constructor(
    readonly name: string,
    readonly params: number,
  ) {}

  i32(): number {
    this.locals.push(I32);
    return this.params + this.locals.length - 1;
  }

  v128(): number {
    this.locals.push(V128);
    return this.params + this.locals.length - 1;
  }

  emit(...parts: readonly (readonly number[])[]): void {
    for (const p of parts) this.body.push(...p);
  }

  /** local = a + b (both locals or constants given as ops). */
  set(local: number, ...ops: readonly (readonly number[])[]): void {
    this.emit(...ops, op.localSet(local));
  }

  /** while (i < end) { body(); } — the body advances i. */
  whileLt(i: number, end: number, body: () => void): void {
    this.emit(op.block, op.loop, op.localGet(i), op.localGet(end), op.i32GeU, op.brIf(1));
    body();
    this.emit(op.br(0), op.end, op.end);
  }

  spec(): FuncSpec {
    return {
      name: this.name,
      params: new Array<number>(this.params).fill(I32),
      results: [],
      locals: this.locals,
      body: this.body,
    };
  }
}
