/**
 * Parameter counts of the text model, summed from the expected tensor shapes (so they count
 * exactly what the converter will read; vision tower and MTP head excluded).
 */
import { numel } from "@anemll-qwen35/core";
import type { Qwen35Config } from "./config.js";
import { expectedTensors } from "./weights.js";

export interface ParameterCounts {
  /** Embedding table V x D. */
  readonly embedding: number;
  /** Separate LM head (0 when tied to the embedding). */
  readonly lmHead: number;
  /** Final norm. */
  readonly finalNorm: number;
  /** Per decoder layer, in layer order. */
  readonly perLayer: readonly number[];
  /** All decoder layers. */
  readonly layers: number;
  /** Whole text model: embedding + layers + final norm + LM head (the embedding counted once when tied). */
  readonly total: number;
  /** total minus embedding and LM head. */
  readonly nonEmbedding: number;
  /** MoE only: parameters used per token (top-k routed experts + shared expert + the rest). */
  readonly activePerToken: number;
}

/** Counts for `config`; `tied` defaults to the config's flag. */
export function parameterCounts(config: Qwen35Config, options: { tied?: boolean } = {}): ParameterCounts {
  const tied = options.tied ?? config.tieWordEmbeddings;
  const perLayer = new Array<number>(config.numHiddenLayers).fill(0);
  let embedding = 0;
  let lmHead = 0;
  let finalNorm = 0;
  let inactiveExperts = 0;
  for (const { canonical, shape } of expectedTensors(config, { tied })) {
    const n = numel(shape);
    if (canonical === "embed") embedding = n;
    else if (canonical === "lm_head") lmHead = n;
    else if (canonical === "norm") finalNorm = n;
    else {
      const layer = Number(/^layers\.(\d+)\./.exec(canonical)![1]);
      perLayer[layer] += n;
      if (config.moe && /\.mlp\.experts\./.test(canonical)) {
        const { numExperts: E, numExpertsPerTok: k } = config.moe;
        inactiveExperts += (n * (E - k)) / E;
      }
    }
  }
  const layers = perLayer.reduce((a, b) => a + b, 0);
  const total = embedding + layers + finalNorm + lmHead;
  return {
    embedding,
    lmHead,
    finalNorm,
    perLayer,
    layers,
    total,
    nonEmbedding: total - embedding - lmHead,
    activePerToken: total - inactiveExperts,
  };
}
