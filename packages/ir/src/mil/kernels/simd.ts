/**
 * WebAssembly SIMD matrix kernels and the shared-memory heap they read from.
 *
 * Why: a scalar JavaScript dot product runs at ~0.6 GMAC/s; the f32x4 kernel below runs
 * several times faster and the decode matvec is memory-bound again. Weights that the
 * kernels use live in one shared `WebAssembly.Memory` (shared, so growing it never detaches
 * existing views); constants are materialised there directly (see `allocWeightF32`).
 */
import os from "node:os";
import { Worker } from "node:worker_threads";
import { type EwForm, type EwOp, elementwiseKernels, ewName } from "./elementwise-kernels.js";
import { ntRangeKernel, packedKernels } from "./packed-kernels.js";
import { assembleModule, type FuncSpec, I32, op, V128 } from "./wasm-asm.js";

/**
 * `nt{R}(x, w, out, n4, kb, ldo)`: for n in [0, n4) step 4 and r in [0, R):
 *   out[r*ldo + n + j] = Σ_k x[r*K + k] · w[(n + j)*K + k]   (j = 0..3)
 * Byte pointers; kb = K·4 with K a multiple of 4; ldo in bytes. Each weight vector loaded is
 * used by R rows of x, 4·R accumulators.
 */
function ntKernel(rows: 1 | 2): FuncSpec {
  // params
  const X = 0;
  const W = 1;
  const OUT = 2;
  const N4 = 3;
  const KB = 4;
  const LDO = 5;
  // i32 locals
  const N = 6;
  const K = 7;
  const W0 = 8;
  const OB = 12;
  const X1 = 13;
  // v128 locals
  const ACC = 14; // ACC + r*4 + j
  const XA = ACC + 4 * rows;
  const WV = XA + rows;
  const b: number[] = [];
  const emit = (...parts: number[][]) => {
    for (const p of parts) b.push(...p);
  };
  emit(op.localGet(X), op.localGet(KB), op.i32Add, op.localSet(X1));
  emit(op.i32Const(0), op.localSet(N), op.localGet(W), op.localSet(W0), op.localGet(OUT), op.localSet(OB));
  emit(op.block, op.loop);
  emit(op.localGet(N), op.localGet(N4), op.i32GeU, op.brIf(1));
  for (let j = 1; j < 4; j++) emit(op.localGet(W0 + j - 1), op.localGet(KB), op.i32Add, op.localSet(W0 + j));
  for (let a = 0; a < 4 * rows; a++) emit(op.v128Zero, op.localSet(ACC + a));
  emit(op.i32Const(0), op.localSet(K));
  emit(op.block, op.loop);
  emit(op.localGet(K), op.localGet(KB), op.i32GeU, op.brIf(1));
  for (let r = 0; r < rows; r++)
    emit(op.localGet(r === 0 ? X : X1), op.localGet(K), op.i32Add, op.v128Load(), op.localSet(XA + r));
  for (let j = 0; j < 4; j++) {
    emit(op.localGet(W0 + j), op.localGet(K), op.i32Add, op.v128Load(), op.localSet(WV));
    for (let r = 0; r < rows; r++) {
      const acc = ACC + r * 4 + j;
      emit(
        op.localGet(acc),
        op.localGet(XA + r),
        op.localGet(WV),
        op.f32x4Mul,
        op.f32x4Add,
        op.localSet(acc),
      );
    }
  }
  emit(op.localGet(K), op.i32Const(16), op.i32Add, op.localSet(K), op.br(0), op.end, op.end);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < 4; j++) {
      const acc = ACC + r * 4 + j;
      emit(op.localGet(OB));
      if (r > 0) emit(op.localGet(LDO), op.i32Add);
      emit(op.localGet(acc), op.f32x4ExtractLane(0), op.localGet(acc), op.f32x4ExtractLane(1), op.f32Add);
      emit(
        op.localGet(acc),
        op.f32x4ExtractLane(2),
        op.localGet(acc),
        op.f32x4ExtractLane(3),
        op.f32Add,
        op.f32Add,
      );
      emit(op.f32Store(j * 4));
    }
  }
  emit(op.localGet(W0 + 3), op.localGet(KB), op.i32Add, op.localSet(W0));
  emit(op.localGet(OB), op.i32Const(16), op.i32Add, op.localSet(OB));
  emit(op.localGet(N), op.i32Const(4), op.i32Add, op.localSet(N), op.br(0), op.end, op.end);
  return {
    name: `nt${rows}`,
    params: [I32, I32, I32, I32, I32, I32],
    results: [],
    locals: [...new Array<number>(8).fill(I32), ...new Array<number>(4 * rows + rows + 1).fill(V128)],
    body: b,
  };
}

type KernelFn = (
  a0: number,
  a1: number,
  a2: number,
  a3: number,
  a4: number,
  a5: number,
  a6: number,
  a7: number,
) => void;

/**
 * The module's functions: nt1/nt2 (dense), `ntr` (dense over a row range) and the packed-weight
 * kernels. Every exported kernel but nt1/nt2 takes 8 i32 arguments, the last two a row range.
 */
const KERNELS: readonly FuncSpec[] = [
  ntKernel(1),
  ntKernel(2),
  ntRangeKernel(0, 1),
  ...packedKernels(3, 2),
  ...elementwiseKernels(),
];
/** Function index of each kernel by name. */
export const KERNEL_INDEX: ReadonlyMap<string, number> = new Map(KERNELS.map((k, i) => [k.name, i]));
let kernelBytes: Uint8Array | undefined;

/** The slice of the WebAssembly JS API used here (the project's TS lib has no DOM types). */
interface WasmMemory {
  readonly buffer: SharedArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  Memory: new (d: { initial: number; maximum: number; shared: boolean }) => WasmMemory;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (m: object, imports: object) => { exports: Record<string, unknown> };
}
const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

const PAGE = 65536;
const ALIGN = 64;
/** A wasm32 memory holds at most 4 GiB; more weights go to further heaps. */
const MEMORY_LIMIT = 2 ** 32;

/** A growable block of heap memory reused between calls (inputs, outputs, decoded rows). */
class Scratch {
  off = 0;
  cap = 0;
  ensure(h: WasmHeap, bytes: number): number | undefined {
    if (bytes > this.cap) {
      if (this.cap) h.release(this.off);
      this.cap = 0;
      const off = h.alloc(bytes);
      if (off === undefined) return undefined;
      this.off = off;
      this.cap = bytes;
    }
    return this.off;
  }
}

/**
 * One shared `WebAssembly.Memory` with the kernels instantiated over it, a first-fit allocator
 * (64-byte aligned blocks) and worker threads that run kernels on the same memory.
 */
class WasmHeap {
  readonly memory: WasmMemory;
  readonly fns: readonly KernelFn[];
  private top = ALIGN; // offset 0 stays unused
  private readonly freeList: { off: number; size: number }[] = [];
  private readonly sizes = new Map<number, number>();
  private readonly offsets = new WeakMap<Float32Array, number>();
  private readonly registry = new FinalizationRegistry<number>((off) => this.release(off));
  private pool: WorkerPool | null | undefined;
  /** Inputs and outputs of products, and per thread a block of decoded weight rows. */
  readonly xScratch = new Scratch();
  readonly outScratch = new Scratch();
  /** Copies of weights that live outside the heap. */
  readonly wScratch = new Scratch();
  /** Small elementwise operands that live outside the heap. */
  readonly ewScratch = new Scratch();
  private readonly rowScratch: Scratch[] = [];
  /** Products split over worker threads so far (for tests and benchmarks). */
  parallelRuns = 0;

  /** Threads that share large products (this one included). */
  get threads(): number {
    return (this.workers()?.size ?? 0) + 1;
  }

  constructor() {
    this.memory = new wasm.Memory({ initial: 1, maximum: 65536, shared: true });
    kernelBytes ??= assembleModule(KERNELS);
    const inst = new wasm.Instance(new wasm.Module(kernelBytes), { env: { mem: this.memory } });
    this.fns = KERNELS.map((k) => inst.exports[k.name] as KernelFn);
  }

  /**
   * out rows [0, M) x cols [0, n4) of x·wᵀ (byte offsets; kb = K·4; ldo = output row bytes).
   * Large products are split by weight rows over the worker threads and this thread.
   */
  nt(M: number, x: number, w: number, out: number, n4: number, kb: number, ldo: number): void {
    this.rows(KERNEL_INDEX.get("ntr") as number, n4, n4 * (kb / 4), () => [x, w, out, M, kb, ldo]);
  }

  /**
   * Runs kernel `fn` (8 arguments: six from `args(thread)`, then a row range) over rows
   * [0, n), n a multiple of 4. With at least PARALLEL_MIN_VALUES weight values (`values`), the
   * rows are split in multiples of 4 over the worker threads and this thread.
   */
  rows(fn: number, n: number, values: number, args: (thread: number) => readonly number[]): void {
    if (n === 0) return;
    const pool = values >= PARALLEL_MIN_VALUES ? this.workers() : null;
    const f = this.fns[fn];
    if (!pool) {
      const a = args(0);
      f(a[0], a[1], a[2], a[3], a[4], a[5], 0, n);
      return;
    }
    this.parallelRuns++;
    const parts = pool.size + 1;
    const chunk = Math.ceil(n / 4 / parts) * 4;
    const jobs: number[] = [];
    for (let p = 1; p < parts; p++) {
      const n0 = Math.min(n, p * chunk);
      const n1 = Math.min(n, n0 + chunk);
      jobs.push(n1 > n0 ? pool.post(p - 1, fn, [...args(p), n0, n1]) : -1);
    }
    const a = args(0);
    f(a[0], a[1], a[2], a[3], a[4], a[5], 0, Math.min(chunk, n));
    jobs.forEach((seq, i) => {
      if (seq >= 0) pool.wait(i, seq);
    });
  }

  /**
   * out = x ∘ y over `rows` rows of n values (`ew_*` of elementwise-kernels.ts): byte offsets,
   * xs / ys the operands' row strides in bytes, out contiguous.
   */
  binary(
    o: EwOp,
    form: EwForm,
    x: number,
    y: number,
    out: number,
    rows: number,
    n: number,
    xs: number,
    ys: number,
  ): void {
    this.fns[KERNEL_INDEX.get(ewName(o, form)) as number](x, y, out, rows, n, xs, ys, 0);
  }

  /** out[p·inner + i] = Σ_r x[(p·R + r)·inner + i] summed in float64 (`rsum`); byte offsets. */
  sumAxis(x: number, out: number, outer: number, R: number, inner: number): void {
    this.fns[KERNEL_INDEX.get("rsum") as number](x, out, outer, R, inner, 0, 0, 0);
  }

  /** Rounds the n values at byte offset x to fp16 in place (`round_f16*`; a heap array's block). */
  roundF16(x: number, n: number, flush: boolean): void {
    this.fns[KERNEL_INDEX.get(flush ? "round_f16_flush" : "round_f16") as number](x, n, 0, 0, 0, 0, 0, 0);
  }

  /** Thread `t`'s block of at least `bytes` for decoded rows; undefined when out of memory. */
  rowScratchFor(t: number, bytes: number): number | undefined {
    while (this.rowScratch.length <= t) this.rowScratch.push(new Scratch());
    return this.rowScratch[t].ensure(this, bytes);
  }

  private workers(): WorkerPool | null {
    if (this.pool === undefined) {
      const n = threadCount() - 1;
      if (n < 1) this.pool = null;
      else {
        const ctl = this.alloc(n * 64);
        this.pool = ctl === undefined ? null : new WorkerPool(this.memory, kernelBytes as Uint8Array, ctl, n);
      }
    }
    return this.pool;
  }

  /** Allocates `bytes`; undefined when the memory cannot grow that far. */
  alloc(bytes: number): number | undefined {
    const size = Math.ceil(Math.max(bytes, 1) / ALIGN) * ALIGN;
    for (let i = 0; i < this.freeList.length; i++) {
      const f = this.freeList[i];
      if (f.size >= size) {
        const off = f.off;
        if (f.size === size) this.freeList.splice(i, 1);
        else {
          f.off += size;
          f.size -= size;
        }
        this.sizes.set(off, size);
        return off;
      }
    }
    const end = this.top + size;
    if (end > MEMORY_LIMIT - PAGE) return undefined;
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      try {
        this.memory.grow(Math.ceil((end - have) / PAGE));
      } catch {
        return undefined;
      }
    }
    const off = this.top;
    this.top = end;
    this.sizes.set(off, size);
    return off;
  }

  release(off: number): void {
    const size = this.sizes.get(off);
    if (size === undefined) return;
    this.sizes.delete(off);
    // insert sorted and merge neighbours
    let i = 0;
    while (i < this.freeList.length && this.freeList[i].off < off) i++;
    this.freeList.splice(i, 0, { off, size });
    const next = this.freeList[i + 1];
    if (next && off + size === next.off) {
      this.freeList[i].size += next.size;
      this.freeList.splice(i + 1, 1);
    }
    const prev = this.freeList[i - 1];
    if (prev && prev.off + prev.size === off) {
      prev.size += this.freeList[i].size;
      this.freeList.splice(i, 1);
    }
  }

  /** A Float32Array in the heap, freed when the array is garbage-collected. */
  f32(n: number): Float32Array | undefined {
    const off = this.alloc(n * 4);
    if (off === undefined) return undefined;
    const view = new Float32Array(this.memory.buffer, off, n);
    this.offsets.set(view, off);
    this.registry.register(view, off);
    return view;
  }

  /** Frees block `off` when `owner` is garbage-collected. */
  releaseWith(owner: object, off: number): void {
    this.registry.register(owner, off);
  }

  /** Byte offset of a heap array made by `f32`, else undefined. */
  offsetOf(a: Float32Array): number | undefined {
    return this.offsets.get(a);
  }

  view(off: number, n: number): Float32Array {
    return new Float32Array(this.memory.buffer, off, n);
  }

  bytesAt(off: number, n: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, off, n);
  }
}

/** Products reading at least this many weight values are split across threads. */
const PARALLEL_MIN_VALUES = 1 << 20;

/** Threads for large products: ANEMLL_THREADS, else the available cores (at most 8). */
function threadCount(): number {
  const env = Number(process.env.ANEMLL_THREADS);
  if (Number.isInteger(env) && env >= 1) return env;
  return Math.min(8, os.availableParallelism?.() ?? os.cpus().length);
}

/**
 * The worker side: instantiate the same kernels over the same memory, then serve jobs posted
 * in its 64-byte control slot (i32: [seq, done, fn, 8 arguments, …, failed]) until seq < 0.
 */
const WORKER_SOURCE = `
const { workerData } = require("node:worker_threads");
const { mem, bytes, ctl, names } = workerData;
const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { mem } });
const fns = names.map((n) => inst.exports[n]);
const c = new Int32Array(mem.buffer, ctl, 16);
let seen = 0;
for (;;) {
  Atomics.wait(c, 0, seen);
  seen = Atomics.load(c, 0);
  if (seen < 0) break;
  try {
    fns[c[2]](c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
  } catch {
    c[15] = 1;
  }
  Atomics.store(c, 1, seen);
  Atomics.notify(c, 1);
}
`;

/** Worker threads sharing the heap's memory, driven through Atomics (no message passing). */
class WorkerPool {
  private readonly slots: Int32Array[] = [];
  private readonly seqs: number[] = [];

  constructor(
    memory: WasmMemory,
    bytes: Uint8Array,
    ctl: number,
    readonly size: number,
  ) {
    const names = KERNELS.map((k) => k.name);
    for (let i = 0; i < size; i++) {
      const slot = ctl + i * 64;
      this.slots.push(new Int32Array(memory.buffer, slot, 16).fill(0)); // the block may be reused memory
      this.seqs.push(0);
      const w = new Worker(WORKER_SOURCE, {
        eval: true,
        workerData: { mem: memory, bytes, ctl: slot, names },
      });
      w.unref(); // never keeps the process alive
    }
  }

  /** Posts kernel `fn` with its 8 arguments to worker i; returns the job's sequence number. */
  post(i: number, fn: number, args: readonly number[]): number {
    const c = this.slots[i];
    c[2] = fn;
    for (let k = 0; k < args.length; k++) c[3 + k] = args[k];
    const seq = ++this.seqs[i];
    Atomics.store(c, 0, seq);
    Atomics.notify(c, 0);
    return seq;
  }

  /** Blocks until worker i finished job `seq`. */
  wait(i: number, seq: number): void {
    const c = this.slots[i];
    const t0 = Date.now();
    for (;;) {
      const done = Atomics.load(c, 1);
      if (done === seq) break;
      Atomics.wait(c, 1, done, 1000);
      if (Date.now() - t0 > 60_000)
        throw new Error(`SIMD worker ${i} did not finish a matrix product within 60 s`);
    }
    if (c[15]) {
      c[15] = 0;
      throw new Error(`SIMD worker ${i} failed a matrix product (out-of-bounds memory access)`);
    }
  }
}

let heap: WasmHeap | null | undefined;

/** The SIMD heap, or null where WebAssembly SIMD or shared memory is unavailable. */
export function simdHeap(): WasmHeap | null {
  if (heap === undefined) {
    try {
      heap = process.env.ANEMLL_NO_WASM ? null : new WasmHeap();
    } catch {
      heap = null;
    }
  }
  return heap;
}

/** Heaps after the first, made when a heap's 4 GiB are taken. */
const moreHeaps: WasmHeap[] = [];

/**
 * A heap with `bytes` free, and the offset allocated there: the first heap that has room, else a
 * new one (each wasm32 memory holds at most 4 GiB). undefined without SIMD or when nothing fits.
 */
export function allocAnyHeap(bytes: number): { heap: WasmHeap; off: number } | undefined {
  const first = simdHeap();
  if (!first) return undefined;
  for (const h of [first, ...moreHeaps]) {
    const off = h.alloc(bytes);
    if (off !== undefined) return { heap: h, off };
  }
  if (bytes > MEMORY_LIMIT / 2) return undefined;
  let h: WasmHeap;
  try {
    h = new WasmHeap();
  } catch {
    return undefined;
  }
  moreHeaps.push(h);
  const off = h.alloc(bytes);
  return off === undefined ? undefined : { heap: h, off };
}

export type { WasmHeap };

/** Arrays at least this long are materialised in the heap when they may serve as weights. */
export const HEAP_MIN_ELEMENTS = 1 << 14;

/** Allocates a Float32Array for a constant that may be a matrix weight: in the heap when large. */
export function allocWeightF32(n: number): Float32Array {
  if (n >= HEAP_MIN_ELEMENTS) {
    const h = simdHeap();
    const a = h?.f32(n);
    if (a) return a;
  }
  return new Float32Array(n);
}
