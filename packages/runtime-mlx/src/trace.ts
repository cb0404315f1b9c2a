/**
 * One forward pass over a whole sequence with what a parity check needs: the logits of every
 * position and the residual stream after chosen layers (before the final norm). It runs on its own
 * fresh caches, so the model's sequence is untouched: verify (@anemll-qwen35/models) compares a
 * converted chain's super-block outputs with these, layer boundary by layer boundary.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { ModelDisposedError } from "./errors.js";
import * as mx from "./mlx.js";
import type { MlxQwen35 } from "./mlx-qwen35.js";
import type { MxArray } from "./native.js";
import { KvCache } from "./qwen35/cache.js";
import { embed, linear } from "./qwen35/linear.js";
import { finalNorm, runLayers } from "./qwen35/model.js";

export interface MlxTrace {
  /** Logits of every position, row after row (float32, ids.length × vocabSize). */
  readonly logits: Float32Array;
  /** Per entry of `afterLayers`: the hidden state after that many layers, row after row (float32, ids.length × hiddenSize). */
  readonly hidden: readonly Float32Array[];
}

/**
 * Runs `ids` through `model` from an empty state. `afterLayers`: layer counts n (1…numHiddenLayers)
 * whose output to return, e.g. [4, 8] for the hidden state after layers 0–3 and 0–7.
 */
export async function traceMlx(
  model: MlxQwen35,
  ids: ArrayLike<number>,
  afterLayers: readonly number[],
): Promise<MlxTrace> {
  if (model.disposed) throw new ModelDisposedError("traceMlx");
  const cfg = model.config;
  const L = cfg.numHiddenLayers;
  if (model.ranks) throw new InvalidArgumentError("traceMlx: the model is split across ranks; load it whole");
  for (const n of afterLayers) {
    if (!Number.isInteger(n) || n < 1 || n > L)
      throw new InvalidArgumentError(`traceMlx: afterLayers holds ${n}, expected integers from 1 to ${L}`);
  }
  const T = ids.length;
  if (T === 0 || T > model.contextLength)
    throw new InvalidArgumentError(`traceMlx: needs 1 to ${model.contextLength} token ids, got ${T}`);
  for (let i = 0; i < T; i++) {
    const id = ids[i];
    if (!Number.isInteger(id) || id < 0 || id >= cfg.vocabSize)
      throw new InvalidArgumentError(
        `traceMlx: token id ${id} at index ${i} is not in [0, ${cfg.vocabSize})`,
      );
  }
  const w = model.weights;
  const kv = cfg.layerTypes.map((t) => (t === "full_attention" ? new KvCache({ step: T }) : undefined));
  const input = mx.array(Int32Array.from(ids as ArrayLike<number>), [1, T]);
  try {
    const out = mx.tidy(() => {
      const after: MxArray[] = [];
      const { h } = runLayers(
        cfg,
        w.layers,
        embed(w.embed, input),
        { kv, gdn: kv.map(() => undefined) },
        after,
      );
      after.push(h); // after[n - 1]: the output of layer n − 1
      const logits = mx.astype(linear(w.lmHead, finalNorm(cfg, w, h, "all")), "float32");
      return { logits, hidden: afterLayers.map((n) => mx.astype(after[n - 1], "float32")) };
    });
    try {
      await mx.asyncEval([out.logits, ...out.hidden]);
      return {
        logits: out.logits.toTypedArray() as Float32Array,
        hidden: out.hidden.map((a) => a.toTypedArray() as Float32Array),
      };
    } finally {
      mx.dispose([out.logits, ...out.hidden]);
    }
  } finally {
    input.dispose();
    for (const c of kv) c?.reset();
  }
}
