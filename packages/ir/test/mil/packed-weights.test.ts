/**
 * Packed weights: LUT and int8 constexpr weights kept compressed give the same bits as the same
 * program with every weight expanded first ("dense"), in fp32 and fp16 modes, through linear,
 * conv, matmul and gather; large tables read by row from their file.
 */
import { join } from "node:path";
import { f16BitsToF32, f32ToF16Bits, type Tensor, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { readMlPackage, writeMlPackage } from "../../src/mil/format/index.js";
import { roundF16InPlace } from "../../src/mil/fp16.js";
import {
  type InterpreterOptions,
  MilBuilder,
  MilInterpreter,
  type MilVar,
  type Program,
  tensorType,
} from "../../src/mil/index.js";
import { PackedWeight } from "../../src/mil/kernels/packed.js";
import { simdHeap } from "../../src/mil/kernels/simd.js";
import type { ConstValue } from "../../src/mil/program.js";
import { lazyConstToRt } from "../../src/mil/values.js";
import { scratchDir } from "../testkit.js";

const dir = scratchDir("anemll-packed-");

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

const f16 = (v: number) => f16BitsToF32(f32ToF16Bits(v));

interface WeightSpec {
  readonly N: number;
  readonly K: number;
  /** Trailing 1×1 dims for conv weights. */
  readonly conv?: boolean;
  readonly dtype: "fp16" | "fp32";
  readonly seed: number;
}

/** A LUT weight [N, K(, 1, 1)]: palettes per `groupRows` rows (all rows: one palette), some subnormal. */
function lutWeight(b: MilBuilder, s: WeightSpec & { bits: number; groupRows: number }): MilVar {
  const r = lcg(s.seed);
  const entries = 2 ** s.bits;
  const groups = s.N / s.groupRows;
  const shape = s.conv ? [s.N, s.K, 1, 1] : [s.N, s.K];
  const lut = Float32Array.from({ length: groups * entries }, (_, i) =>
    // every 7th entry an fp16 subnormal, so flushing matters
    i % 7 === 3 ? (r() - 0.5) * 2 ** -16 : r() - 0.5,
  );
  return b.constexprLutToDense({
    indices: {
      data: Uint8Array.from({ length: s.N * s.K }, () => Math.floor(r() * entries)),
      dtype: s.bits === 8 ? "uint8" : (`uint${s.bits}` as "uint4"),
      shape,
    },
    lut: { data: lut, dtype: s.dtype, shape: [groups, ...shape.slice(1).map(() => 1), entries, 1] },
    name: "w",
  });
}

/** An int8/uint8 blockwise weight with `blocks` scale blocks per row, per `groupRows` rows. */
function int8Weight(
  b: MilBuilder,
  s: WeightSpec & { signed: boolean; offset: boolean; blocks: number; groupRows: number },
): MilVar {
  const r = lcg(s.seed);
  const shape = s.conv ? [s.N, s.K, 1, 1] : [s.N, s.K];
  const sShape = [s.N / s.groupRows, s.blocks, ...shape.slice(2)];
  const nS = sShape.reduce((a, d) => a * d, 1);
  // scales spanning fp16's range: tiny ones make subnormal products, huge ones overflow to inf
  const scale = Float32Array.from({ length: nS }, (_, i) =>
    i % 5 === 0 ? 2 ** -20 * (1 + r()) : i % 11 === 0 ? 600 * (1 + r()) : r() * 0.02,
  );
  return b.constexprBlockwiseShiftScale({
    data: {
      data: s.signed
        ? Int8Array.from({ length: s.N * s.K }, () => Math.floor(r() * 256) - 128)
        : Uint8Array.from({ length: s.N * s.K }, () => Math.floor(r() * 256)),
      dtype: s.signed ? "int8" : "uint8",
      shape,
    },
    scale: { data: scale, dtype: s.dtype, shape: sShape },
    ...(s.offset
      ? {
          offset: {
            data: Float32Array.from({ length: nS }, () => (r() - 0.5) * 9.37),
            dtype: s.dtype,
            shape: sShape,
          },
        }
      : {}),
    name: "w",
  });
}

type Use = "linear" | "conv" | "matmul" | "gather";

/** y = op(x, w) for one use of the weight; x has M rows. */
function program(use: Use, M: number, weight: (b: MilBuilder) => MilVar, N: number, K: number): Program {
  const b = new MilBuilder();
  const dt = "fp16";
  if (use === "gather") {
    const ids = b.input("ids", tensorType("int32", [M]));
    b.output("y", b.gather({ x: weight(b), indices: ids, axis: 0 }));
    return b.program();
  }
  if (use === "conv") {
    const x = b.input("x", tensorType(dt, [1, K, 1, M]));
    b.output("y", b.conv({ x, weight: weight(b) }));
    return b.program();
  }
  const x = b.input("x", tensorType(dt, [M, K]));
  const w = weight(b);
  const bias = b.const(new Float32Array(N).fill(0.25), w.type.kind === "tensor" ? w.type.dtype : dt, [N]);
  if (use === "linear") b.output("y", b.linear({ x, weight: w, bias }));
  else b.output("y", b.matmul({ x, y: w, transposeY: true }));
  return b.program();
}

function inputs(use: Use, M: number, N: number, K: number): Record<string, Tensor> {
  const r = lcg(M * 31 + N + K);
  if (use === "gather")
    return {
      ids: tensor(
        "i32",
        [M],
        Int32Array.from({ length: M }, (_, i) => (i * 37 + 5) % N),
      ),
    };
  const x = Float32Array.from({ length: M * K }, () => f16(r() - 0.5));
  return { x: tensor("f32", use === "conv" ? [1, K, 1, M] : [M, K], x) };
}

/** Runs `p` packed and dense and checks that the outputs have the same bits. */
function expectSameBits(p: Program, x: Record<string, Tensor>, opts: InterpreterOptions): void {
  const run = (weights: "packed" | "dense") =>
    new MilInterpreter(p, { ...opts, weights }).run(x, { outputs: "fp32" }).outputs.y.data as Float32Array;
  const dense = run("dense");
  const packed = run("packed");
  expect(packed.length).toBe(dense.length);
  const a = new Uint32Array(dense.buffer, dense.byteOffset, dense.length);
  const b = new Uint32Array(packed.buffer, packed.byteOffset, packed.length);
  let bad = 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) bad++;
  expect(bad, `${bad} of ${a.length} values differ`).toBe(0);
}

/** K of a linear program's input x [M, K]. */
const kOf = (p: Program) => {
  const x = p.functions.main.inputs[0].type;
  return x.kind === "tensor" ? x.shape[1] : 0;
};

const MODES: [string, InterpreterOptions][] = [
  ["fp32", { precision: "fp32" }],
  ["fp16", { precision: "fp16" }],
  ["fp16 flushing subnormals", { precision: "fp16", flushSubnormals: true }],
];

describe.skipIf(!simdHeap())(
  "packed weights give the bits of the expanded weights (needs WebAssembly SIMD)",
  () => {
    // N = 70: 68 rows through the SIMD kernels + 2 through the scalar tail; M = 3: the row-block path
    for (const bits of [1, 2, 3, 4, 6, 8]) {
      for (const use of ["linear", "conv", "matmul", "gather"] as const) {
        it(`LUT${bits} through ${use}`, () => {
          for (const [groupRows, dtype, M] of [
            [2, "fp16", 1],
            [70, "fp32", 3],
          ] as const) {
            const N = 70;
            const K = 64;
            const p = program(
              use,
              M,
              (b) =>
                lutWeight(b, { N, K, bits, groupRows, dtype, conv: use === "conv", seed: bits * 10 + M }),
              N,
              K,
            );
            for (const [, opts] of MODES) expectSameBits(p, inputs(use, M, N, K), opts);
          }
        });
      }
    }

    for (const signed of [true, false]) {
      for (const offset of [false, true]) {
        it(`${signed ? "int8" : "uint8"}${offset ? " with offsets" : ""} through linear, conv, matmul and gather`, () => {
          for (const use of ["linear", "conv", "matmul", "gather"] as const) {
            for (const [blocks, groupRows, dtype, M] of [
              [1, 1, "fp16", 1],
              [4, 6, "fp16", 2],
              [2, 3, "fp32", 1],
            ] as const) {
              const N = 66;
              const K = 64;
              const spec = {
                N,
                K,
                signed,
                offset,
                blocks,
                groupRows,
                dtype,
                conv: use === "conv",
                seed: blocks + M,
              };
              const p = program(use, M, (b) => int8Weight(b, spec), N, K);
              for (const [, opts] of MODES) expectSameBits(p, inputs(use, M, N, K), opts);
            }
          }
        });
      }
    }

    it("keeps supported weights packed and expands the layouts it has no kernel for", () => {
      const packedOf = (p: Program) => {
        const it = new MilInterpreter(p);
        it.run(inputs("linear", 1, 64, p === undefined ? 0 : kOf(p)));
        // the interpreter's constants after the first run
        const env = (it as unknown as { constEnv: ({ packed?: unknown } | undefined)[] }).constEnv;
        return env.some((v) => v?.packed !== undefined);
      };
      const lut = (groupAlongK: boolean, K: number) =>
        program(
          "linear",
          1,
          (b) =>
            b.constexprLutToDense({
              indices: { data: new Uint8Array(64 * K), dtype: "uint4", shape: [64, K] },
              lut: {
                data: new Float32Array((groupAlongK ? 2 : 1) * 16),
                dtype: "fp16",
                shape: [1, groupAlongK ? 2 : 1, 16, 1],
              },
            }),
          64,
          K,
        );
      expect(packedOf(lut(false, 64))).toBe(true);
      expect(packedOf(lut(true, 64))).toBe(false); // palettes grouped along the input channels
      expect(packedOf(lut(false, 72))).toBe(false); // K not a multiple of 16
      // and the dense fallback still computes the right thing
      expectSameBits(lut(true, 64), inputs("linear", 1, 64, 64), {});
    });

    it("splits large packed products over the worker threads with the same bits", () => {
      const N = 1028;
      const K = 1024; // 1 Mi values: the threading threshold
      const p = program(
        "linear",
        1,
        (b) => lutWeight(b, { N, K, bits: 4, groupRows: 4, dtype: "fp16", seed: 5 }),
        N,
        K,
      );
      const h = simdHeap();
      const before = h?.parallelRuns ?? 0;
      expectSameBits(p, inputs("linear", 1, N, K), {});
      if ((h?.threads ?? 1) > 1) expect(h?.parallelRuns).toBeGreaterThanOrEqual(before + 2);
    });

    it("rounds int8 products to fp16 exactly as roundF16InPlace, for a spread of fp16 scales × every int8 value", () => {
      // every 16th fp16 bit pattern as a scale (one row each, one block), every int8 value as data
      const scales = Float32Array.from({ length: 4096 }, (_, i) => f16BitsToF32(i * 16 + (i % 16)));
      const data = new Int8Array(4096 * 256).map((_, i) => (i % 256) - 128);
      const bytes = new Uint8Array(data.buffer);
      for (const round of ["f16", "f16-flush"] as const) {
        const w = PackedWeight.int8({
          rows: 4096,
          cols: 256,
          signed: true,
          data: (into, off) => into.set(bytes.subarray(off, off + into.length)),
          scale: scales,
          rowBlocks: 4096,
          blocks: 1,
          round,
        });
        if (!w) throw new Error("no heap room");
        const got = new Float32Array(4096 * 256);
        w.readRows(0, 4096, got);
        const want = Float32Array.from(data, (q, i) => scales[i >> 8] * q);
        roundF16InPlace(want, round === "f16-flush");
        const g = new Uint32Array(got.buffer);
        const e = new Uint32Array(want.buffer);
        let bad = 0;
        for (let i = 0; i < g.length; i++) {
          const nan = Number.isNaN(got[i]) && Number.isNaN(want[i]);
          if (g[i] !== e[i] && !nan) bad++;
        }
        expect(bad).toBe(0);
      }
    });
  },
);

describe("large tables read by row", () => {
  it("reads only the rows asked for, and everything on demand", () => {
    const rows = 512;
    const cols = 128;
    const bits = Uint16Array.from({ length: rows * cols }, (_, i) => f32ToF16Bits((i % 1000) / 7));
    const bytes = new Uint8Array(bits.buffer);
    const reads: [number, number][] = [];
    const cv: ConstValue = {
      type: tensorType("fp16", [rows, cols]),
      blob: { fileName: "@model_path/weights/weight.bin", offset: 64 },
      load: () => bits,
      readBytes: (into: Uint8Array, off: number) => {
        reads.push([off, into.length]);
        into.set(bytes.subarray(off, off + into.length));
      },
    };
    const t = lazyConstToRt(cv);
    const row = new Float32Array(2 * cols);
    t.rows?.readRows(300, 2, row);
    expect(reads).toEqual([[300 * cols * 2, 2 * cols * 2]]);
    expect(Array.from(row)).toEqual(Array.from(bits.subarray(300 * cols, 302 * cols), f16BitsToF32));
    expect((t.data as Float32Array)[5 * cols + 3]).toBe(f16BitsToF32(bits[5 * cols + 3]));
    // small constants and inline data are materialised as before
    expect(
      lazyConstToRt({ type: tensorType("fp16", [2, 2]), data: new Uint16Array(4) }).rows,
    ).toBeUndefined();
  });

  it("gathers embedding rows from a package's weight file, packed LUT and plain fp16 alike", async () => {
    const V = 300;
    const D = 256;
    const b = new MilBuilder();
    const ids = b.input("ids", tensorType("int32", [2]));
    const r = lcg(3);
    const plain = b.const(
      Float32Array.from({ length: V * D }, () => r() - 0.5),
      "fp16",
      [V, D],
      { name: "table" },
    );
    const lut = lutWeight(b, { N: V, K: D, bits: 4, groupRows: 4, dtype: "fp16", seed: 9 });
    b.output("y", b.gather({ x: plain, indices: ids, axis: 0 }));
    b.output("z", b.gather({ x: lut, indices: ids, axis: 0 }));
    const path = join(dir, "gather.mlpackage");
    await writeMlPackage(path, b.model());
    const back = (await readMlPackage(path)).program;
    const x = { ids: tensor("i32", [2], Int32Array.from([299, 7])) };
    const run = (weights: "packed" | "dense") =>
      new MilInterpreter(back, { weights }).run(x, { outputs: "fp32" }).outputs;
    const packed = run("packed");
    const dense = run("dense");
    expect(Array.from(packed.y.data as Float32Array)).toEqual(Array.from(dense.y.data as Float32Array));
    expect(Array.from(packed.z.data as Float32Array)).toEqual(Array.from(dense.z.data as Float32Array));
  });
});
