/**
 * The placement rule table: one crafted program per rule that breaks it (and, where it matters, a
 * near miss that does not), plus the compute-units mapping.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { MilBuilder, type MlModel, type Operation, tensorType } from "@anemll-qwen35/ir/mil";
import { afterAll, describe, expect, it } from "vitest";
import { ANE_MAX_DIM, PLACEMENT_RULES } from "../src/index.js";
import { resolveDevice } from "../src/placement.js";
import { opNamed } from "./helpers.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);
const tested = new Set<string>();

function expectRule(
  model: MlModel,
  name: string,
  rule: string,
  device: string,
  units?: "all" | "cpuAndNeuralEngine",
) {
  const op = opNamed(model, name, units);
  expect({ rule: op.rule, device: op.device }).toEqual({ rule, device });
  expect(op.reason.length).toBeGreaterThan(10);
  tested.add(rule);
  return op;
}

describe("placement rules", () => {
  it("load-time-constant: const and constexpr_* are load-time, not run-time", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 16]));
    const w = b.constexprLutToDense({
      indices: { data: new Uint8Array(16 * 16), dtype: "uint4", shape: [16, 16] },
      lut: { data: new Uint16Array(16), dtype: "fp16", shape: [1, 1, 16, 1] },
      name: "w",
    });
    const c = b.const(new Uint16Array(16), "fp16", [1, 16], { name: "c" });
    b.output("y", b.add({ x: b.linear({ x, weight: w, name: "proj" }), y: c, name: "sum" }));
    const m = b.model();
    expectRule(m, "w", "load-time-constant", "load");
    expectRule(m, "c", "load-time-constant", "load");
    expect(opNamed(m, "proj").device).toBe("ANE");
  });

  it("program-over-ane-size-limit: more than 2 GB of weights puts the function off the ANE", () => {
    // 4 × fp16 [16000, 16000] = 2.048 GB, as blob references without data
    const n = 16000;
    const wType = tensorType("fp16", [n, n]);
    const ops: Operation[] = [];
    for (let i = 0; i < 4; i++) {
      ops.push({
        type: "const",
        name: `w${i}`,
        inputs: {},
        outputs: [{ name: `w${i}`, type: wType }],
        value: {
          type: wType,
          blob: { fileName: "@model_path/weights/weight.bin", offset: 64 + i * (n * n * 2 + 64) },
        },
      });
      ops.push({
        type: "linear",
        name: `y${i}`,
        inputs: { x: [{ kind: "var", name: "x" }], weight: [{ kind: "var", name: `w${i}` }] },
        outputs: [{ name: `y${i}`, type: f16([1, n]) }],
      });
    }
    const model: MlModel = {
      specificationVersion: 9,
      program: {
        version: 1,
        functions: {
          main: {
            inputs: [{ name: "x", type: f16([1, n]) }],
            opset: "CoreML8",
            block: { inputs: [], outputs: ["y0", "y1", "y2", "y3"], operations: ops },
          },
        },
      },
    };
    const op = expectRule(model, "y0", "program-over-ane-size-limit", "CPU");
    expect(op.reason).toContain("2.05 GB");
    // three of them (1.54 GB) stay on the ANE
    const small: MlModel = {
      ...model,
      program: {
        version: 1,
        functions: {
          main: {
            ...model.program.functions.main,
            block: { inputs: [], outputs: ["y0", "y1", "y2"], operations: ops.slice(0, 6) },
          },
        },
      },
    };
    expect(opNamed(small, "y0").device).toBe("ANE");
  });

  it("in-graph-fill: a tensor created in the graph is not placed on the ANE", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([2, 3]));
    const z = b.fill({ shape: [2, 3], value: { data: [0], dtype: "fp16", shape: [] }, name: "zeros" });
    b.output("y", b.add({ x, y: z, name: "sum" }));
    expectRule(b.model(), "zeros", "in-graph-fill", "CPU");
  });

  it("band-part-mask: an in-graph triangular mask is not ANE-supported", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([8, 8]));
    b.output("y", b.bandPart({ x, lower: -1, upper: 0, name: "causal" }));
    expectRule(b.model(), "y", "band-part-mask", "CPU");
  });

  it("int32-tensor: int32 arithmetic goes to the CPU; index operands and argmax results do not count", () => {
    const b = new MilBuilder();
    const p = b.input("pos", tensorType("int32", [1]));
    const x = b.input("x", f16([1, 8]));
    const next = b.add({ x: p, y: 1, name: "next" });
    const am = b.reduceArgmax({ x, axis: -1, name: "am" });
    b.output("n", next);
    b.output("a", am);
    const m = b.model();
    const op = expectRule(m, "n", "int32-tensor", "CPU");
    expect(op.reason).toContain("int32");
    expect(opNamed(m, "a").device).toBe("ANE");
  });

  it("fp32-compute: fp32 ops go to the CPU, or to the GPU when the compute units allow it", () => {
    const b = new MilBuilder();
    const x = b.input("x", tensorType("fp32", [4]));
    b.output("y", b.mul({ x, y: x, name: "sq" }));
    const m = b.model();
    expectRule(m, "y", "fp32-compute", "CPU");
    expectRule(m, "y", "fp32-compute", "GPU", "all");
  });

  it("gather-large-table: gathering from a vocabulary-sized table leaves the ANE", () => {
    const b = new MilBuilder();
    const ids = b.input("ids", tensorType("int32", [1, 1]));
    const table = b.const(new Uint16Array((ANE_MAX_DIM + 1) * 4), "fp16", [ANE_MAX_DIM + 1, 4], {
      name: "table",
    });
    b.output("e", b.gather({ x: table, indices: ids, name: "embed" }));
    expectRule(b.model(), "e", "gather-large-table", "CPU");
  });

  it("gather-runtime-index: a gather by a run-time index goes to the CPU; by constant indices it stays", () => {
    const b = new MilBuilder();
    const pos = b.input("position", tensorType("int32", [1]));
    const table = b.const(new Uint16Array(256 * 64), "fp16", [256, 64], { name: "rope_table" });
    const row = b.gather({ x: table, indices: pos, axis: 0, name: "rope_row" });
    const fixed = b.gather({ x: table, indices: b.const([3], "int32", [1]), axis: 0, name: "fixed_row" });
    b.output("y", b.add({ x: row, y: fixed, name: "sum" }));
    const m = b.model();
    const op = expectRule(m, "rope_row", "gather-runtime-index", "CPU");
    expect(op.reason).toContain("position");
    expect(opNamed(m, "fixed_row").device).toBe("ANE");
  });

  it("dim-over-16384: any dimension over 16384 leaves the ANE; exactly 16384 stays", () => {
    const build = (rows: number) => {
      const b = new MilBuilder();
      const x = b.input("x", f16([1, 8, 1, 1]));
      const w = b.const(new Uint16Array(rows * 8), "fp16", [rows, 8, 1, 1], { name: "w" });
      b.output("y", b.conv({ x, weight: w, name: "head" }));
      return b.model();
    };
    const op = expectRule(build(ANE_MAX_DIM + 1), "y", "dim-over-16384", "CPU");
    expect(op.reason).toContain(`${ANE_MAX_DIM + 1}`);
    expect(opNamed(build(ANE_MAX_DIM), "y").device).toBe("ANE");
  });

  it("standalone-slice-update: slice_update off a state goes to the CPU; on a state read it stays", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([1, 4, 8]));
    const u = b.input("u", f16([1, 1, 8]));
    const st = b.state("s", f16([1, 4, 8]));
    const plain = b.sliceUpdate({ x, update: u, begin: [0, 1, 0], end: [1, 2, 8], name: "plain" });
    const inState = b.sliceUpdate({
      x: b.readState({ input: st, name: "r" }),
      update: u,
      begin: [0, 1, 0],
      end: [1, 2, 8],
      name: "kv",
    });
    b.writeState({ input: st, data: inState });
    b.output("y", plain);
    const m = b.model();
    expectRule(m, "y", "standalone-slice-update", "CPU");
    expect(opNamed(m, "kv").device).toBe("ANE");
  });

  it("many-state-updates: a state updated more than twice in one function leaves the ANE; twice stays", () => {
    for (const n of [2, 3]) {
      const b = new MilBuilder();
      const u = b.input("u", f16([1, 1, 8]));
      const st = b.state("kv", f16([1, 4, 8]));
      let cur = b.readState({ input: st, name: "r" });
      for (let i = 0; i < n; i++)
        cur = b.sliceUpdate({ x: cur, update: u, begin: [0, i, 0], end: [1, i + 1, 8], name: `put${i}` });
      b.writeState({ input: st, data: cur });
      b.output("y", b.mul({ x: u, y: u, name: "sq" }));
      const m = b.model();
      for (let i = 0; i < n; i++) {
        if (n > 2)
          expect(expectRule(m, `put${i}`, "many-state-updates", "CPU").reason).toContain("3 slice_updates");
        else expect(opNamed(m, `put${i}`).device).toBe("ANE");
      }
    }
  });

  it("bool-attention-mask: SDPA with a bool mask leaves the ANE; an fp16 mask stays", () => {
    for (const maskType of ["bool", "fp16"] as const) {
      const b = new MilBuilder();
      const q = b.input("q", f16([1, 2, 4]));
      const k = b.input("k", f16([1, 6, 4]));
      const mask = b.input("mask", tensorType(maskType, [1, 2, 6]));
      b.output("o", b.scaledDotProductAttention({ query: q, key: k, value: k, attnMask: mask, name: "att" }));
      if (maskType === "bool") expectRule(b.model(), "o", "bool-attention-mask", "CPU");
      else expect(opNamed(b.model(), "o").device).toBe("ANE");
    }
  });

  it("no-known-ane-kernel: op types outside the observed-on-ANE list go to the CPU", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4, 8]));
    b.output("y", b.cumsum({ x, axis: 1, name: "cs" }));
    expectRule(b.model(), "y", "no-known-ane-kernel", "CPU");
  });

  it("ane-default: an fp16 op the ANE runs", () => {
    const b = new MilBuilder();
    const x = b.input("x", f16([4, 8]));
    b.output("y", b.softmax({ x, axis: -1, name: "sm" }));
    expectRule(b.model(), "y", "ane-default", "ANE");
  });

  it("compute units decide where CPU/GPU and ANE placements land", () => {
    expect(resolveDevice("CPU/GPU", "cpuAndNeuralEngine")).toBe("CPU");
    expect(resolveDevice("CPU/GPU", "all")).toBe("GPU");
    expect(resolveDevice("ANE", "cpuAndGPU")).toBe("GPU");
    expect(resolveDevice("ANE", "cpuOnly")).toBe("CPU");
    expect(resolveDevice("CPU", "all")).toBe("CPU");
    expect(resolveDevice("load", "cpuOnly")).toBe("load");
  });

  it("every rule has an id, condition, reason and source", () => {
    const ids = PLACEMENT_RULES.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const r of PLACEMENT_RULES) {
      expect(r.condition.length, r.id).toBeGreaterThan(5);
      expect(r.reason.length, r.id).toBeGreaterThan(5);
      expect(r.source.length, r.id).toBeGreaterThan(5);
    }
    expect(ids.at(-1)).toBe("ane-default");
    const readme = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");
    for (const id of ids) expect(readme, `README documents rule ${id}`).toContain(`\`${id}\``);
  });

  afterAll(() => {
    // a rule added to the table without a test above fails here
    expect([...tested].sort()).toEqual(PLACEMENT_RULES.map((r) => r.id).sort());
  });
});
