/**
 * ctx-sweep: the same model converted at several context lengths. The attention layers' KV cache
 * and mask grow with ctx, so ms per super-block shows what context costs the ANE graph; MLX with
 * its KV cache preallocated to the same ctx runs alongside as the GPU's curve.
 */
import type { ChartSpec } from "../charts.js";
import { backendNotes, lineRows } from "../report.js";
import type { Scenario, ScenarioOutput } from "../scenario.js";
import type { Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide } from "../sides.js";
import { metric } from "../stats.js";
import { promptIds, runSteps } from "../steps.js";
import { measureChain } from "./chain-sweep.js";

export const ctxSweep: Scenario = {
  name: "ctx-sweep",
  question: "How do ms per super-block and tok/s change with the context length a chain is converted for?",
  async run(ctx): Promise<ScenarioOutput> {
    const p = ctx.params;
    const runs: Run[] = [];
    const skipped: Skip[] = [];
    for (const c of p.ctxSweep) {
      ctx.signal?.throwIfAborted();
      const side = await aneSide(ctx, p.model, { ctx: c, fuse: "all" });
      ctx.log(`ctx-sweep: ${side.label} ctx ${c}`);
      runs.push({
        id: `${side.backend} · ctx ${c}`,
        backend: side.backend,
        model: side.model,
        conversion: side.conversion,
        config: { ctx: c, fuse: "all", decodeSteps: p.decodeSteps },
        metrics: await measureChain(ctx, side),
        notes: [],
      });
    }
    for (const c of p.ctxSweep) {
      const m = await mlxSide(ctx, p.model, { contextLength: c, preallocate: true });
      if (isSkip(m)) {
        skipped.push({ what: `${m.what} ctx ${c}`, reason: m.reason });
        continue;
      }
      ctx.log(`ctx-sweep: ${m.label} ctx ${c} (KV preallocated)`);
      const opened = await m.open();
      try {
        const t = await runSteps(opened.model, promptIds(p.promptTokens, m.model.vocabSize ?? 1024), {
          decodeSteps: p.warmupSteps + p.decodeSteps,
        });
        const warm = t.decodeMs.slice(p.warmupSteps);
        runs.push({
          id: `${m.backend} · ctx ${c}`,
          backend: m.backend,
          model: m.model,
          conversion: m.conversion,
          config: { ctx: c, kvPreallocated: true, decodeSteps: p.decodeSteps },
          metrics: [
            metric("decode_ms", "ms", warm),
            metric(
              "decode_tok_s",
              "tok/s",
              warm.map((ms) => 1000 / ms),
            ),
            metric("load_ms", "ms", [opened.loadMs]),
          ],
          notes: ["KV cache allocated for the whole context at load, as the ANE chain's is"],
        });
      } finally {
        await opened.model.dispose();
      }
    }
    return { runs, skipped, notes: backendNotes(runs) };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const ctxOf = (r: Run) => Number(r.config.ctx);
    return [
      {
        kind: "line",
        name: "ms-per-superblock",
        title: "ms per super-block vs context (ANE chain, fully fused)",
        rows: lineRows(runs, "ms_per_superblock", ctxOf),
        x: "x",
        xTitle: "context length (tokens)",
        xType: "ordinal",
        y: "median",
        yTitle: "ms per super-block",
        color: "backend",
        lo: "p10",
        hi: "p90",
      },
      {
        kind: "line",
        name: "tok-s",
        title: "Decode tok/s vs context",
        rows: lineRows(runs, "decode_tok_s", ctxOf),
        x: "x",
        xTitle: "context length (tokens)",
        xType: "ordinal",
        y: "median",
        yTitle: "tok/s",
        color: "backend",
        lo: "p10",
        hi: "p90",
      },
    ];
  },
};
