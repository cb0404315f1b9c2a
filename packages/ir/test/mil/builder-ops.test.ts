import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { builderOpsSource, camelCase } from "../../scripts/builder-ops-source.js";
import { MilBuilder } from "../../src/mil/builder.js";
import { MIL_OPS } from "../../src/mil/ops/index.js";

describe("builder op methods (generated from the op definitions)", () => {
  it("are up to date with ops/ (else run `pnpm --filter @anemll-qwen35/ir gen:builder`)", () => {
    const file = readFileSync(new URL("../../src/mil/builder-ops.gen.ts", import.meta.url), "utf8");
    expect(file).toBe(builderOpsSource(MIL_OPS.values()));
  });

  it("exist for every registered op but const, and build the op they are named for", () => {
    const b = new MilBuilder();
    for (const def of MIL_OPS.values()) {
      if (def.type === "const") continue;
      expect(typeof (b as unknown as Record<string, unknown>)[camelCase(def.type)]).toBe("function");
    }
    const x = b.input("x", { kind: "tensor", dtype: "fp32", shape: [2, 3] });
    const y = b.realDiv({ x, y: 2, name: "half" });
    b.output("y", b.cast({ x: y, dtype: "fp16" }));
    const ops = b.function().block.operations.map((o) => o.type);
    expect(ops).toContain("real_div");
    expect(ops).toContain("cast");
  });
});

describe("name scopes", () => {
  it("prefix the names given inside them, nest, restore after async work, and never touch inputs/outputs", async () => {
    const b = new MilBuilder();
    const x = b.input("x", { kind: "tensor", dtype: "fp32", shape: [4] });
    const y = await b.scope("l3", async () => {
      const r = b.relu({ x, name: "act" });
      await Promise.resolve();
      return b.scope("mlp", () => {
        const w = b.unscoped(() => b.const([1, 2, 3, 4], "fp32", [4], { name: "layers_3_w" }));
        return b.mul({ x: r, y: w, name: "h" });
      });
    });
    const z = b.add({ x: y, y: 1, name: "out_sum" });
    b.output("y", z);
    const names = b.function().block.operations.map((o) => o.name);
    expect(names).toContain("l3_act");
    expect(names).toContain("l3_mlp_h");
    expect(names).toContain("layers_3_w");
    expect(names).toContain("y"); // output renames its producer, unscoped
    expect(() => b.scope("l3", () => b.relu({ x, name: "act" }))).toThrow(/already used/);
    // a scope that throws is left as well
    expect(() =>
      b.scope("bad", () => {
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(b.relu({ x, name: "free" }).name).toBe("free");
  });
});
