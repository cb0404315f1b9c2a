/**
 * Before/after: two reports of the same model under different options (ctx 256 vs 1024, fused vs
 * unfused, LUT4 vs LUT6 head, another chip). Deltas are b − a; ratios b / a.
 */
import type { CostReport } from "./report.js";
import { fmtBytes, fmtFlops, fmtMs, signed, table } from "./units.js";

export interface Delta {
  readonly a: number;
  readonly b: number;
  readonly delta: number;
  /** b / a (undefined when a is 0). */
  readonly ratio: number | undefined;
}

export interface Comparison {
  readonly a: { readonly name: string; readonly chip: string; readonly source: string };
  readonly b: { readonly name: string; readonly chip: string; readonly source: string };
  readonly totals: {
    readonly estimatedMs: Delta;
    readonly tokPerSec?: Delta;
    readonly predictions: Delta;
    readonly runtimeOps: Delta;
    readonly cpuOps: Delta;
    readonly gpuOps: Delta;
    readonly interruptions: Delta;
    readonly flops: Delta;
    readonly weightBytesRead: Delta;
    readonly bytesMoved: Delta;
    readonly weightBytesStored: Delta;
  };
  /** Packages by name; a package present on one side only has 0 on the other. */
  readonly packages: readonly {
    readonly name: string;
    readonly estimatedMs: Delta;
    readonly weightBytesStored: Delta;
  }[];
  /** Op types of the decode functions, sorted by |time delta|. */
  readonly opTypes: readonly {
    readonly type: string;
    readonly count: Delta;
    readonly estimatedMs: Delta;
    readonly bytes: Delta;
  }[];
}

function d(a: number, b: number): Delta {
  return { a, b, delta: b - a, ratio: a === 0 ? undefined : b / a };
}

function moved(r: CostReport): number {
  const t = r.totals;
  return (
    t.bytesRead.weights +
    t.bytesRead.activations +
    t.bytesRead.state +
    t.bytesWritten.activations +
    t.bytesWritten.state
  );
}

export function compareReports(a: CostReport, b: CostReport): Comparison {
  const names = [...new Set([...a.packages.map((p) => p.name), ...b.packages.map((p) => p.name)])];
  const pa = new Map(a.packages.map((p) => [p.name, p]));
  const pb = new Map(b.packages.map((p) => [p.name, p]));
  const ta = new Map(a.opTypes.map((o) => [o.type, o]));
  const tb = new Map(b.opTypes.map((o) => [o.type, o]));
  const types = [...new Set([...ta.keys(), ...tb.keys()])];
  return {
    a: { name: a.target.name, chip: a.chip.name, source: a.source },
    b: { name: b.target.name, chip: b.chip.name, source: b.source },
    totals: {
      estimatedMs: d(a.totals.estimatedMs, b.totals.estimatedMs),
      tokPerSec: a.chain && b.chain ? d(a.chain.estimatedTokPerSec, b.chain.estimatedTokPerSec) : undefined,
      predictions: d(a.packages.length, b.packages.length),
      runtimeOps: d(a.totals.runtimeOps, b.totals.runtimeOps),
      cpuOps: d(a.totals.cpu, b.totals.cpu),
      gpuOps: d(a.totals.gpu, b.totals.gpu),
      interruptions: d(a.totals.interruptions, b.totals.interruptions),
      flops: d(a.totals.flops, b.totals.flops),
      weightBytesRead: d(a.totals.bytesRead.weights, b.totals.bytesRead.weights),
      bytesMoved: d(moved(a), moved(b)),
      weightBytesStored: d(a.totals.weightBytesStored, b.totals.weightBytesStored),
    },
    packages: names.map((name) => ({
      name,
      estimatedMs: d(pa.get(name)?.prediction.estimatedMs ?? 0, pb.get(name)?.prediction.estimatedMs ?? 0),
      weightBytesStored: d(pa.get(name)?.weightBytesStored ?? 0, pb.get(name)?.weightBytesStored ?? 0),
    })),
    opTypes: types
      .map((type) => ({
        type,
        count: d(ta.get(type)?.count ?? 0, tb.get(type)?.count ?? 0),
        estimatedMs: d(ta.get(type)?.estimatedMs ?? 0, tb.get(type)?.estimatedMs ?? 0),
        bytes: d(ta.get(type)?.bytes ?? 0, tb.get(type)?.bytes ?? 0),
      }))
      .sort(
        (x, y) =>
          Math.abs(y.estimatedMs.delta) - Math.abs(x.estimatedMs.delta) || x.type.localeCompare(y.type),
      ),
  };
}

function ratio(x: Delta): string {
  return x.ratio === undefined ? "—" : `${x.ratio.toFixed(3)}×`;
}

function row(label: string, x: Delta, f: (v: number) => string): string[] {
  return [label, f(x.a), f(x.b), signed(f(x.delta), x.delta), ratio(x)];
}

export function formatComparison(c: Comparison): string {
  const n = (v: number) => `${Math.round(v)}`;
  const t = c.totals;
  const rows = [
    row("estimated per step", t.estimatedMs, fmtMs),
    ...(t.tokPerSec ? [row("projected tok/s", t.tokPerSec, (v) => v.toFixed(1))] : []),
    row("predictions", t.predictions, n),
    row("runtime ops", t.runtimeOps, n),
    row("CPU ops", t.cpuOps, n),
    row("GPU ops", t.gpuOps, n),
    row("interruptions", t.interruptions, n),
    row("compute", t.flops, fmtFlops),
    row("weights read", t.weightBytesRead, fmtBytes),
    row("bytes moved", t.bytesMoved, fmtBytes),
    row("weights stored", t.weightBytesStored, fmtBytes),
  ];
  const out = [
    `compare — a: ${c.a.name} (${c.a.chip}, ${c.a.source})  b: ${c.b.name} (${c.b.chip}, ${c.b.source})`,
    "",
    "Totals",
    table(["", "a", "b", "b − a", "b / a"], rows),
    "",
    "Packages",
    table(
      ["package", "a", "b", "b − a"],
      c.packages.map((p) => [
        p.name,
        fmtMs(p.estimatedMs.a),
        fmtMs(p.estimatedMs.b),
        signed(fmtMs(p.estimatedMs.delta), p.estimatedMs.delta),
      ]),
    ),
    "",
    "Op types (by |time change|)",
    table(
      ["type", "count a", "count b", "ms a", "ms b", "Δ ms", "Δ moved"],
      c.opTypes.map((o) => [
        o.type,
        n(o.count.a),
        n(o.count.b),
        fmtMs(o.estimatedMs.a),
        fmtMs(o.estimatedMs.b),
        signed(fmtMs(o.estimatedMs.delta), o.estimatedMs.delta),
        signed(fmtBytes(o.bytes.delta), o.bytes.delta),
      ]),
    ),
  ];
  return `${out.join("\n")}\n`;
}
