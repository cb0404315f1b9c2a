/**
 * A minimal WebAssembly binary encoder — just enough to emit the interpreter's SIMD matrix
 * kernels at startup without a toolchain. Encodings follow the WebAssembly core spec
 * (binary format, §5) and the fixed-width SIMD proposal (0xFD-prefixed opcodes).
 */

export const I32 = 0x7f;
export const F32 = 0x7d;
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
  block: [0x02, 0x40],
  loop: [0x03, 0x40],
  end: [0x0b],
  br: (depth: number) => [0x0c, ...uleb(depth)],
  brIf: (depth: number) => [0x0d, ...uleb(depth)],
  f32Add: [0x92],
  /** f32.store with natural alignment (2^2) and a constant byte offset. */
  f32Store: (offset = 0) => [0x38, 2, ...uleb(offset)],
  f32Load: (offset = 0) => [0x2a, 2, ...uleb(offset)],
  f32Mul: [0x94],
  /** v128.load, alignment hint 2^2 (element-aligned; unaligned access is legal). */
  v128Load: (offset = 0) => simd(0x00, 2, ...uleb(offset)),
  v128Store: (offset = 0) => simd(0x0b, 2, ...uleb(offset)),
  v128Zero: simd(0x0c, ...new Array<number>(16).fill(0)),
  f32x4Splat: simd(0x13),
  f32x4ExtractLane: (lane: number) => simd(0x1f, lane),
  f32x4Add: simd(0xe4),
  f32x4Mul: simd(0xe6),
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
