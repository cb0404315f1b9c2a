/** The tiny fixtures (fixtures/tiny-*) and their Hugging Face golden outputs, for the parity tests. */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { toFloat32 } from "@anemll-qwen35/core";
import { GOLDEN_FILE, type Golden, loadGolden, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";

export const FIXTURES = fileURLToPath(new URL("../../../fixtures/", import.meta.url));

export interface FixtureGolden extends Golden {
  /** [T][D]: the last decoder layer's output before the final norm (HF forward hook). */
  readonly lastLayerPrenorm: Float32Array[];
}

export function fixtureDir(name: string): string {
  return join(FIXTURES, name);
}

export function hasFixture(name: string): boolean {
  return existsSync(join(FIXTURES, name, "config.json")) && existsSync(join(FIXTURES, name, GOLDEN_FILE));
}

export async function loadFixtureGolden(name: string): Promise<FixtureGolden> {
  const golden = await loadGolden(fixtureDir(name));
  await using f = await SafetensorsFile.open(join(fixtureDir(name), GOLDEN_FILE));
  const t = await f.read("last_layer_prenorm"); // [T, D]
  const v = toFloat32(t.dtype, t.data);
  const [T, D] = t.shape;
  return { ...golden, lastLayerPrenorm: Array.from({ length: T }, (_, i) => v.subarray(i * D, (i + 1) * D)) };
}

/** KL(p ‖ q) of the softmax distributions of two logit rows, in nats. */
export function klDivergence(pLogits: ArrayLike<number>, qLogits: ArrayLike<number>): number {
  const logSoftmax = (x: ArrayLike<number>) => {
    let m = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < x.length; i++) m = Math.max(m, x[i]);
    let s = 0;
    for (let i = 0; i < x.length; i++) s += Math.exp(x[i] - m);
    const lse = m + Math.log(s);
    return Float64Array.from({ length: x.length }, (_, i) => x[i] - lse);
  };
  const lp = logSoftmax(pLogits);
  const lq = logSoftmax(qLogits);
  let kl = 0;
  for (let i = 0; i < lp.length; i++) kl += Math.exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}
