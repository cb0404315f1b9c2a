/**
 * FLOPs and bytes on graphs small enough to derive by hand. Each expectation is written as the
 * arithmetic that derives it (fp16 = 2 bytes, int32 = 4, a multiply-add = 2 FLOPs).
 */
import { MIL_OPS, MilBuilder, tensorType } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import { analyzeModel, aneLayout, layoutMoves, OP_FLOPS } from "../src/index.js";
import { opNamed } from "./helpers.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);
const zeros16 = (n: number) => new Uint16Array(n);

describe("FLOPs and bytes per op", () => {
  it("linear: 2·M·Dout·Din FLOPs; weight and bias at fp16; activations in and out", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 8, 64]));
    const w = b.const(zeros16(32 * 64), "fp16", [32, 64], { name: "w" });
    b.output("y", b.linear({ x, weight: w, name: "proj" }));
    const op = opNamed(b.model(), "y");
    expect(op.type).toBe("linear");
    expect(op.flops).toBe(2 * 8 * 32 * 64);
    // weight 32·64 fp16 + the default zero bias [32] fp16 (coremltools always emits it)
    expect(op.bytesRead.weights).toBe(32 * 64 * 2 + 32 * 2);
    expect(op.bytesRead.activations).toBe(8 * 64 * 2);
    expect(op.bytesWritten.activations).toBe(8 * 32 * 2);
    expect(op.intensity).toBeCloseTo(
      (2 * 8 * 32 * 64) / (32 * 64 * 2 + 32 * 2 + 8 * 64 * 2 + 8 * 32 * 2),
      12,
    );
    expect(op.device).toBe("ANE");
  });

  it("1×1 conv in BC1S layout: 2·(Cout·S)·Cin FLOPs", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 64, 1, 4]));
    const w = b.const(zeros16(32 * 64), "fp16", [32, 64, 1, 1], { name: "w" });
    b.output("y", b.conv({ x, weight: w, name: "proj" }));
    const op = opNamed(b.model(), "y");
    expect(op.flops).toBe(2 * (32 * 4) * 64);
    expect(op.bytesRead.weights).toBe(32 * 64 * 2);
    expect(op.bytesRead.activations).toBe(64 * 4 * 2);
    expect(op.bytesWritten.activations).toBe(32 * 4 * 2);
  });

  it("grouped conv counts Cin/groups per output element", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 16, 10]));
    const w = b.const(zeros16(16 * 4), "fp16", [16, 1, 4], { name: "w" });
    b.output("y", b.conv({ x, weight: w, groups: 16, name: "dw" })); // depthwise, valid: length 7
    const op = opNamed(b.model(), "y");
    expect(op.flops).toBe(2 * (16 * 7) * (1 * 4));
  });

  it("matmul of two activations, with and without transpose_y", () => {
    for (const ty of [false, true]) {
      const b = new MilBuilder();
      const x = b.input("x", f16([2, 3, 5, 7]));
      const y = b.input("y", f16(ty ? [2, 3, 11, 7] : [2, 3, 7, 11]));
      b.output("z", b.matmul({ x, y, transposeY: ty, name: "mm" }));
      const op = opNamed(b.model(), "z");
      expect(op.flops).toBe(2 * (2 * 3) * 5 * 11 * 7);
      expect(op.bytesRead.activations).toBe((2 * 3 * 5 * 7 + 2 * 3 * 7 * 11) * 2);
      expect(op.bytesRead.weights).toBe(0);
      expect(op.bytesWritten.activations).toBe(2 * 3 * 5 * 11 * 2);
    }
  });

  it("scaled_dot_product_attention: Q·Kᵀ + P·V + 5 per score; K/V from state count as state", () => {
    const [B, L, S, E] = [2, 4, 16, 256];
    const b = new MilBuilder();
    const q = b.input("q", f16([1, B, L, E]));
    const mask = b.input("mask", f16([1, 1, 1, S]));
    const ks = b.state("k_cache", f16([1, B, S, E]));
    const vs = b.state("v_cache", f16([1, B, S, E]));
    const k = b.readState({ input: ks, name: "k" });
    const v = b.readState({ input: vs, name: "v" });
    b.output("o", b.scaledDotProductAttention({ query: q, key: k, value: v, attnMask: mask, name: "att" }));
    const model = b.model();
    const op = opNamed(model, "o");
    expect(op.flops).toBe(2 * B * L * S * E + 2 * B * L * S * E + 5 * B * L * S);
    expect(op.bytesRead.state).toBe(2 * (B * S * E * 2));
    expect(op.bytesRead.activations).toBe(B * L * E * 2 + S * 2);
    expect(op.bytesWritten.activations).toBe(B * L * E * 2);
    // the reads themselves move nothing
    expect(opNamed(model, "k").bytesRead.state + opNamed(model, "k").bytesWritten.activations).toBe(0);
  });

  it("LUT4 weight: 4-bit indices + the LUTs, not the dense fp16 size", () => {
    for (const groups of [1, 8]) {
      const b = new MilBuilder();
      const x = b.input("x", f16([1, 64]));
      const w = b.constexprLutToDense({
        indices: { data: new Uint8Array(64 * 64), dtype: "uint4", shape: [64, 64] },
        lut: { data: zeros16(groups * 16), dtype: "fp16", shape: [groups, 1, 16, 1] },
        name: "w",
      });
      b.output(
        "y",
        b.linear({ x, weight: w, bias: { data: zeros16(64), dtype: "fp16", shape: [64] }, name: "proj" }),
      );
      const model = b.model();
      const op = opNamed(model, "y");
      // 64·64 indices × 4 bits = 2048 bytes; `groups` LUTs of 16 fp16 entries
      const lutBytes = groups * 16 * 2;
      expect(op.weights?.find((p) => p.param === "weight")).toEqual({
        param: "weight",
        storedBytes: 2048 + lutBytes,
        denseBytes: 64 * 64 * 2,
        encoding: `LUT4 fp16 (${groups} LUT${groups === 1 ? "" : "s"})`,
      });
      expect(op.bytesRead.weights).toBe(2048 + lutBytes + 64 * 2);
      const lut = opNamed(model, "w");
      expect(lut.device).toBe("load");
      expect(lut.estimatedMs).toBe(0);
      const f = analyzeModel(model, "cpuAndNeuralEngine").functions[0];
      expect([...f.weightBlobs.values()].reduce((s, v) => s + v, 0)).toBe(2048 + lutBytes + 64 * 2);
    }
  });

  it("LUT6 weight packs 6 bits per index", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 64, 1, 1]));
    const w = b.constexprLutToDense({
      indices: { data: new Uint8Array(64 * 64), dtype: "uint6", shape: [64, 64, 1, 1] },
      lut: { data: zeros16(8 * 64), dtype: "fp16", shape: [8, 1, 1, 1, 64, 1] },
      name: "w",
    });
    b.output("y", b.conv({ x, weight: w, name: "proj" }));
    expect(opNamed(b.model(), "y").bytesRead.weights).toBe((64 * 64 * 6) / 8 + 8 * 64 * 2);
  });

  it("int8 blockwise weight: int8 data + fp16 scales (+ offsets)", () => {
    for (const withOffset of [false, true]) {
      const b = new MilBuilder();
      const x = b.input("x", f16([1, 64]));
      const w = b.constexprBlockwiseShiftScale({
        data: { data: new Int8Array(64 * 64), dtype: "int8", shape: [64, 64] },
        scale: { data: zeros16(64 * 2), dtype: "fp16", shape: [64, 2] },
        offset: withOffset ? { data: new Int8Array(64 * 2), dtype: "int8", shape: [64, 2] } : undefined,
        name: "w",
      });
      b.output(
        "y",
        b.linear({ x, weight: w, bias: { data: zeros16(64), dtype: "fp16", shape: [64] }, name: "proj" }),
      );
      const p = opNamed(b.model(), "y").weights?.find((q) => q.param === "weight");
      // 64·64 int8 + 64·2 fp16 scales (block 1×32) [+ 64·2 int8 offsets]
      expect(p?.storedBytes).toBe(64 * 64 + 64 * 2 * 2 + (withOffset ? 64 * 2 : 0));
      expect(p?.encoding).toBe(`int8 blockwise (block 1×32, fp16 scales${withOffset ? " + offsets" : ""})`);
    }
  });

  it("gather reads only the rows it returns", () => {
    const b = new MilBuilder();
    const ids = b.input("ids", tensorType("int32", [1, 3]));
    const table = b.const(zeros16(100 * 16), "fp16", [100, 16], { name: "table" });
    b.output("e", b.gather({ x: table, indices: ids, name: "embed" }));
    const op = opNamed(b.model(), "e");
    expect(op.bytesRead.weights).toBe(3 * 16 * 2);
    expect(op.bytesRead.activations).toBe(3 * 4);
    expect(op.bytesWritten.activations).toBe(3 * 16 * 2);
    expect(op.rule).toBe("gather-runtime-index"); // int32 indices are an index operand, not int32 arithmetic
  });

  it("views move nothing; elementwise ops count one op per output element", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4, 8]));
    const r = b.reshape({ x, shape: [1, 4, 8], name: "lead" }); // [N, C, H, W] = [1, 1, 4, 8] both
    b.output("y", b.sigmoid({ x: r, name: "act" }));
    const model = b.model();
    const lead = opNamed(model, "lead");
    expect([lead.flops, lead.bytesRead.activations, lead.bytesWritten.activations, lead.estimatedMs]).toEqual(
      [0, 0, 0, 0],
    );
    const act = opNamed(model, "y");
    expect(act.flops).toBe(32);
    expect(act.bytesRead.activations + act.bytesWritten.activations).toBe(2 * 32 * 2);
  });

  it("a reshape that moves values between the channel and spatial axes (or changes the row width) is a copy", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 64, 1, 1]));
    const heads = b.reshape({ x, shape: [1, 4, 1, 16], name: "heads" }); // channels → W
    const rows = b.reshape({ x: heads, shape: [1, 4, 2, 8], name: "rows" }); // W 16 → 8
    const regroup = b.reshape({ x: rows, shape: [1, 4, 16], name: "regroup" }); // [1, 4, 16] is [N, C, H, W] = [1, 1, 4, 16]
    const back = b.reshape({ x: regroup, shape: [1, 1, 4, 16], name: "back" }); // same layout: a view
    b.output("y", b.sigmoid({ x: back, name: "act" }));
    const model = b.model();
    for (const name of ["heads", "rows", "regroup"]) {
      const op = opNamed(model, name);
      expect([op.bytesRead.activations, op.bytesWritten.activations], name).toEqual([128, 128]);
    }
    expect(opNamed(model, "back").bytesRead.activations).toBe(0);
    expect(layoutMoves([1, 2048, 1, 1], [1, 8, 1, 256])).toBe(true);
    expect(layoutMoves([1, 2048, 1, 1], [1, 2048, 1])).toBe(true); // rank 3 is [1, C=1, H=2048, W=1]
    expect(layoutMoves([1, 16, 1, 128], [16, 1, 128])).toBe(false); // [N, C, H, W] = [1, 16, 1, 128] both
    expect(aneLayout([2, 3, 4, 5, 6])).toEqual([6, 4, 5, 6]);
  });

  it("in-place KV update: slice_update on a state read and its write_state move only the update", () => {
    const [H, S, D] = [2, 64, 16];
    const b = new MilBuilder();
    const kNew = b.input("k_new", f16([1, H, 1, D]));
    const begin = b.input("begin", tensorType("int32", [4]));
    const end = b.input("end", tensorType("int32", [4]));
    const st = b.state("k_cache", f16([1, H, S, D]));
    const upd = b.sliceUpdate({
      x: b.readState({ input: st, name: "old" }),
      update: kNew,
      begin,
      end,
      name: "upd",
    });
    b.writeState({ input: st, data: upd, name: "store" });
    b.output("k_all", b.readState({ input: st, name: "k_all_read" }));
    const model = b.model();
    const u = opNamed(model, "upd");
    expect(u.device).toBe("ANE");
    expect(u.bytesRead.activations).toBe(H * D * 2 + 2 * 4 * 4); // the update + begin/end
    expect(u.bytesRead.state).toBe(0);
    expect(u.bytesWritten.state).toBe(H * D * 2);
    expect(opNamed(model, "store").bytesWritten.state).toBe(H * D * 2);
  });

  it("every op type of the registry has a FLOP formula here (const / constexpr_* are load-time)", () => {
    const missing = [...MIL_OPS.keys()].filter(
      (t) => t !== "const" && !t.startsWith("constexpr_") && !(t in OP_FLOPS),
    );
    expect(missing).toEqual([]);
  });
});
