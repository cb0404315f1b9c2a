/**
 * fusion-sweep: the same model converted with 1, 2, 3 … super-blocks per package (and "all"). Each
 * package boundary is a host predict() call that moves hidden and state tensors out and back in;
 * fewer, larger packages pay that less often.
 */
import type { ChartSpec } from "../charts.js";
import { backendNotes, lineRows } from "../report.js";
import type { Scenario, ScenarioOutput } from "../scenario.js";
import type { Run } from "../schema.js";
import { aneSide } from "../sides.js";
import { measureChain } from "./chain-sweep.js";

export const fusionSweep: Scenario = {
  name: "fusion-sweep",
  question:
    "How do ms per super-block and tok/s change with the number of super-blocks fused into one package?",
  async run(ctx): Promise<ScenarioOutput> {
    const p = ctx.params;
    const runs: Run[] = [];
    for (const fuse of p.fuseSweep) {
      ctx.signal?.throwIfAborted();
      const side = await aneSide(ctx, p.model, { fuse });
      const packages = side.manifest?.components.filter((c) => c.kind === "superblocks").length ?? 0;
      ctx.log(`fusion-sweep: ${side.label} fuse ${fuse} (${packages} super-block packages)`);
      runs.push({
        id: `${side.backend} · fuse ${fuse}`,
        backend: side.backend,
        model: side.model,
        conversion: side.conversion,
        config: { fuse: String(fuse), superBlockPackages: packages, ctx: p.ctx, decodeSteps: p.decodeSteps },
        metrics: await measureChain(ctx, side),
        notes: [],
      });
    }
    return { runs, skipped: [], notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const fuseOf = (r: Run) => `${r.config.fuse} (${r.config.superBlockPackages} pkg)`;
    return [
      {
        kind: "line",
        name: "ms-per-superblock",
        title: "ms per super-block vs super-blocks per package",
        rows: lineRows(runs, "ms_per_superblock", fuseOf),
        x: "x",
        xTitle: "fuse (super-block packages)",
        xType: "ordinal",
        y: "median",
        yTitle: "ms per super-block",
        color: "backend",
        lo: "p10",
        hi: "p90",
      },
      {
        kind: "bar",
        name: "tok-s",
        title: "Decode tok/s per fusion",
        rows: lineRows(runs, "decode_tok_s", fuseOf).map((r) => ({ ...r, run: r.x })),
        x: "run",
        y: "median",
        yTitle: "tok/s",
        lo: "p10",
        hi: "p90",
      },
    ];
  },
};
