/**
 * What every scenario reports besides its runs: chart rows of one metric across runs (bars per
 * config, lines per sweep), the charts drawn from them, and the standing caveat of runs on
 * stand-in backends.
 */
import type { BarChart, LineChart, Row } from "./charts.js";
import type { Run } from "./schema.js";

/** Bar rows of one metric's median and p10/p90 per run. */
export function barRows(runs: readonly Run[], name: string, extra: (r: Run) => Row = () => ({})): Row[] {
  const rows: Row[] = [];
  for (const r of runs) {
    const m = r.metrics.find((x) => x.name === name);
    if (!m) continue;
    rows.push({ run: r.id, median: m.summary.median, p10: m.summary.p10, p90: m.summary.p90, ...extra(r) });
  }
  return rows;
}

/** Line rows (x, backend, median, p10, p90, extra fields) of one metric over the runs that have it. */
export function lineRows(
  runs: readonly Run[],
  name: string,
  x: (r: Run) => string | number,
  extra: (r: Run) => Row = () => ({}),
): Row[] {
  const rows: Row[] = [];
  for (const r of runs) {
    const m = r.metrics.find((v) => v.name === name);
    if (m) {
      rows.push({
        x: x(r),
        backend: r.backend,
        median: m.summary.median,
        p10: m.summary.p10,
        p90: m.summary.p90,
        ...extra(r),
      });
    }
  }
  return rows;
}

/**
 * Bars of the rows' `median` per `x` (default "run"), coloured by `color`; p10–p90 whiskers when
 * `whiskers`.
 */
export function barChart(
  name: string,
  title: string,
  rows: readonly Row[],
  yTitle: string,
  o: { readonly x?: string; readonly color?: string; readonly whiskers?: boolean } = {},
): BarChart {
  const whiskers = o.whiskers ? { lo: "p10", hi: "p90" } : {};
  return {
    kind: "bar",
    name,
    title,
    rows,
    x: o.x ?? "run",
    y: "median",
    yTitle,
    color: o.color,
    ...whiskers,
  };
}

/** Lines of lineRows' `median` over `x`, with p10–p90 whiskers. */
export function lineChart(
  name: string,
  title: string,
  rows: readonly Row[],
  axes: Pick<LineChart, "xTitle" | "xType" | "yTitle" | "color">,
): LineChart {
  return { kind: "line", name, title, rows, x: "x", y: "median", lo: "p10", hi: "p90", ...axes };
}

/** The standing caveat of a Linux run: which stand-ins measured what. */
export function backendNotes(runs: readonly Run[]): string[] {
  const notes: string[] = [];
  if (runs.some((r) => r.backend === "ane-reference")) {
    notes.push(
      "ane-reference is the reference MIL interpreter on the CPU (fp16-emulated) running the same program Core ML would run on the ANE; it exercises the pipeline and does not measure an ANE.",
    );
  }
  if (runs.some((r) => r.backend === "mlx-cpu")) {
    notes.push("mlx-cpu is MLX's CPU backend standing in for the GPU (Metal is macOS-only).");
  }
  return notes;
}
