/**
 * Splits one chain step's predict() times by package kind: the embedding, the super-block packages
 * and the lm_head. "ms per super-block" is the super-block packages' time divided by the number of
 * super-blocks they hold, so chains fused differently compare per unit of model.
 */
import type { ChainManifest } from "@anemll-qwen35/ir/chain";
import type { PredictEvent } from "./timed-backend.js";

export interface StepSplit {
  readonly embedMs: number;
  readonly superBlocksMs: number;
  readonly lmHeadMs: number;
  readonly msPerSuperBlock: number;
  /** Mean ms of one super-block package predict. */
  readonly msPerPackage: number;
}

export function splitStep(manifest: ChainManifest, events: readonly PredictEvent[]): StepSplit {
  const kind = new Map(manifest.components.map((c) => [c.name, c.kind]));
  const blocks = manifest.components
    .filter((c) => c.kind === "superblocks")
    .reduce((n, c) => n + c.io.superBlocks.length, 0);
  let embedMs = 0;
  let superBlocksMs = 0;
  let lmHeadMs = 0;
  let packages = 0;
  for (const e of events) {
    const k = kind.get(e.component);
    if (k === "embed") embedMs += e.ms;
    else if (k === "lm_head") lmHeadMs += e.ms;
    else if (k === "superblocks") {
      superBlocksMs += e.ms;
      packages++;
    }
  }
  return {
    embedMs,
    superBlocksMs,
    lmHeadMs,
    msPerSuperBlock: blocks ? superBlocksMs / blocks : 0,
    msPerPackage: packages ? superBlocksMs / packages : 0,
  };
}
