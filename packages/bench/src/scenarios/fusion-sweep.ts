/**
 * fusion-sweep: the same model converted with 1, 2, 3 … super-blocks per package (and "all"). Each
 * package boundary is a host predict() call that moves hidden and state tensors out and back in;
 * fewer, larger packages pay that less often.
 */
import type { ChartSpec } from "../charts.js";
import { backendNotes, barChart, lineRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import type { Side } from "../sides.js";
import { msPerSuperBlockChart, sweepChains } from "./chain-sweep.js";

const superBlockPackages = (side: Side) =>
  side.manifest?.components.filter((c) => c.kind === "superblocks").length ?? 0;

export const fusionSweep: Scenario = {
  name: "fusion-sweep",
  question:
    "How do ms per super-block and tok/s change with the number of super-blocks fused into one package?",
  async run(ctx, p) {
    const runs = await sweepChains(
      ctx,
      "fusion-sweep",
      p.fuseSweep.map((fuse) => ({
        label: `fuse ${fuse}`,
        chain: { fuse },
        config: (side) => ({
          fuse: String(fuse),
          superBlockPackages: superBlockPackages(side),
          ctx: p.ctx,
          decodeSteps: p.decodeSteps,
        }),
        detail: (side) => `(${superBlockPackages(side)} super-block packages)`,
      })),
    );
    return { runs, skipped: [], notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const fuseOf = (r: Run) => `${r.config.fuse} (${r.config.superBlockPackages} pkg)`;
    const tokS = lineRows(runs, "decode_tok_s", fuseOf).map((r) => ({ ...r, run: r.x }));
    return [
      msPerSuperBlockChart(
        runs,
        "ms per super-block vs super-blocks per package",
        fuseOf,
        "fuse (super-block packages)",
      ),
      barChart("tok-s", "Decode tok/s per fusion", tokS, "tok/s", { whiskers: true }),
    ];
  },
};
