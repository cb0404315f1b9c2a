/**
 * The measurement both sweeps share: one ANE chain, decoded greedily with every package's
 * predict() timed, giving per-step ms per super-block, per package, for the embedding and the
 * lm_head, and tok/s.
 */

import { type StepSplit, splitStep } from "../per-package.js";
import type { ScenarioContext } from "../scenario.js";
import type { Metric } from "../schema.js";
import type { Side } from "../sides.js";
import { metric } from "../stats.js";
import { promptIds, runSteps } from "../steps.js";
import { ComponentTimer } from "../timed-backend.js";

export async function measureChain(ctx: ScenarioContext, side: Side): Promise<Metric[]> {
  const p = ctx.params;
  const manifest = side.manifest;
  if (!manifest) throw new Error(`${side.label} has no chain manifest`);
  const timer = new ComponentTimer();
  const opened = await side.open(timer);
  try {
    const splits: StepSplit[] = [];
    const prompt = promptIds(p.promptTokens, side.model.vocabSize ?? 1024);
    const t = await runSteps(opened.model, prompt, {
      decodeSteps: p.warmupSteps + p.decodeSteps,
      afterStep: (i) => {
        const events = timer.take();
        if (i >= p.warmupSteps) splits.push(splitStep(manifest, events));
      },
    });
    const warm = t.decodeMs.slice(p.warmupSteps);
    return [
      metric(
        "ms_per_superblock",
        "ms",
        splits.map((s) => s.msPerSuperBlock),
        "super-block packages' predict ms per step / super-blocks",
      ),
      metric(
        "ms_per_package",
        "ms",
        splits.map((s) => s.msPerPackage),
        "mean predict ms of one super-block package per step",
      ),
      metric(
        "superblocks_ms",
        "ms",
        splits.map((s) => s.superBlocksMs),
        "all super-block packages per step",
      ),
      metric(
        "embed_ms",
        "ms",
        splits.map((s) => s.embedMs),
      ),
      metric(
        "lm_head_ms",
        "ms",
        splits.map((s) => s.lmHeadMs),
      ),
      metric("decode_ms", "ms", warm, "each warm decode step (host work included)"),
      metric(
        "decode_tok_s",
        "tok/s",
        warm.map((ms) => 1000 / ms),
      ),
      metric("load_ms", "ms", [opened.loadMs]),
    ];
  } finally {
    await opened.model.dispose();
  }
}
