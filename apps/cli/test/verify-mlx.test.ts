/**
 * verify --against mlx: the default when the source has no goldens and MLX is available (said in
 * the output), and a conversion with one weight scaled fails naming its super-block.
 */
import { cpSync } from "node:fs";
import { join, resolve } from "node:path";
import { scaleCheckpointTensor } from "@anemll-qwen35/testkit";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { expect, it } from "vitest";
import { cli, mlxOrSkip } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
const work = scratchDir("cli-verify-mlx-");

const FP32 = ["--ctx", "128", "--fuse", "1", "--dtype", "fp32", "--lut", "none", "--lmhead-lut", "none"];

/** A copy of the fixture without its goldens (as a user's own checkpoint), optionally with one weight scaled. */
async function convertCopy(name: string, scale?: { tensor: string; factor: number }): Promise<string> {
  const src = join(work, `${name}-src`);
  cpSync(FIXTURE, src, { recursive: true, filter: (f) => !/golden/.test(f) });
  if (scale) scaleCheckpointTensor(src, scale.tensor, scale.factor);
  const out = join(work, name);
  const r = await cli("convert", src, "-o", out, ...FP32);
  expect(r.code, r.stderr).toBe(0);
  return out;
}

it(
  "without goldens, verify checks the chain against its checkpoint on MLX and says so",
  async (ctx) => {
    if (!(await mlxOrSkip(ctx))) return;
    const chain = await convertCopy("plain");
    const text = await cli("verify", chain);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/on MLX \(float32\)/);
    expect(text.stdout).toMatch(
      /no golden outputs found: checking against the source checkpoint on MLX \(--against mlx\)/,
    );
    expect(text.stdout).toMatch(/sb_00 +layers 0–3 /);
    expect(text.stdout).toMatch(/sb_01 +layers 4–7 /);
    expect(text.stdout).toMatch(/pass: needs agreement ≥ 0\.9, cosine ≥ 0\.99 and drift ≤ 0\.001/);
    const doc = JSON.parse((await cli("--json", "verify", chain, "--decode-steps", "2")).stdout);
    expect(doc).toMatchObject({
      against: "mlx",
      defaulted: true,
      mlxDtype: "float32",
      passed: true,
      steps: 6,
    });
    expect(doc.superBlocks.map((b: { name: string }) => b.name)).toEqual(["sb_00", "sb_01"]);
    // asked for explicitly, it does not say it chose
    const asked = await cli("verify", chain, "--against", "mlx", "--decode-steps", "1");
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stdout).not.toMatch(/no golden outputs found/);
    // --golden names a folder: no falling back to MLX when it has no goldens
    const noGolden = await cli("verify", chain, "--golden", work);
    expect(noGolden.code).toBe(2);
    expect(noGolden.stderr).toMatch(/no golden outputs found in/);
    const coremlGolden = await cli("verify", chain, "--against", "golden", "--backend", "coreml");
    expect(coremlGolden.code).toBe(2);
    expect(coremlGolden.stderr).toMatch(/--backend coreml is for --against mlx/);
  },
  timeLimit(180_000),
);

it(
  "a conversion with one weight scaled in sb_01 fails verify --against mlx, naming sb_01",
  async (ctx) => {
    if (!(await mlxOrSkip(ctx))) return;
    const chain = await convertCopy("scaled", {
      tensor: "model.language_model.layers.6.linear_attn.out_proj.weight",
      factor: 1.5,
    });
    const r = await cli("verify", chain, "--against", "mlx", "--checkpoint", FIXTURE);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/sb_01 +layers 4–7 .*← drifts first/);
    expect(r.stdout).not.toMatch(/sb_00 .*← drifts first/);
    expect(r.stdout).toMatch(/FAIL: needs/);
    expect(r.stderr).toMatch(/sb_01 is the first super-block package that drifts from the checkpoint/);
  },
  timeLimit(180_000),
);
