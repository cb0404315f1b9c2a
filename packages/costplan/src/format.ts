/**
 * The readable report: summary, packages, op-type breakdown, top ops, graph interruptions,
 * CPU/GPU fallbacks with their reasons, projected tok/s, and the figures the times rest on.
 */
import type { CostReport, Fallback } from "./report.js";
import { fmtBytes, fmtFlops, fmtMs, fmtPct, table } from "./units.js";

export interface FormatOptions {
  /** Rows of the top-ops table (default 20). */
  topOps?: number;
  /** Fallback ops listed one by one before grouping the rest by rule (default 30). */
  fallbacks?: number;
}

function sourceLine(r: CostReport): string {
  return r.source === "mlcomputeplan"
    ? "placement from Core ML's MLComputePlan; times are roofline estimates"
    : "placement PREDICTED by the static rule table (not MLComputePlan); times are roofline estimates, not measurements";
}

function figure(f: { value: number; kind: string }, unit: string): string {
  return `${f.value}${unit} (${f.kind})`;
}

export function formatReport(r: CostReport, opts: FormatOptions = {}): string {
  const out: string[] = [];
  const t = r.totals;
  out.push(`costplan — ${r.target.kind} ${r.target.name}${r.target.path ? ` (${r.target.path})` : ""}`);
  out.push(`  ${r.chip.name} · compute units ${r.computeUnits} · source: ${r.source}`);
  out.push(`  ${sourceLine(r)}`);
  out.push("");
  out.push("Summary (one decode step: the decode function of each package, once)");
  out.push(
    `  packages ${t.packages} · runtime ops ${t.runtimeOps} (ANE ${t.ane}, CPU ${t.cpu}, GPU ${t.gpu})`,
  );
  out.push(`  weights stored ${fmtBytes(t.weightBytesStored)}`);
  out.push(
    `  read ${fmtBytes(t.bytesRead.weights)} weights + ${fmtBytes(t.bytesRead.activations)} activations + ${fmtBytes(t.bytesRead.state)} state · written ${fmtBytes(t.bytesWritten.activations + t.bytesWritten.state)} (${fmtBytes(t.bytesWritten.state)} to state)`,
  );
  out.push(`  compute ${fmtFlops(t.flops)} · graph interruptions ${t.interruptions}`);
  const ioMs = r.packages.reduce((s, p) => s + (p.prediction.ioMs ?? 0), 0);
  const kvMs = r.packages.reduce((s, p) => s + (p.prediction.kvMs ?? 0), 0);
  const extra = [
    ioMs > 0 ? `${fmtMs(ioMs)} passing inputs/outputs` : "",
    kvMs > 0 ? `${fmtMs(kvMs)} ctx term` : "",
  ].filter(Boolean);
  const msBand = t.estimatedMsBand
    ? ` [band ${fmtMs(t.estimatedMsBand.low)}–${fmtMs(t.estimatedMsBand.high)}]`
    : "";
  out.push(
    `  estimated ${fmtMs(t.estimatedMs)}${msBand} (Σ package predictions incl. ${fmtMs(r.runtime.dispatchMs.value)} dispatch each` +
      (extra.length ? `, ${extra.join(", ")})` : ")"),
  );
  if (r.chain) {
    const c = r.chain;
    const b = c.estimatedTokPerSecBand;
    out.push(
      `  projected decode: ${c.estimatedTokPerSec.toFixed(1)} tok/s${b ? ` (band ${b.low.toFixed(1)}–${b.high.toFixed(1)})` : ""} (${fmtMs(c.estimatedMsPerToken)} per token, ${c.predictionsPerToken} predictions)` +
        (c.measuredTokPerSec !== undefined ? ` · measured ${c.measuredTokPerSec.toFixed(1)} tok/s` : ""),
    );
  }
  out.push("");
  out.push("Packages");
  out.push(
    table(
      ["package", "function", "ops", "ANE", "CPU", "GPU", "int", "weights", "est", "band", "measured"],
      r.packages.map((p) => {
        const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
        const s = f?.summary;
        return [
          p.name,
          p.decodeFunction,
          `${s?.runtimeOps ?? 0}`,
          `${s?.ane ?? 0}`,
          `${s?.cpu ?? 0}`,
          `${s?.gpu ?? 0}`,
          `${f?.interruptions.count ?? 0}`,
          fmtBytes(p.weightBytesStored),
          fmtMs(p.prediction.estimatedMs),
          p.prediction.band ? `${fmtMs(p.prediction.band.lowMs)}–${fmtMs(p.prediction.band.highMs)}` : "—",
          p.prediction.measuredMs !== undefined ? fmtMs(p.prediction.measuredMs) : "—",
        ];
      }),
    ),
  );
  out.push("");
  out.push("Op types (decode functions)");
  out.push(
    table(
      ["type", "count", "ANE", "CPU", "GPU", "compute", "moved", "weights", "est", "share"],
      r.opTypes.map((o) => [
        o.type,
        `${o.count}`,
        `${o.ane}`,
        `${o.cpu}`,
        `${o.gpu}`,
        fmtFlops(o.flops),
        fmtBytes(o.bytes),
        fmtBytes(o.weightBytes),
        fmtMs(o.estimatedMs),
        fmtPct(o.share),
      ]),
    ),
  );
  out.push("");
  const nTop = opts.topOps ?? 20;
  out.push(`Top ${Math.min(nTop, r.topOps.length)} ops`);
  out.push(
    table(
      ["op", "type", "device", "compute", "moved", "bound", "est"],
      r.topOps
        .slice(0, nTop)
        .map((o) => [
          `${o.package}/${o.function}#${o.index} ${o.name}`,
          o.type,
          o.device,
          fmtFlops(o.flops),
          fmtBytes(o.bytes),
          o.bound,
          fmtMs(o.estimatedMs),
        ]),
    ),
  );
  out.push("");
  out.push("Graph interruptions (non-ANE runs between ANE ops; edge runs listed apart)");
  let anyRun = false;
  for (const p of r.packages) {
    for (const f of p.functions) {
      const i = f.interruptions;
      if (i.runs.length === 0) continue;
      anyRun = true;
      out.push(
        `  ${p.name}/${f.name}: ${i.count} interruption(s), ${i.edgeRuns} edge run(s), switches ${fmtMs(i.estimatedSwitchMs)}, islands ${fmtMs(i.estimatedIslandMs)}`,
      );
      out.push(`    ${i.timeline}`);
    }
  }
  if (!anyRun) out.push("  none — every runtime op is placed on the ANE");
  out.push("");
  out.push(...formatFallbacks(r.fallbacks, opts.fallbacks ?? 30));
  out.push("");
  out.push("Figures the times rest on");
  out.push(
    `  ANE ${figure(r.chip.aneGBps, " GB/s")} × bandwidth fraction ${figure(r.runtime.bandwidthFraction, "")} · ANE fp16 ${figure(r.chip.aneFp16Tflops, " TFLOPS")}`,
  );
  out.push(
    `  dispatch ${figure(r.runtime.dispatchMs, " ms")} per prediction · device switch ${figure(r.runtime.switchMs, " ms")} · CPU ${figure(r.chip.cpuGBps, " GB/s")}, ${figure(r.chip.cpuGflops, " GFLOPS")}`,
  );
  if (r.runtime.aneOpMs.value > 0)
    out.push(
      `  fixed cost per ANE kernel op (conv, linear, matmul, SDPA) ${figure(r.runtime.aneOpMs, " ms")}`,
    );
  if (r.runtime.ioMsPerMB)
    out.push(`  inputs/outputs ${figure(r.runtime.ioMsPerMB, " ms per MB")} (states excluded)`);
  if (r.runtime.kvMsPerMB && r.runtime.kvMsPerMB.value > 0)
    out.push(
      `  ctx term ${figure(r.runtime.kvMsPerMB, " ms per MB")} of KV rows read, up to ${r.runtime.kvKneeRows?.value ?? "?"} rows per layer`,
    );
  if (r.runtimeBand)
    out.push(
      `  band: per-op cost ${(r.runtimeBand.low.aneOpMs.value * 1e3).toFixed(1)}–${(r.runtimeBand.high.aneOpMs.value * 1e3).toFixed(1)} µs (${r.runtimeBand.source})`,
    );
  if (r.notes.length) {
    out.push("");
    out.push("Notes");
    for (const n of r.notes) out.push(`  - ${n}`);
  }
  return `${out.join("\n")}\n`;
}

function formatFallbacks(fallbacks: readonly Fallback[], limit: number): string[] {
  const out = [`CPU/GPU fallbacks (${fallbacks.length})`];
  if (fallbacks.length === 0) {
    out.push("  none");
    return out;
  }
  for (const f of fallbacks.slice(0, limit)) {
    out.push(
      `  ${f.package}/${f.function}#${f.index} ${f.name} (${f.type}) → ${f.device}${f.soft ? " [soft]" : ""}`,
    );
    out.push(`      ${f.rule}: ${f.reason}`);
  }
  const rest = fallbacks.slice(limit);
  if (rest.length) {
    const byRule = new Map<string, number>();
    for (const f of rest)
      byRule.set(`${f.rule} → ${f.device}`, (byRule.get(`${f.rule} → ${f.device}`) ?? 0) + 1);
    out.push(`  … and ${rest.length} more: ${[...byRule].map(([k, n]) => `${n}× ${k}`).join(", ")}`);
  }
  return out;
}
