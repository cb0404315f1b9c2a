/** Graph interruptions as anemll-profile counts them: non-ANE runs between ANE ops; edge runs apart. */
import { MilBuilder, tensorType } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import { costplan, findInterruptions, type OpEntry } from "../src/index.js";

function op(
  index: number,
  device: OpEntry["device"],
  ms = 0,
  supported?: OpEntry["supportedDevices"],
): OpEntry {
  return {
    index,
    name: `op${index}`,
    type: device === "load" ? "const" : "add",
    device,
    rule: "test",
    reason: "test",
    supportedDevices: supported,
    flops: 0,
    bytesRead: { weights: 0, activations: 0, state: 0 },
    bytesWritten: { activations: 0, state: 0 },
    intensity: 0,
    bound: "none",
    estimatedMs: ms,
    formula: "costplan",
  };
}

describe("findInterruptions", () => {
  it("counts inner runs as interruptions and leading/trailing runs as edge runs; load-time ops are skipped", () => {
    const ops = [
      op(0, "CPU", 0.5), // edge
      op(1, "load"),
      op(2, "ANE"),
      op(3, "CPU", 1),
      op(4, "load"), // skipped: does not split the CPU run
      op(5, "GPU", 2, ["GPU", "ANE"]),
      op(6, "ANE"),
      op(7, "ANE"),
      op(8, "CPU", 4),
      op(9, "ANE"),
      op(10, "CPU", 8), // edge
    ];
    const r = findInterruptions(ops, 0.25);
    expect(r.count).toBe(2);
    expect(r.edgeRuns).toBe(2);
    expect(r.interruptedOps).toBe(3);
    expect(r.nonAneOps).toBe(5);
    expect(r.runs.map((x) => [x.kind, x.start, x.end, x.ops, x.boundaries])).toEqual([
      ["edge", 0, 0, 1, 1],
      ["interruption", 3, 5, 2, 2],
      ["interruption", 8, 8, 1, 2],
      ["edge", 10, 10, 1, 1],
    ]);
    expect(r.runs[1].devices).toEqual(["CPU", "GPU"]);
    expect([r.runs[1].softOps, r.runs[1].hardOps]).toEqual([1, 1]);
    expect(r.estimatedIslandMs).toBe(1 + 2 + 4);
    expect(r.estimatedSwitchMs).toBe((1 + 2 + 2 + 1) * 0.25);
    expect(r.timeline).toBe(
      "EDGE CPU 0 | ANE 2 | INT#1 CPU+GPU 3-5 | ANE 6-7 | INT#2 CPU 8 | ANE 9 | EDGE CPU 10",
    );
  });

  it("a function with no ANE op has one edge run and no switches", () => {
    const r = findInterruptions([op(0, "CPU", 1), op(1, "CPU", 1)], 1);
    expect([r.count, r.edgeRuns, r.estimatedSwitchMs]).toEqual([0, 1, 0]);
  });

  it("an all-ANE function has none", () => {
    const r = findInterruptions([op(0, "ANE"), op(1, "load"), op(2, "ANE")], 1);
    expect([r.count, r.edgeRuns, r.runs.length, r.timeline]).toEqual([0, 0, 0, "ANE 0-2"]);
  });

  it("an int32 detour in the middle of a program is one interruption, charged two switches", async () => {
    const b = new MilBuilder();
    const x = b.input("x", tensorType("fp16", [1, 8]));
    const a = b.mul({ x, y: x, name: "a" });
    const i = b.cast({ x: a, dtype: "int32", name: "to_int" });
    const i2 = b.add({ x: i, y: 1, name: "int_add" });
    const f = b.cast({ x: i2, dtype: "fp16", name: "to_fp" });
    b.output("y", b.add({ x: f, y: a, name: "out" }));
    const r = await costplan(b.model(), { native: "off", calibration: "none" });
    const fn = r.packages[0].functions[0];
    expect(fn.interruptions.count).toBe(1);
    expect(fn.interruptions.runs[0].types).toEqual(["cast", "add"]);
    expect(fn.summary.switchMs).toBeCloseTo(2 * r.runtime.switchMs.value, 12);
    expect(fn.summary.estimatedMs).toBeCloseTo(fn.summary.opMs + 2 * r.runtime.switchMs.value, 12);
    expect(r.totals.interruptions).toBe(1);
    expect(r.fallbacks.map((x) => x.name)).toEqual(["to_int", "int_add", "to_fp"]);
  });
});
