/**
 * verifyAgainstMlx: a converted chain against the checkpoint it came from, on MLX in float32. It
 * passes on every dense fixture in fp32, and a conversion with one weight scaled in one super-block
 * package fails, naming that super-block.
 */
import { cpSync } from "node:fs";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import { scaleCheckpointTensor } from "@anemll-qwen35/testkit";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { DEFAULT_MAX_DRIFT, ModelLoadError, verifyAgainstMlx } from "../src/index.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const work = scratchDir("verify-mlx-");

const plain = { kind: "none" } as const;
/** fp32, one package per super-block (sb_00: layers 0–3, sb_01: layers 4–7). */
async function convertFp32(model: string, out: string): Promise<string> {
  await convert({ model, out, ctx: 128, fuse: 1, dtype: "fp32", body: plain, lmHead: plain, embed: plain });
  return out;
}

describe.runIf(mlxAvailable().available)("verifyAgainstMlx", () => {
  for (const name of ["tiny-tied", "tiny-gqa", "tiny-trained"]) {
    it(
      `${name}: an fp32 conversion agrees with its checkpoint on MLX, super-block by super-block`,
      async () => {
        const chain = await convertFp32(join(FIXTURES, name), join(work, name));
        const r = await verifyAgainstMlx(chain, { backend: "reference" });
        expect(r.passed).toBe(true);
        expect(r.arithmetic).toBe("fp32");
        expect(r.thresholds).toEqual({
          minAgreement: 0.9,
          minCosine: 0.99,
          maxDrift: DEFAULT_MAX_DRIFT.fp32,
        });
        // two prompts (the long one through the 64-token prefill function), each 1 + 8 positions
        expect(r.prompts).toHaveLength(2);
        expect(r.prompts[1].tokens).toBeGreaterThan(64);
        expect(r.steps).toBe(18);
        expect(r.top1Agreement).toBeGreaterThanOrEqual(0.9);
        expect(r.minCosine).toBeGreaterThan(0.9999);
        expect(r.maxAbsLogitDiff).toBeLessThan(1e-3);
        expect(r.superBlocks.map((b) => [b.name, b.layers])).toEqual([
          ["sb_00", [0, 3]],
          ["sb_01", [4, 7]],
        ]);
        for (const b of r.superBlocks) expect(b.maxDrift).toBeLessThan(1e-4);
        expect(r.firstDrifting).toBeUndefined();
      },
      timeLimit(120_000),
    );
  }

  it(
    "checks an fp16 program (fp16 chain, fp16 interpreter as the ANE rounds) against MLX in float32",
    async () => {
      const chain = join(work, "tiny-trained-fp16");
      await convert({
        model: join(FIXTURES, "tiny-trained"),
        out: chain,
        ctx: 128,
        fuse: 1,
        dtype: "fp16",
        body: plain,
        lmHead: plain,
        embed: plain,
      });
      const r = await verifyAgainstMlx(chain, { backend: "reference", precision: "fp16" });
      expect(r.arithmetic).toBe("fp16");
      expect(r.thresholds.maxDrift).toBe(DEFAULT_MAX_DRIFT.fp16);
      expect(r.passed).toBe(true);
      // fp16's rounding shows, well above fp32's and below the threshold
      const worst = Math.max(...r.superBlocks.map((b) => b.maxDrift));
      expect(worst).toBeGreaterThan(1e-4);
      expect(worst).toBeLessThan(DEFAULT_MAX_DRIFT.fp16);
    },
    timeLimit(120_000),
  );

  it(
    "flags a conversion with one weight scaled in sb_01 by the name of that super-block",
    async () => {
      const bad = join(work, "tiny-tied-scaled");
      cpSync(join(FIXTURES, "tiny-tied"), bad, { recursive: true });
      // layer 5 is in the second super-block (layers 4–7)
      scaleCheckpointTensor(bad, "model.language_model.layers.5.mlp.down_proj.weight", 1.25);
      const chain = await convertFp32(bad, join(work, "scaled-chain"));
      const r = await verifyAgainstMlx(chain, {
        backend: "reference",
        checkpoint: join(FIXTURES, "tiny-tied"),
      });
      expect(r.passed).toBe(false);
      expect(r.firstDrifting).toBe("sb_01");
      const [sb0, sb1] = r.superBlocks;
      expect(sb0.maxDrift).toBeLessThan(1e-4);
      expect(sb1.maxDrift).toBeGreaterThan(DEFAULT_MAX_DRIFT.fp32);
      // against the checkpoint it was (wrongly) converted from, it agrees
      const self = await verifyAgainstMlx(chain, {
        backend: "reference",
        prompts: [[1, 2, 3]],
        decodeSteps: 2,
      });
      expect(self.passed).toBe(true);
      expect(self.steps).toBe(3);
    },
    timeLimit(120_000),
  );

  it("refuses a checkpoint that is not the chain's source", async () => {
    const chain = join(work, "tiny-tied");
    await expect(verifyAgainstMlx(chain, { checkpoint: join(FIXTURES, "tiny-trained") })).rejects.toThrow(
      ModelLoadError,
    );
    await expect(verifyAgainstMlx(chain, { checkpoint: join(FIXTURES, "tiny-trained") })).rejects.toThrow(
      /not the one this chain was converted from/,
    );
  });
});
