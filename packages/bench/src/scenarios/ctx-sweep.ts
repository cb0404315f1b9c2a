/**
 * ctx-sweep: the same model converted at several context lengths. The attention layers' KV cache
 * and mask grow with ctx, so ms per super-block shows what context costs the ANE graph; MLX with
 * its KV cache preallocated to the same ctx runs alongside as the GPU's curve.
 */
import type { ChartSpec } from "../charts.js";
import { promptFor, sideRun, warmDecode, withOpened } from "../measure.js";
import { backendNotes, lineChart, lineRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run, Skip } from "../schema.js";
import { isSkip, mlxSide } from "../sides.js";
import { decodeAndLoad, msPerSuperBlockChart, sweepChains } from "./chain-sweep.js";

export const ctxSweep: Scenario = {
  name: "ctx-sweep",
  question: "How do ms per super-block and tok/s change with the context length a chain is converted for?",
  async run(ctx, p) {
    const runs = await sweepChains(
      ctx,
      "ctx-sweep",
      p.ctxSweep.map((c) => ({
        label: `ctx ${c}`,
        chain: { ctx: c, fuse: "all" },
        config: () => ({ ctx: c, fuse: "all", decodeSteps: p.decodeSteps }),
      })),
    );
    const skipped: Skip[] = [];
    for (const c of p.ctxSweep) {
      const m = await mlxSide(ctx, p.model, { contextLength: c, preallocate: true });
      if (isSkip(m)) {
        skipped.push({ what: `${m.what} ctx ${c}`, reason: m.reason });
        continue;
      }
      ctx.log(`ctx-sweep: ${m.label} ctx ${c} (KV preallocated)`);
      const metrics = await withOpened(m, async (opened) => {
        const t = await warmDecode(opened.model, promptFor(m, p.promptTokens), p);
        return decodeAndLoad(t.warm, opened.loadMs);
      });
      runs.push(
        sideRun(m, `${m.backend} · ctx ${c}`, {
          config: { ctx: c, kvPreallocated: true, decodeSteps: p.decodeSteps },
          metrics,
          notes: ["KV cache allocated for the whole context at load, as the ANE chain's is"],
        }),
      );
    }
    return { runs, skipped, notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const ctxOf = (r: Run) => Number(r.config.ctx);
    const xTitle = "context length (tokens)";
    return [
      msPerSuperBlockChart(runs, "ms per super-block vs context (ANE chain, fully fused)", ctxOf, xTitle),
      lineChart("tok-s", "Decode tok/s vs context", lineRows(runs, "decode_tok_s", ctxOf), {
        xTitle,
        xType: "ordinal",
        yTitle: "tok/s",
        color: "backend",
      }),
    ];
  },
};
