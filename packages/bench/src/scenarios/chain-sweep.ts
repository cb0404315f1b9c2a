/**
 * What the ctx and fusion sweeps share: one run per chain option set, each chain converted (or
 * reused) and decoded greedily with every package's predict() timed, giving per-step ms per
 * super-block, per package, for the embedding and the lm_head, and tok/s; and the chart of ms per
 * super-block over the sweep.
 */

import type { LineChart } from "../charts.js";
import { type Measured, promptFor, sideRun, tokSMetric, warmDecode, withOpened } from "../measure.js";
import type { ChainOptions } from "../models.js";
import { type StepSplit, splitStep } from "../per-package.js";
import { lineChart, lineRows } from "../report.js";
import type { ScenarioContext } from "../scenario.js";
import type { Metric, Run } from "../schema.js";
import { aneSide, type Side } from "../sides.js";
import { metric } from "../stats.js";
import { ComponentTimer } from "../timed-backend.js";

/** A point of a sweep: the chain's options, and what its run is called and records. */
export interface ChainPoint {
  readonly label: string;
  readonly chain: Partial<ChainOptions>;
  readonly config: (side: Side) => Run["config"];
  /** Said after the label in the progress line. */
  readonly detail?: (side: Side) => string;
}

/** One run per point: `<backend> · <label>`, measured by measureChain. */
export async function sweepChains(
  ctx: ScenarioContext,
  scenario: string,
  points: readonly ChainPoint[],
): Promise<Run[]> {
  const runs: Run[] = [];
  for (const point of points) {
    ctx.signal?.throwIfAborted();
    const side = await aneSide(ctx, ctx.params.model, point.chain);
    const config = point.config(side);
    ctx.log(`${scenario}: ${side.label} ${point.label}${point.detail ? ` ${point.detail(side)}` : ""}`);
    runs.push(
      sideRun(side, `${side.backend} · ${point.label}`, { config, metrics: await measureChain(ctx, side) }),
    );
  }
  return runs;
}

/** decode_ms, decode_tok_s and load_ms: the end of every sweep run's metrics. */
export function decodeAndLoad(warm: readonly number[], loadMs: number): Metric[] {
  return [
    metric("decode_ms", "ms", warm, "each warm decode step (host work included)"),
    tokSMetric(warm),
    metric("load_ms", "ms", [loadMs]),
  ];
}

export async function measureChain(ctx: ScenarioContext, side: Side): Promise<Measured["metrics"]> {
  const p = ctx.params;
  const manifest = side.manifest;
  if (!manifest) throw new Error(`${side.label} has no chain manifest`);
  const timer = new ComponentTimer();
  return withOpened(
    side,
    async (opened) => {
      const splits: StepSplit[] = [];
      const t = await warmDecode(opened.model, promptFor(side, p.promptTokens), p, (i) => {
        const events = timer.take();
        if (i >= p.warmupSteps) splits.push(splitStep(manifest, events));
      });
      const per = (name: string, of: (s: StepSplit) => number, description?: string) =>
        metric(name, "ms", splits.map(of), description);
      return [
        per(
          "ms_per_superblock",
          (s) => s.msPerSuperBlock,
          "super-block packages' predict ms per step / super-blocks",
        ),
        per("ms_per_package", (s) => s.msPerPackage, "mean predict ms of one super-block package per step"),
        per("superblocks_ms", (s) => s.superBlocksMs, "all super-block packages per step"),
        per("embed_ms", (s) => s.embedMs),
        per("lm_head_ms", (s) => s.lmHeadMs),
        ...decodeAndLoad(t.warm, opened.loadMs),
      ];
    },
    timer,
  );
}

/** ms per super-block over the sweep's x, one line per backend. */
export function msPerSuperBlockChart(
  runs: readonly Run[],
  title: string,
  x: (r: Run) => string | number,
  xTitle: string,
): LineChart {
  return lineChart("ms-per-superblock", title, lineRows(runs, "ms_per_superblock", x), {
    xTitle,
    xType: "ordinal",
    yTitle: "ms per super-block",
    color: "backend",
  });
}
