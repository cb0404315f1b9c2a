import { describe, expect, it } from "vitest";
import { type BlobSink, MilBuilder, printFunction, printProgram, tensorType } from "../../src/mil/index.js";
import { formatConst } from "../../src/mil/printer.js";
import { literal } from "../../src/mil/values.js";

describe("printer", () => {
  it("prints one op per line with types, consts summarised", () => {
    let offset = 0;
    const sink: BlobSink = {
      write: () => {
        offset += 64;
        return { fileName: "@model_path/weights/weight.bin", offset };
      },
    };
    const b = new MilBuilder({ blobSink: sink });
    const h = b.input("h", tensorType("fp16", [1, 1, 16]));
    const w = b.const(new Float32Array(8 * 16), "fp16", [8, 16], { name: "w" });
    const q = b.linear({ x: h, weight: w, name: "q" });
    const [a, c] = b.split({ x: q, numSplits: 2, axis: -1, name: "s" });
    b.output("y", b.add({ x: a, y: c }));
    const text = printProgram(b.program());
    const lines = text.split("\n");
    expect(lines[0]).toBe("func main<CoreML8>(%h: tensor<fp16, [1, 1, 16]>) {");
    expect(lines).toContain("  %w = const() : tensor<fp16, [8, 16]> = blob(weight.bin@64)");
    expect(lines).toContain("  %q_bias = const() : tensor<fp16, [8]> = [0, 0, 0, 0, 0, 0, … 2 more]");
    expect(lines).toContain("  %q = linear(x=%h, weight=%w, bias=%q_bias) : tensor<fp16, [1, 1, 8]>");
    expect(lines).toContain(
      "  %s_0, %s_1 = split[name=s](x=%q, num_splits=%s_num_splits, axis=%s_axis) : (tensor<fp16, [1, 1, 4]>, tensor<fp16, [1, 1, 4]>)",
    );
    expect(lines).toContain("  %y = add(x=%s_0, y=%s_1) : tensor<fp16, [1, 1, 4]>");
    expect(lines[lines.length - 1]).toBe("} -> (%y)");
  });

  it("prints states, write_state and inline values", () => {
    const b = new MilBuilder();
    const s = b.state("k", tensorType("fp16", [2]));
    const x = b.input("x", tensorType("fp16", [2]));
    b.output("y", b.coremlUpdateState(s, x));
    const idx = { data: new Uint8Array(32), dtype: "uint4" as const, shape: [4, 8] };
    const lut = { data: new Float32Array(16), dtype: "fp16" as const, shape: [1, 1, 16, 1] };
    b.output("w", b.constexprLutToDense({ indices: idx, lut, name: "w" }));
    const text = printFunction(b.function());
    expect(text).toContain("func main<CoreML8>(%k: state<tensor<fp16, [2]>>, %x: tensor<fp16, [2]>) {");
    expect(text.endsWith("} -> (%y, %w)")).toBe(true);
    expect(text).toContain("  write_state[name=write_state_0](input=%k, data=%x)");
    expect(text).toContain("  %y = read_state(input=%k) : tensor<fp16, [2]>");
    expect(text).toContain(
      "  %w = constexpr_lut_to_dense(indices=tensor<uint4, [4, 8]>([0, 0, 0, 0, 0, 0, … 26 more]), lut=tensor<fp16, [1, 1, 16, 1]>(",
    );
    expect(formatConst(literal("fp32", 1e-5))).toBe("0.00001");
    expect(formatConst(literal("string", "valid"))).toBe('"valid"');
    expect(formatConst(literal("bool", [true, false]))).toBe("[true, false]");
  });
});
