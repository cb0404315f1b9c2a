/**
 * fp16 as the ANE computes it: the ANE flushes fp16 subnormals (|x| < 2⁻¹⁴) to zero, constants
 * included, so a package must not hold one — an epsilon of 1e-6 is 0 there (a zero row then
 * normalises to NaN), and a weight that small is 0 anyway. Walks every constant (const ops and
 * inline values, weights in their blobs included) of every function of every package of a few
 * conversions and fails on any fp16 subnormal.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f16BitsToF32 } from "@anemll-qwen35/core";
import { type ConstValue, readMlPackage } from "@anemll-qwen35/ir/mil";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConvertOptions, convert } from "../src/index.js";
import { fixtureDir, hasFixture } from "./golden.js";

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "anemll-fp16-consts-"));
});
afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

/** fp16 bit patterns of a constant's subnormals (nonzero exponent-0 values), up to `max`. */
function subnormals(cv: ConstValue, max = 4): number[] {
  if (cv.type.dtype !== "fp16") return [];
  const data = ("data" in cv ? cv.data : cv.load?.()) as Uint16Array | undefined;
  if (!data) throw new Error(`an fp16 constant of ${cv.type.shape} has no data to read`);
  const found: number[] = [];
  for (const bits of data) {
    if ((bits & 0x7c00) === 0 && (bits & 0x03ff) !== 0) found.push(bits);
    if (found.length === max) break;
  }
  return found;
}

/** "package/function/op.param: values" for every fp16 subnormal constant of a converted folder. */
async function subnormalConstants(dir: string): Promise<string[]> {
  const bad: string[] = [];
  let constants = 0;
  for (const entry of (await readdir(dir)).filter((f) => f.endsWith(".mlpackage")).sort()) {
    const model = await readMlPackage(join(dir, entry));
    for (const [fname, fn] of Object.entries(model.program.functions)) {
      for (const op of fn.block.operations) {
        const found: [string, ConstValue][] = op.value ? [["val", op.value]] : [];
        for (const [param, bindings] of Object.entries(op.inputs))
          for (const b of bindings) if (b.kind === "value") found.push([param, b.value]);
        for (const [param, cv] of found) {
          constants++;
          const s = subnormals(cv);
          if (s.length) bad.push(`${entry}/${fname}/${op.name}.${param}: ${s.map(f16BitsToF32).join(", ")}`);
        }
      }
    }
  }
  expect(constants).toBeGreaterThan(0);
  return bad;
}

const CASES: readonly { fixture: string; name: string; options: Partial<ConvertOptions> }[] = [
  { fixture: "tiny-trained", name: "default (LUT body, decode + prefill 64)", options: {} },
  {
    fixture: "tiny-gqa",
    name: "fp16 weights, mlstate, prefill 8",
    options: { quant: "none", state: "mlstate", prefillBatch: 8 },
  },
  { fixture: "tiny-tied", name: "int8", options: { quant: "int8" } },
];

describe("no fp16 subnormal constant in a converted package", () => {
  for (const c of CASES) {
    it.skipIf(!hasFixture(c.fixture))(
      `${c.fixture} ${c.name}`,
      async () => {
        const out = join(root, `${c.fixture}-${CASES.indexOf(c)}`);
        await convert({ model: fixtureDir(c.fixture), out, workers: 1, ...c.options });
        expect(await subnormalConstants(out)).toEqual([]);
      },
      timeLimit(300_000),
    );
  }
});
