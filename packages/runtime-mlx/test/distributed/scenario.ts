/**
 * The steps the pipeline parity test runs, the same on one process and on rank 0 of a split model:
 * every path a rank sees — a chunked prefill with all logits, a pipelined greedy decode, a token
 * that is not the argmax (rank 0 drops its speculative step and the other ranks rewind), a reset.
 */
import type { MlxQwen35 } from "../../src/index.js";

/** A model for the ranks to load: a checkpoint folder, its prefill chunk, an explicit split. */
export interface RankModel {
  name: string;
  path: string;
  prefillChunk: number;
  split?: number[];
  /** Per rank, another path (to start ranks with different models). */
  rankPaths?: string[];
}

export interface ScenarioResult {
  /** Logits rows in order: prefillAll rows, then one per prefill/decode call. */
  rows: number[][];
  /** The token fed at each decode step. */
  tokens: number[];
}

export const argmax = (a: Float32Array): number => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

export const logitsOf = (o: unknown) => (o as { logits: Float32Array }).logits;

export async function runScenario(model: MlxQwen35, prompt: number[]): Promise<ScenarioResult> {
  const V = model.config.vocabSize;
  const rows: number[][] = [];
  const tokens: number[] = [];
  const all = await model.prefillAll(prompt);
  for (let t = 0; t < prompt.length; t++) rows.push(Array.from(all.subarray(t * V, (t + 1) * V)));
  model.reset();
  let logits = logitsOf(await model.prefill(prompt));
  rows.push(Array.from(logits));
  for (let i = 0; i < 9; i++) {
    // step 5 feeds a token other than the argmax: the speculative step is dropped everywhere
    const tok = i === 5 ? (argmax(logits) + 1) % V : argmax(logits);
    tokens.push(tok);
    logits = logitsOf(await model.decode(tok));
    rows.push(Array.from(logits));
  }
  model.reset();
  logits = logitsOf(await model.prefill(prompt.slice(0, 3)));
  rows.push(Array.from(logits));
  for (let i = 0; i < 2; i++) {
    const tok = argmax(logits);
    tokens.push(tok);
    logits = logitsOf(await model.decode(tok));
    rows.push(Array.from(logits));
  }
  return { rows, tokens };
}

/** Largest |a - b| over all rows. */
export function maxRowDiff(a: readonly number[][], b: readonly number[][]): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) {
    for (let j = 0; j < a[i].length; j++) d = Math.max(d, Math.abs(a[i][j] - b[i][j]));
  }
  return d;
}
