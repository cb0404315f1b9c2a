/**
 * The run → measure → record loop the model scenarios share: open a side, measure it, dispose it
 * whatever happens, and record a run carrying the side's backend, model and conversion beside
 * what was measured. Scenarios differ only in what they measure.
 */
import type { StepModel } from "@anemll-qwen35/generate";
import type { Opened } from "./backends.js";
import { backendNotes } from "./report.js";
import type { ScaleParams } from "./scale.js";
import type { ScenarioContext, ScenarioOutput } from "./scenario.js";
import type { Metric, Run, Skip } from "./schema.js";
import { type Side, sidesFor } from "./sides.js";
import { metric } from "./stats.js";
import { promptIds, runSteps, type StepTimings } from "./steps.js";
import type { ComponentTimer } from "./timed-backend.js";

/** What a scenario measured on one side; the run adds the side's backend, model and conversion. */
export interface Measured {
  readonly config: Run["config"];
  readonly metrics: Metric[];
  readonly notes?: string[];
}

/** A run measured on `side`. */
export function sideRun(side: Side, id: string, m: Measured): Run {
  return {
    id,
    backend: side.backend,
    model: side.model,
    conversion: side.conversion,
    config: m.config,
    metrics: m.metrics,
    notes: m.notes ?? [],
  };
}

/** Opens `side`, runs `fn` on the opened model, and disposes it whatever happens. */
export async function withOpened<T>(
  side: Side,
  fn: (opened: Opened<StepModel>) => Promise<T>,
  timer?: ComponentTimer,
): Promise<T> {
  const opened = await side.open(timer);
  try {
    return await fn(opened);
  } finally {
    await opened.model.dispose();
  }
}

/** The scale's fixed prompt, in `side`'s vocabulary. */
export function promptFor(side: Side, tokens: number): number[] {
  return promptIds(tokens, side.model.vocabSize ?? 1024);
}

/** The prompt, then the scale's warm-up and measured decode steps; `warm` holds the measured ones' ms. */
export async function warmDecode(
  model: StepModel,
  prompt: readonly number[],
  p: Pick<ScaleParams, "warmupSteps" | "decodeSteps">,
  afterStep?: (index: number) => void,
): Promise<StepTimings & { warm: number[] }> {
  const t = await runSteps(model, prompt, { decodeSteps: p.warmupSteps + p.decodeSteps, afterStep });
  return { ...t, warm: t.decodeMs.slice(p.warmupSteps) };
}

/** tok/s of each of these decode steps. */
export function tokSMetric(
  stepMs: readonly number[],
  description = "1000 / ms of each warm decode step",
): Metric {
  return metric(
    "decode_tok_s",
    "tok/s",
    stepMs.map((ms) => 1000 / ms),
    description,
  );
}

/** For each side of the scale's model (ANE chain, then MLX unless it cannot run here): one run each. */
export async function eachSide(
  ctx: ScenarioContext,
  scenario: string,
  measure: (side: Side, opened: Opened<StepModel>) => Promise<Measured>,
): Promise<ScenarioOutput> {
  const { sides, skipped } = await sidesFor(ctx);
  const runs: Run[] = [];
  for (const side of sides) {
    ctx.signal?.throwIfAborted();
    ctx.log(`${scenario}: ${side.label} · ${side.model.name}`);
    const m = await withOpened(side, (opened) => measure(side, opened));
    runs.push(sideRun(side, `${side.backend} · ${side.model.name}`, m));
  }
  return { runs, skipped, notes: backendNotes(runs) };
}

/** A scenario that could not run at all: why, and nothing measured. */
export function nothingRan(what: string, reason: string, notes: string[] = []): ScenarioOutput {
  return { runs: [], skipped: [{ what, reason } satisfies Skip], notes };
}

/** A target decoding greedily alone, the yardstick of the drafting scenarios: its steps and margins. */
export function targetRun(target: Side, alone: StepTimings, tokens: number): Run {
  const margins = alone.margins.length
    ? [
        metric(
          "logit_margin",
          "logit",
          alone.margins,
          "target's top-1 minus top-2 logit per position: small margins make any perturbation flip the greedy token",
        ),
      ]
    : [];
  return sideRun(target, `target ${target.backend} · ${target.model.name}`, {
    config: { role: "target", tokens },
    metrics: [metric("decode_ms", "ms", alone.decodeMs, "target greedy decode steps, alone"), ...margins],
  });
}
