/**
 * Graph interruptions as anemll-profile defines them (ane-toolchains.md §3.2 step 6): walk a
 * function's ops in program order (load-time ops skipped); a maximal run of non-ANE ops with ANE
 * ops on both sides is an interruption, a leading or trailing run is an edge run. Each boundary
 * between the ANE and another device costs a switch (`switchMs`, assumed — anemll-profile's 300 ms
 * is a ranking weight); an interruption has two, an edge run one.
 */
import type { Interruptions, OpEntry, Run } from "./report.js";

type Device = "ANE" | "CPU" | "GPU";

export function findInterruptions(ops: readonly OpEntry[], switchMs: number): Interruptions {
  const runtime = ops.filter((o) => o.device !== "load");
  const hasAne = runtime.some((o) => o.device === "ANE");
  const segments: { ane: boolean; ops: OpEntry[] }[] = [];
  for (const op of runtime) {
    const ane = op.device === "ANE";
    const last = segments[segments.length - 1];
    if (last && last.ane === ane) last.ops.push(op);
    else segments.push({ ane, ops: [op] });
  }
  const runs: Run[] = [];
  const timeline: string[] = [];
  let interruptions = 0;
  segments.forEach((seg, i) => {
    const first = seg.ops[0].index;
    const lastIdx = seg.ops[seg.ops.length - 1].index;
    const span = first === lastIdx ? `${first}` : `${first}-${lastIdx}`;
    if (seg.ane) {
      timeline.push(`ANE ${span}`);
      return;
    }
    const inner = i > 0 && i < segments.length - 1; // ANE segments on both sides (segments alternate)
    const devices = [...new Set(seg.ops.map((o) => o.device as Device))].sort();
    const soft = seg.ops.filter((o) => o.supportedDevices?.includes("ANE")).length;
    const run: Run = {
      kind: inner ? "interruption" : "edge",
      start: first,
      end: lastIdx,
      ops: seg.ops.length,
      devices,
      types: [...new Set(seg.ops.map((o) => o.type))],
      softOps: soft,
      hardOps: seg.ops.length - soft,
      estimatedMs: seg.ops.reduce((s, o) => s + o.estimatedMs, 0),
      boundaries: !hasAne ? 0 : inner ? 2 : 1,
    };
    runs.push(run);
    if (inner) interruptions++;
    timeline.push(`${inner ? `INT#${interruptions}` : "EDGE"} ${devices.join("+")} ${span}`);
  });
  const interrupted = runs.filter((r) => r.kind === "interruption");
  return {
    count: interruptions,
    edgeRuns: runs.length - interrupted.length,
    interruptedOps: interrupted.reduce((s, r) => s + r.ops, 0),
    nonAneOps: runs.reduce((s, r) => s + r.ops, 0),
    estimatedSwitchMs: runs.reduce((s, r) => s + r.boundaries, 0) * switchMs,
    estimatedIslandMs: interrupted.reduce((s, r) => s + r.estimatedMs, 0),
    runs,
    timeline: timeline.join(" | "),
  };
}
