/**
 * pairing: the combination the reference study aims at — a large MLX mixture-of-experts model in
 * the foreground (35B-A3B on the GPU) and the small dense chain on the ANE in the background —
 * with the foreground's weights as 4-bit, 8-bit or bf16. Each model runs in its own child process
 * (as in `parallel`); per variant: the foreground alone, then both together. Reports the share of
 * its solo speed the foreground keeps and the combined tok/s.
 */
import type { ChartSpec, Row } from "../charts.js";
import { backendNotes, barChart } from "../report.js";
import type { MlxVariant } from "../scale.js";
import type { Scenario } from "../scenario.js";
import type { Metric, Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide, type Side } from "../sides.js";
import { BenchWorker, type WorkerDone } from "../worker-pool.js";
import { jobFor, preservedRows, sharedMetrics, tokPerS, windowRun } from "./parallel.js";

const LOAD: Record<MlxVariant, { bits?: 4 | 8 | null; dtype?: "bfloat16" }> = {
  "4bit": { bits: 4 },
  "8bit": { bits: 8 },
  bf16: { bits: null, dtype: "bfloat16" },
};

function runOf(
  side: Side,
  role: "foreground" | "background",
  variant: string,
  mode: "solo" | "together",
  d: WorkerDone,
  extra: Metric[] = [],
): Run {
  const id = `${role === "foreground" ? "fg MoE" : "bg ANE"} ${variant} · ${mode}`;
  return windowRun(side, id, { role, variant, mode }, d, extra);
}

export const pairing: Scenario = {
  name: "pairing",
  question:
    "With a large MLX mixture-of-experts model in the foreground and the small chain on the ANE in the background, how much of its solo speed does the foreground keep, and what is the combined tok/s, for 4-bit, 8-bit and bf16 foreground weights?",
  async run(ctx, params) {
    const p = params.pairing;
    const durationMs = p.seconds * 1000;
    const skipped: Skip[] = [];
    const runs: Run[] = [];
    const notes: string[] = [];
    const bgSide = await aneSide(ctx, p.background);
    ctx.log("pairing: starting the background ANE worker");
    const bg = await BenchWorker.start(await jobFor(ctx, bgSide, "background ane"));
    try {
      ctx.log("pairing: background alone");
      const bgSolo = await bg.run(durationMs);
      runs.push(runOf(bgSide, "background", "-", "solo", bgSolo));
      for (const variant of p.variants) {
        ctx.signal?.throwIfAborted();
        const fgSide = await mlxSide(ctx, p.foreground, LOAD[variant]);
        if (isSkip(fgSide)) {
          skipped.push({ what: `pairing ${variant} (needs an MLX foreground)`, reason: fgSide.reason });
          continue;
        }
        ctx.log(`pairing: foreground ${p.foreground.name} ${variant}: loading`);
        const fg = await BenchWorker.start(await jobFor(ctx, fgSide, `foreground mlx ${variant}`));
        try {
          ctx.log(`pairing: foreground ${variant} alone, then with the background`);
          const fgSolo = await fg.run(durationMs);
          const [fgT, bgT] = await Promise.all([fg.run(durationMs), bg.run(durationMs)]);
          const kept = (100 * tokPerS(fgT)) / tokPerS(fgSolo);
          const combined = tokPerS(fgT) + tokPerS(bgT);
          runs.push(
            runOf(fgSide, "foreground", variant, "solo", fgSolo),
            runOf(fgSide, "foreground", variant, "together", fgT, sharedMetrics(fgSolo, fgT, bgSolo, bgT)),
            runOf(bgSide, "background", variant, "together", bgT),
          );
          notes.push(
            `${variant}: foreground ${tokPerS(fgSolo).toFixed(2)} tok/s solo, ${tokPerS(fgT).toFixed(2)} together (${kept.toFixed(1)}% kept); combined ${combined.toFixed(2)} tok/s`,
          );
        } finally {
          await fg.close();
        }
      }
    } finally {
      await bg.close();
    }
    if (!runs.some((r) => r.config.role === "foreground")) {
      notes.push("no MLX foreground could run here; only the background's solo speed was measured");
    }
    if (bgSide.backend === "ane-reference") {
      notes.push(
        "here the background 'ANE' is the reference interpreter on the same CPU cores as MLX's CPU backend: the shares measure CPU contention, not the ANE's independence from the GPU",
      );
    }
    return { runs, skipped, notes: [...notes, ...backendNotes(runs)] };
  },
  charts(result): ChartSpec[] {
    const fg = result.runs.filter((r) => r.config.role === "foreground" || r.config.mode === "together");
    const rows: Row[] = fg.map((r) => ({
      variant: String(r.config.variant),
      member: `${r.config.role} ${r.config.mode}`,
      median: r.metrics[0].summary.median,
    }));
    if (rows.length === 0) return [];
    const title = "MoE foreground and ANE background, tok/s per foreground variant";
    return [
      barChart("tok-s", title, rows, "tok/s", { x: "variant", color: "member" }),
      barChart(
        "preserved",
        "Foreground tok/s kept beside the ANE background (% of solo)",
        preservedRows(result.runs, (r) => String(r.config.variant)),
        "% of solo",
      ),
    ];
  },
};
