/**
 * Summaries of raw samples. Percentiles interpolate linearly between order statistics (the
 * "linear" method of numpy.percentile), so p10/p90 of a handful of samples stay inside their range.
 */
import type { Metric, Summary } from "./schema.js";

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) throw new RangeError("percentile of no samples");
  const at = (sorted.length - 1) * p;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

export function summarize(samples: readonly number[]): Summary {
  if (samples.length === 0) throw new RangeError("summarize needs at least one sample");
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    median: percentile(sorted, 0.5),
    mean: sorted.reduce((s, x) => s + x, 0) / sorted.length,
    min: sorted[0],
    max: sorted[sorted.length - 1],
    p10: percentile(sorted, 0.1),
    p90: percentile(sorted, 0.9),
  };
}

export function metric(name: string, unit: string, samples: readonly number[], description?: string): Metric {
  return { name, unit, samples: [...samples], summary: summarize(samples), description };
}

/** The median of a named metric of a run (throws when absent: a scenario bug, not user input). */
export function medianOf(metrics: readonly Metric[], name: string): number {
  const m = metrics.find((x) => x.name === name);
  if (!m) throw new Error(`no metric "${name}" (have ${metrics.map((x) => x.name).join(", ")})`);
  return m.summary.median;
}
