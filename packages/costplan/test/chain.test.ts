/** Chains on disk: model.json components in order, or a folder of .mlpackage files; typed errors. */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MilBuilder, type MlModel, tensorType, writeMlPackage } from "@anemll-qwen35/ir/mil";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChainError, CostplanOptionError, costplan } from "../src/index.js";

const f16 = (shape: number[]) => tensorType("fp16", shape);

/** A package with one LUT4 projection of `rows` × 64; two functions when `prefill` is set. */
function pkg(rows: number): MlModel {
  const b = new MilBuilder();
  const x = b.input("x", f16([1, 64, 1, 1]));
  const w = b.constexprLutToDense({
    indices: { data: new Uint8Array(rows * 64), dtype: "uint4", shape: [rows, 64, 1, 1] },
    lut: { data: new Uint16Array((rows / 8) * 16), dtype: "fp16", shape: [rows / 8, 1, 1, 1, 16, 1] },
    name: "w",
  });
  b.output("y", b.conv({ x, weight: w, name: "proj" }));
  return b.model();
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "costplan-chain-"));
  await mkdir(join(dir, "chain"));
  await writeMlPackage(join(dir, "chain", "part2.mlpackage"), pkg(64));
  await writeMlPackage(join(dir, "chain", "part10.mlpackage"), pkg(128));
  await writeMlPackage(join(dir, "chain", "head.mlpackage"), pkg(256));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("chains", () => {
  it("reads model.json components in its order and projects tok/s from the per-prediction times", async () => {
    await writeFile(
      join(dir, "chain", "model.json"),
      JSON.stringify({
        name: "x",
        components: [
          { file: "part10.mlpackage" },
          { file: "part2.mlpackage", name: "first" },
          { file: "head.mlpackage" },
        ],
      }),
    );
    const r = await costplan(join(dir, "chain"), { native: "off" });
    expect(r.target.kind).toBe("chain");
    expect(r.packages.map((p) => p.name)).toEqual(["part10", "first", "head"]);
    const chain = r.chain;
    expect(chain?.predictionsPerToken).toBe(3);
    const ms = r.packages.reduce((s, p) => s + p.prediction.estimatedMs, 0);
    expect(chain?.estimatedMsPerToken).toBeCloseTo(ms, 12);
    expect(chain?.estimatedTokPerSec).toBeCloseTo(1000 / ms, 9);
    // LUT4 weights read per token: rows·64/2 index bytes + rows/8 LUTs of 16 fp16, per package
    const lut4 = (rows: number) => (rows * 64) / 2 + (rows / 8) * 16 * 2;
    expect(r.totals.bytesRead.weights).toBe(lut4(128) + lut4(64) + lut4(256));
    expect(r.totals.weightBytesStored).toBe(lut4(128) + lut4(64) + lut4(256));
    // the same file given as model.json
    const again = await costplan(join(dir, "chain", "model.json"), { native: "off" });
    expect(again.packages.map((p) => p.name)).toEqual(["part10", "first", "head"]);
  });

  it("without model.json takes the folder's packages in natural name order", async () => {
    await rm(join(dir, "chain", "model.json"), { force: true });
    const r = await costplan(join(dir, "chain"), { native: "off" });
    expect(r.packages.map((p) => p.name)).toEqual(["head", "part2", "part10"]);
  });

  it("a single .mlpackage is a package target without a chain projection", async () => {
    const r = await costplan(join(dir, "chain", "part2.mlpackage"), { native: "off" });
    expect(r.target.kind).toBe("package");
    expect(r.chain).toBeUndefined();
    expect(r.packages[0].path).toBe(join(dir, "chain", "part2.mlpackage"));
  });

  it("typed errors name the file and what was expected", async () => {
    await expect(costplan(join(dir, "nope"))).rejects.toThrow(ChainError);
    await expect(costplan(join(dir, "nope"))).rejects.toThrow(/does not exist/);
    const bad = join(dir, "bad");
    await mkdir(bad, { recursive: true });
    await expect(costplan(bad)).rejects.toThrow(/no model.json and no .mlpackage/);
    await writeFile(join(bad, "model.json"), "{ not json");
    await expect(costplan(bad)).rejects.toThrow(/model\.json: is not valid JSON/);
    await writeFile(join(bad, "model.json"), JSON.stringify({ components: [{ path: "x" }] }));
    await expect(costplan(bad)).rejects.toThrow(/components\.0\.file/);
    await writeFile(join(bad, "model.json"), JSON.stringify({ components: [{ file: "missing.mlpackage" }] }));
    await expect(costplan(bad)).rejects.toThrow(
      /component missing\.mlpackage is not a \.mlpackage directory/,
    );
    await mkdir(join(bad, "c.mlmodelc"));
    await expect(costplan(join(bad, "c.mlmodelc"))).rejects.toThrow(
      /compiled \.mlmodelc cannot be read statically/,
    );
  });

  it("refuses model.json components outside the model folder", async () => {
    // a real package one folder up: reading it would cost a model the folder does not hold
    const evil = join(dir, "evil");
    await mkdir(evil, { recursive: true });
    for (const file of ["../chain/part2.mlpackage", join(dir, "chain", "part2.mlpackage"), ".."]) {
      await writeFile(join(evil, "model.json"), JSON.stringify({ components: [{ file }] }));
      await expect(costplan(evil, { native: "off" })).rejects.toThrow(
        /components\.0\.file: must be a \.mlpackage name inside the model folder/,
      );
    }
  });

  it("rejects unknown chips and functions", async () => {
    await expect(costplan(pkg(64), { chip: "m9" as never })).rejects.toThrow(CostplanOptionError);
    await expect(costplan(pkg(64), { decodeFunction: "infer" })).rejects.toThrow(
      /has no function "infer" \(functions: main\)/,
    );
  });
});
