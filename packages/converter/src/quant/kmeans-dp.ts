/**
 * The exact 1-D k-means DP of kmeans.ts as a WebAssembly SIMD kernel (written with ir's
 * encoder): the same divide-and-conquer over the same ranges, two candidate splits per f64x2
 * step. Every lane does the scalar code's IEEE operations in the same order and the lanes'
 * minima are merged keeping the first index, so the split points — and the palettization —
 * are bit-identical to the JavaScript version, about twice as fast (the DP is most of a LUT4
 * conversion). kmeans.ts falls back to JavaScript where WebAssembly SIMD is unavailable.
 *
 * Memory (one instance per thread): cum, u1, u2, prev, cur as f64[d + 1], then the split points
 * as i32[k][d + 1], then the explicit recursion stack.
 */
import { wasmAsm } from "@anemll-qwen35/ir/mil";

const { F64, I32, V128, op, assembleModule } = wasmAsm;

// params (i32 byte addresses, then sizes)
const P_CUM = 0;
const P_U1 = 1;
const P_U2 = 2;
const P_PREV = 3;
const P_CUR = 4;
const P_ARG = 5;
const P_STACK = 6;
const D = 7;
const K = 8;
// i32 locals
const J = 9;
const C = 10;
const ROW = 11;
const TOP = 12;
const LO = 13;
const HI = 14;
const OPT_LO = 15;
const OPT_HI = 16;
const MID = 17;
const I = 18;
const END = 19;
const AT = 20;
const LAST = 21;
const SWAP = 22;
const AT1 = 23;
// f64 locals
const CJ = 24;
const S1 = 25;
const S2 = 26;
const BEST = 27;
const V = 28;
const SUM = 29;
const BEST1 = 30;
// v128 locals
const CJ_V = 31;
const S1_V = 32;
const S2_V = 33;
const BEST_V = 34;
const AT_V = 35;
const I_V = 36;
const V_V = 37;
const SUM_V = 38;
const M_V = 39;

const get = op.localGet;
const set = op.localSet;
/** address p + i·8 of f64 element i */
const f64At = (p: number, i: number[]) => [...i, ...op.i32Const(3), ...op.i32Shl, ...get(p), ...op.i32Add];

function dpBody(): number[] {
  const b: number[] = [];
  const emit = (...parts: (number[] | readonly number[])[]) => {
    for (const p of parts) b.push(...p);
  };
  const push4 = (a: number[], c: number[], e: number[], f: number[]) => {
    emit(get(TOP), a, op.i32Store(0), get(TOP), c, op.i32Store(4));
    emit(get(TOP), e, op.i32Store(8), get(TOP), f, op.i32Store(12));
    emit(get(TOP), op.i32Const(16), op.i32Add, set(TOP));
  };
  // first row: prev[j] = cost(0, j), arg[0][j] = 0
  emit(op.i32Const(1), set(J), op.block, op.loop);
  emit(get(J), get(D), op.i32GtS, op.brIf(1));
  emit(f64At(P_U1, get(J)), op.f64Load(), get(P_U1), op.f64Load(), op.f64Sub, set(SUM));
  emit(f64At(P_PREV, get(J)));
  emit(f64At(P_U2, get(J)), op.f64Load(), get(P_U2), op.f64Load(), op.f64Sub);
  emit(get(SUM), get(SUM), op.f64Mul);
  emit(f64At(P_CUM, get(J)), op.f64Load(), get(P_CUM), op.f64Load(), op.f64Sub, op.f64Div);
  emit(op.f64Sub, op.f64Store());
  emit(get(J), op.i32Const(2), op.i32Shl, get(P_ARG), op.i32Add, op.i32Const(0), op.i32Store());
  emit(get(J), op.i32Const(1), op.i32Add, set(J), op.br(0), op.end, op.end);
  // rows c = 1 … k − 1
  emit(op.i32Const(1), set(C), op.block, op.loop);
  emit(get(C), get(K), op.i32GeS, op.brIf(1));
  emit(get(C), get(K), op.i32Const(1), op.i32Sub, op.i32Eq, set(LAST));
  emit(
    get(C),
    get(D),
    op.i32Const(1),
    op.i32Add,
    op.i32Mul,
    op.i32Const(2),
    op.i32Shl,
    get(P_ARG),
    op.i32Add,
    set(ROW),
  );
  emit(get(P_STACK), set(TOP));
  push4([...get(C), ...op.i32Const(1), ...op.i32Add], get(D), get(C), [
    ...get(D),
    ...op.i32Const(1),
    ...op.i32Sub,
  ]);
  // while the stack is not empty
  emit(op.block, op.loop);
  emit(get(TOP), get(P_STACK), op.i32LeS, op.brIf(1));
  emit(get(TOP), op.i32Const(16), op.i32Sub, set(TOP));
  emit(get(TOP), op.i32Load(0), set(LO), get(TOP), op.i32Load(4), set(HI));
  emit(get(TOP), op.i32Load(8), set(OPT_LO), get(TOP), op.i32Load(12), set(OPT_HI));
  emit(get(LO), get(HI), op.i32GtS, op.brIf(0));
  emit(get(LO), get(HI), op.i32Add, op.i32Const(1), op.i32ShrU, set(MID));
  emit(f64At(P_CUM, get(MID)), op.f64Load(), set(CJ));
  emit(f64At(P_U1, get(MID)), op.f64Load(), set(S1));
  emit(f64At(P_U2, get(MID)), op.f64Load(), set(S2));
  // end = min(mid − 1, optHi)
  emit(get(MID), op.i32Const(1), op.i32Sub, get(OPT_HI), get(MID), op.i32Const(1), op.i32Sub, get(OPT_HI));
  emit(op.i32LtS, op.select, set(END));
  // pairs of candidates i, i + 1
  emit(
    get(CJ),
    op.f64x2Splat,
    set(CJ_V),
    get(S1),
    op.f64x2Splat,
    set(S1_V),
    get(S2),
    op.f64x2Splat,
    set(S2_V),
  );
  emit(op.f64Const(Number.POSITIVE_INFINITY), op.f64x2Splat, set(BEST_V));
  emit(get(OPT_LO), op.f64ConvertI32S, op.f64x2Splat, set(AT_V));
  emit(
    get(AT_V),
    get(OPT_LO),
    op.i32Const(1),
    op.i32Add,
    op.f64ConvertI32S,
    op.f64x2ReplaceLane(1),
    set(I_V),
  );
  emit(get(OPT_LO), set(I), op.block, op.loop);
  emit(get(I), get(END), op.i32GeS, op.brIf(1));
  emit(get(S1_V), f64At(P_U1, get(I)), op.v128Load(), op.f64x2Sub, set(SUM_V));
  emit(f64At(P_PREV, get(I)), op.v128Load());
  emit(get(S2_V), f64At(P_U2, get(I)), op.v128Load(), op.f64x2Sub);
  emit(get(SUM_V), get(SUM_V), op.f64x2Mul);
  emit(get(CJ_V), f64At(P_CUM, get(I)), op.v128Load(), op.f64x2Sub, op.f64x2Div);
  emit(op.f64x2Sub, op.f64x2Add, set(V_V));
  emit(get(V_V), get(BEST_V), op.f64x2Lt, set(M_V));
  emit(get(V_V), get(BEST_V), get(M_V), op.v128Bitselect, set(BEST_V));
  emit(get(I_V), get(AT_V), get(M_V), op.v128Bitselect, set(AT_V));
  emit(get(I_V), op.f64Const(2), op.f64x2Splat, op.f64x2Add, set(I_V));
  emit(get(I), op.i32Const(2), op.i32Add, set(I), op.br(0), op.end, op.end);
  // merge the lanes: the smaller value, on a tie the earlier index
  emit(
    get(BEST_V),
    op.f64x2ExtractLane(0),
    set(BEST),
    get(AT_V),
    op.f64x2ExtractLane(0),
    op.i32TruncF64S,
    set(AT),
  );
  emit(
    get(BEST_V),
    op.f64x2ExtractLane(1),
    set(BEST1),
    get(AT_V),
    op.f64x2ExtractLane(1),
    op.i32TruncF64S,
    set(AT1),
  );
  emit(get(BEST1), get(BEST), op.f64Lt);
  emit(get(BEST1), get(BEST), op.f64Eq, get(AT1), get(AT), op.i32LtS, op.i32And);
  emit(op.i32Or, op.if, get(BEST1), set(BEST), get(AT1), set(AT), op.end);
  // an odd last candidate, in scalar
  emit(get(I), get(END), op.i32LeS, op.if);
  emit(get(S1), f64At(P_U1, get(I)), op.f64Load(), op.f64Sub, set(SUM));
  emit(f64At(P_PREV, get(I)), op.f64Load());
  emit(get(S2), f64At(P_U2, get(I)), op.f64Load(), op.f64Sub);
  emit(get(SUM), get(SUM), op.f64Mul);
  emit(get(CJ), f64At(P_CUM, get(I)), op.f64Load(), op.f64Sub, op.f64Div);
  emit(op.f64Sub, op.f64Add, set(V));
  emit(get(V), get(BEST), op.f64Lt, op.if, get(V), set(BEST), get(I), set(AT), op.end);
  emit(op.end);
  // cur[mid] = best; arg[c][mid] = at; then the halves (right pushed first, left solved first)
  emit(f64At(P_CUR, get(MID)), get(BEST), op.f64Store());
  emit(get(MID), op.i32Const(2), op.i32Shl, get(ROW), op.i32Add, get(AT), op.i32Store());
  push4([...get(MID), ...op.i32Const(1), ...op.i32Add], get(HI), get(AT), get(OPT_HI));
  // the last row is needed at d only: its left halves are skipped
  emit(get(LAST), op.i32Eqz, op.if);
  push4(get(LO), [...get(MID), ...op.i32Const(1), ...op.i32Sub], get(OPT_LO), get(AT));
  emit(op.end);
  emit(op.br(0), op.end, op.end);
  // next row: swap prev and cur
  emit(get(P_PREV), set(SWAP), get(P_CUR), set(P_PREV), get(SWAP), set(P_CUR));
  emit(get(C), op.i32Const(1), op.i32Add, set(C), op.br(0), op.end, op.end);
  return b;
}

interface DpInstance {
  readonly memory: { buffer: ArrayBufferLike; grow(pages: number): number };
  readonly dp: (...args: number[]) => void;
}

interface WasmApi {
  Memory: new (d: { initial: number; maximum: number; shared: boolean }) => DpInstance["memory"];
  Module: new (bytes: Uint8Array) => object;
  Instance: new (m: object, imports: object) => { exports: Record<string, unknown> };
  validate(bytes: Uint8Array): boolean;
}

const wasm = (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;
let compiled: object | null | undefined;

function module(): object | null {
  if (compiled !== undefined) return compiled;
  const bytes = assembleModule([
    {
      name: "dp",
      params: new Array(9).fill(I32),
      results: [],
      locals: [...new Array(15).fill(I32), ...new Array(7).fill(F64), ...new Array(9).fill(V128)],
      body: dpBody(),
    },
  ]);
  compiled = wasm?.validate(bytes) ? new wasm.Module(bytes) : null;
  return compiled;
}

const PAGE = 65536;

/** One thread's DP: arrays on its memory, sized by `reserve`. */
export class WasmDp {
  private readonly inst: DpInstance;
  private capacity = -1;
  private maxK = 0;
  cum: Float64Array<ArrayBufferLike> = new Float64Array(0);
  u1: Float64Array<ArrayBufferLike> = new Float64Array(0);
  u2: Float64Array<ArrayBufferLike> = new Float64Array(0);
  arg: Int32Array<ArrayBufferLike> = new Int32Array(0);

  private constructor(inst: DpInstance) {
    this.inst = inst;
  }

  /** null where WebAssembly SIMD (or shared memory) is unavailable. */
  static create(): WasmDp | null {
    const m = module();
    if (!m || !wasm) return null;
    const memory = new wasm.Memory({ initial: 1, maximum: 65536, shared: true });
    const { exports } = new wasm.Instance(m, { env: { mem: memory } });
    return new WasmDp({ memory, dp: exports.dp as DpInstance["dp"] });
  }

  /** Room for d distinct values and k clusters (the arrays are views on this thread's memory). */
  reserve(d: number, k: number): void {
    if (d <= this.capacity && k <= this.maxK) return;
    this.capacity = Math.max(d, this.capacity);
    this.maxK = Math.max(k, this.maxK);
    const n = this.capacity + 1;
    const bytes = 5 * n * 8 + this.maxK * n * 4 + this.stackBytes();
    const have = this.inst.memory.buffer.byteLength;
    if (bytes > have) this.inst.memory.grow(Math.ceil((bytes - have) / PAGE));
    const buf = this.inst.memory.buffer;
    this.cum = new Float64Array(buf, 0, n);
    this.u1 = new Float64Array(buf, n * 8, n);
    this.u2 = new Float64Array(buf, 2 * n * 8, n);
    this.arg = new Int32Array(buf, 5 * n * 8, this.maxK * n);
  }

  /** Fills the split points `arg` (row stride d + 1) for the d distinct values in cum/u1/u2. */
  solve(d: number, k: number): void {
    const n = this.capacity + 1;
    // the DP indexes rows by d + 1: pack them at that stride from the start of `arg`
    this.inst.dp(0, n * 8, 2 * n * 8, 3 * n * 8, 4 * n * 8, 5 * n * 8, 5 * n * 8 + this.maxK * n * 4, d, k);
  }

  private stackBytes(): number {
    return 16 * 2 * (Math.ceil(Math.log2(this.capacity + 2)) + 4);
  }
}
