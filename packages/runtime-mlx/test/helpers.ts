/**
 * Test helpers: gating on the addon, deterministic data, an independent numpy oracle, comparisons.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { rng } from "@anemll-qwen35/testkit";
import { describe, expect } from "vitest";
import { mlxAvailable } from "../src/index.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = resolve(HERE, "../../..");

export const MLX = mlxAvailable();

/**
 * `describe` that runs when the addon is built. Without it the suite is skipped with the reason in its
 * title, except under CI (process.env.CI set), where it runs and fails with MlxUnavailableError.
 */
export function describeMlx(name: string, body: () => void): void {
  if (MLX.available || process.env.CI) {
    describe(name, body);
  } else {
    describe.skip(`${name} [skipped: ${MLX.reason}]`, body);
  }
}

/** A seeded PRNG (mulberry32) so every run sees the same data. */
export { rng };

/** size values uniform in [lo, hi), rounded to float32. */
export function uniform(next: () => number, size: number, lo = -1, hi = 1): Float32Array {
  const out = new Float32Array(size);
  for (let i = 0; i < size; i++) out[i] = lo + (hi - lo) * next();
  return out;
}

export const numel = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);

/** Python with numpy for the oracle: $ANEMLL_PYTHON, <repo>/.venv/bin/python, else python3. */
export function oraclePython(): string | undefined {
  const candidates = [process.env.ANEMLL_PYTHON, join(REPO_ROOT, ".venv/bin/python"), "python3"];
  for (const python of candidates) {
    if (!python) continue;
    if (python.includes("/") && !existsSync(python)) continue;
    try {
      execFileSync(python, ["-c", "import numpy"], { stdio: "ignore" });
      return python;
    } catch {
      // next
    }
  }
  return undefined;
}

export interface OracleTensor {
  shape: number[];
  data: number[];
}

export interface OracleCase {
  id: string;
  op: string;
  inputs: Record<string, { shape: number[]; data: ArrayLike<number> }>;
  params?: Record<string, unknown>;
}

/** Runs every case through test/oracle/numpy_ops.py (numpy, float64) in one Python process. */
export function runOracle(cases: OracleCase[]): Record<string, OracleTensor | OracleTensor[]> {
  const python = oraclePython();
  if (!python) throw new Error("no Python with numpy for the oracle (set ANEMLL_PYTHON)");
  const payload = JSON.stringify({
    cases: cases.map((c) => ({
      ...c,
      inputs: Object.fromEntries(
        Object.entries(c.inputs).map(([k, v]) => [k, { shape: v.shape, data: Array.from(v.data) }]),
      ),
    })),
  });
  const out = execFileSync(python, [join(HERE, "oracle/numpy_ops.py")], {
    input: payload,
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  return JSON.parse(out);
}

/** Asserts |actual - expected| <= atol + rtol * |expected| elementwise, reporting the worst element. */
export function expectClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  { rtol = 1e-5, atol = 1e-6, label = "" }: { rtol?: number; atol?: number; label?: string } = {},
): void {
  expect(actual.length, `${label} length`).toBe(expected.length);
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < expected.length; i++) {
    const a = Number(actual[i]);
    const e = Number(expected[i]);
    if (Number.isNaN(e) && Number.isNaN(a)) continue;
    if (e === a) continue;
    const excess = Math.abs(a - e) - (atol + rtol * Math.abs(e));
    if (!(excess <= 0) && (worst < 0 || excess > worstExcess || Number.isNaN(excess))) {
      worst = i;
      worstExcess = excess;
    }
  }
  if (worst >= 0) {
    expect.fail(
      `${label}: element ${worst} is ${actual[worst]}, expected ${expected[worst]} (atol ${atol}, rtol ${rtol})`,
    );
  }
}
