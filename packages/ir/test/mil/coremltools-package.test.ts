/**
 * A package written by coremltools (oracle/ct_decode_step.py: layer_norm, linear, a uint4 LUT
 * weight, an int8 blockwise weight, a KV cache through read_state/slice_update/write_state,
 * SDPA, softmax, topk, reduce_argmax) is read with the format reader, type-checked and run for
 * two decode steps in both modes against numpy. Without Python/coremltools the test skips with
 * the reason (under CI it fails).
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { f32ToF16Bits, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { readMlPackage } from "../../src/mil/format/index.js";
import {
  checkProgram,
  MilInterpreter,
  type MlModel,
  type Precision,
  printProgram,
} from "../../src/mil/index.js";
import { scratchDir } from "../testkit.js";

const PYTHON = process.env.ANEMLL_PYTHON ?? new URL("../../../../.venv/bin/python", import.meta.url).pathname;
const dir = scratchDir("mil-ct-");

interface Step {
  x: number[];
  begin: number[];
  end: number[];
  mask: number[];
  expect: Record<Precision, number[][]>;
}

function makePackage(): { steps: Step[]; path: string } | string {
  if (!existsSync(PYTHON)) return `no Python at ${PYTHON} (set ANEMLL_PYTHON)`;
  const path = join(dir, "decode.mlpackage");
  const script = new URL("./oracle/ct_decode_step.py", import.meta.url).pathname;
  const r = spawnSync(PYTHON, [script, path], { encoding: "utf8", maxBuffer: 1 << 24 });
  if (r.status !== 0)
    return `coremltools script failed: ${(r.stderr ?? "")
      .split("\n")
      .filter((l) => l && !l.startsWith("Failed to load"))
      .slice(-3)
      .join(" / ")}`;
  return { steps: (JSON.parse(r.stdout) as { steps: Step[] }).steps, path };
}

function ulps(a: number, e: number): number {
  const ord = (v: number) => {
    const h = f32ToF16Bits(v);
    return h & 0x8000 ? -(h & 0x7fff) : h;
  };
  return Math.abs(ord(a) - ord(e));
}

describe("a coremltools-made package", () => {
  const made = makePackage();

  it("reads, type-checks and runs two decode steps in both modes", async (ctx) => {
    if (typeof made === "string") {
      if (process.env.CI) throw new Error(`coremltools is required under CI: ${made}`);
      ctx.skip(made);
      return;
    }
    const model: MlModel = await readMlPackage(made.path, { check: (m) => checkProgram(m.program) });
    const fn = model.program.functions.main;
    // coremltools' style: every defaulted input is its own const op, constexpr inputs inline
    expect(fn.block.operations.some((o) => o.type === "constexpr_lut_to_dense")).toBe(true);
    expect(printProgram(model.program)).toContain("scaled_dot_product_attention(");
    for (const precision of ["fp32", "fp16"] as const) {
      const it = new MilInterpreter(model.program, { precision });
      const state = it.newState();
      for (const [s, step] of made.steps.entries()) {
        const r = it.run(
          {
            x: tensor("f32", [1, 1, 16], Float32Array.from(step.x)),
            begin: tensor("i32", [3], Int32Array.from(step.begin)),
            end: tensor("i32", [3], Int32Array.from(step.end)),
            mask: tensor("f32", [1, 2, 4], Float32Array.from(step.mask)),
          },
          { state, outputs: "fp32" },
        );
        expect(r.nonFinite).toEqual([]);
        const names = fn.block.outputs;
        const [probs, topV, topI, best] = names.map((n) =>
          Array.from(r.outputs[n].data as ArrayLike<number>),
        );
        const [eProbs, eTopV, eTopI, eBest] = step.expect[precision];
        expect(topI, `${precision} step ${s} topk indices`).toEqual(eTopI);
        expect(best, `${precision} step ${s} argmax`).toEqual(eBest);
        const close = (got: number[], want: number[], what: string) => {
          got.forEach((g, i) => {
            const w = want[i];
            const ok = precision === "fp32" ? Math.abs(g - w) <= 1e-4 * Math.abs(w) + 1e-6 : ulps(g, w) <= 3;
            if (!ok) expect.fail(`${precision} step ${s} ${what}[${i}]: ${g} vs numpy ${w}`);
          });
        };
        close(probs, eProbs, "probs");
        close(topV, eTopV, "topk values");
      }
    }
  });
});
