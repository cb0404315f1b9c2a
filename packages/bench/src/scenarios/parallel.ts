/**
 * parallel: a foreground model on the GPU (MLX) and a background model on the ANE, each in its own
 * child process, first alone and then decoding at the same time. Reports each one's tok/s solo and
 * together, the share of its solo speed the foreground keeps ("foreground preserved"), the combined
 * throughput, and the same for two MLX models together — the baseline the reference study used.
 */
import type { ChartSpec, Row } from "../charts.js";
import { sideRun } from "../measure.js";
import { backendNotes, barChart } from "../report.js";
import type { Scenario, ScenarioContext } from "../scenario.js";
import type { Metric, Run, Skip } from "../schema.js";
import { aneSide, isSkip, mlxSide, type Side } from "../sides.js";
import { metric } from "../stats.js";
import { promptIds } from "../steps.js";
import { BenchWorker, type WorkerDone } from "../worker-pool.js";
import type { WorkerJob } from "../worker-protocol.js";

interface Member {
  readonly role: "foreground" | "background";
  readonly side: Side;
  readonly worker: BenchWorker;
}

const PAIR_ANE = "fg MLX + bg ANE";
const PAIR_MLX = "fg MLX + bg MLX";

export function tokPerS(d: WorkerDone): number {
  return d.stepMs.length / (d.wallMs / 1000);
}

/** "fg MLX", "bg ANE", … */
function memberName(m: Member): string {
  return `${m.role === "foreground" ? "fg" : "bg"} ${m.side.backend.startsWith("ane") ? "ANE" : "MLX"}`;
}

/** A run of one worker's timed window: tok/s over the window and each step's ms. */
export function windowRun(
  side: Side,
  id: string,
  config: Run["config"],
  d: WorkerDone,
  extra: Metric[] = [],
): Run {
  return sideRun(side, id, {
    config: { ...config, durationMs: Math.round(d.wallMs), resets: d.resets },
    metrics: [
      metric("decode_tok_s", "tok/s", [tokPerS(d)], "decode steps / wall seconds of the window"),
      metric("step_ms", "ms", d.stepMs, "each decode step in the window"),
      ...extra,
    ],
    notes: [`${d.stepMs.length} decode steps in ${(d.wallMs / 1000).toFixed(2)} s`],
  });
}

/** What the foreground and the background keep of their solo speeds together, and their sum. */
export function sharedMetrics(
  fgSolo: WorkerDone,
  fg: WorkerDone,
  bgSolo: WorkerDone,
  bg: WorkerDone,
): Metric[] {
  const pct = (a: WorkerDone, b: WorkerDone) => (100 * tokPerS(a)) / tokPerS(b);
  return [
    metric("foreground_preserved_pct", "%", [pct(fg, fgSolo)], "foreground tok/s together / solo"),
    metric("background_preserved_pct", "%", [pct(bg, bgSolo)], "background tok/s together / solo"),
    metric("combined_tok_s", "tok/s", [tokPerS(fg) + tokPerS(bg)], "foreground + background together"),
  ];
}

/** Bar rows of the foreground's kept share, labelled by `label`. */
export function preservedRows(runs: readonly Run[], label: (r: Run) => string): Row[] {
  return runs.flatMap((r) => {
    const m = r.metrics.find((x) => x.name === "foreground_preserved_pct");
    return m ? [{ run: label(r), median: m.summary.median }] : [];
  });
}

function runOf(m: Member, pairing: string, d: WorkerDone, extra: Metric[] = []): Run {
  const mode = pairing === "solo" ? "solo" : `in ${pairing}`;
  const member = memberName(m);
  return windowRun(
    m.side,
    `${member} ${m.side.backend} · ${mode}`,
    { role: m.role, member, pairing, mode },
    d,
    extra,
  );
}

export async function jobFor(ctx: ScenarioContext, side: Side, label: string): Promise<WorkerJob> {
  const prompt = promptIds(ctx.params.promptTokens, side.model.vocabSize ?? 1024);
  if (side.backend.startsWith("ane")) {
    return { label, kind: "ane", dir: side.dir, ane: ctx.ane, prompt };
  }
  const c = side.conversion;
  return {
    label,
    kind: "mlx",
    dir: side.dir,
    mlx: {
      bits: c.bits as 4 | 8 | undefined,
      dtype: c.dtype === "float32" || c.dtype === "bfloat16" ? c.dtype : undefined,
      contextLength: c.ctx,
    },
    prompt,
  };
}

export const parallel: Scenario = {
  name: "parallel",
  question:
    "When a background model decodes on the ANE while a foreground model decodes on the GPU, how much of its solo speed does the foreground keep, compared with two GPU models?",
  async run(ctx, p) {
    const durationMs = p.parallelSeconds * 1000;
    const skipped: Skip[] = [];
    const fgSide = await mlxSide(ctx, p.model);
    const bgMlxSide = await mlxSide(ctx, p.model);
    const bgAneSide = await aneSide(ctx, p.model);
    if (isSkip(fgSide) || isSkip(bgMlxSide)) {
      const reason = isSkip(fgSide) ? fgSide.reason : (bgMlxSide as Skip).reason;
      skipped.push({ what: "parallel (needs an MLX foreground)", reason });
      return { runs: [], skipped, notes: ["the parallel study needs the GPU side; nothing ran"] };
    }
    const runs: Run[] = [];
    const notes: string[] = [];
    const start = async (role: Member["role"], side: Side, label: string): Promise<Member> => ({
      role,
      side,
      worker: await BenchWorker.start(await jobFor(ctx, side, label)),
    });
    ctx.log("parallel: starting workers (foreground MLX, background ANE, background MLX)");
    // loaded side by side (loading is not what is measured); each child warms up before "ready"
    const starting = [
      start("foreground", fgSide, "foreground mlx"),
      start("background", bgAneSide, "background ane"),
      start("background", bgMlxSide, "background mlx"),
    ];
    try {
      const [fg, bgAne, bgMlx] = await Promise.all(starting);

      ctx.log("parallel: solo runs");
      const fgSolo = await fg.worker.run(durationMs);
      const aneSolo = await bgAne.worker.run(durationMs);
      const mlxSolo = await bgMlx.worker.run(durationMs);
      ctx.log("parallel: foreground MLX + background ANE together");
      const [fgA, aneT] = await Promise.all([fg.worker.run(durationMs), bgAne.worker.run(durationMs)]);
      ctx.log("parallel: foreground MLX + background MLX together");
      const [fgM, mlxT] = await Promise.all([fg.worker.run(durationMs), bgMlx.worker.run(durationMs)]);

      const pct = (a: WorkerDone, b: WorkerDone) => (100 * tokPerS(a)) / tokPerS(b);
      runs.push(
        runOf(fg, "solo", fgSolo),
        runOf(bgAne, "solo", aneSolo),
        runOf(bgMlx, "solo", mlxSolo),
        runOf(fg, PAIR_ANE, fgA, sharedMetrics(fgSolo, fgA, aneSolo, aneT)),
        runOf(bgAne, PAIR_ANE, aneT),
        runOf(fg, PAIR_MLX, fgM, sharedMetrics(fgSolo, fgM, mlxSolo, mlxT)),
        runOf(bgMlx, PAIR_MLX, mlxT),
      );
      notes.push(
        `foreground preserved: ${pct(fgA, fgSolo).toFixed(1)}% with an ANE background vs ${pct(fgM, fgSolo).toFixed(1)}% with an MLX background`,
        `combined: ${(tokPerS(fgA) + tokPerS(aneT)).toFixed(2)} tok/s (MLX + ANE) vs ${(tokPerS(fgM) + tokPerS(mlxT)).toFixed(2)} tok/s (MLX + MLX)`,
      );
      if (bgAneSide.backend === "ane-reference") {
        notes.push(
          "here the 'ANE' is the reference interpreter on the same CPU cores as MLX's CPU backend, so this measures CPU contention, not the ANE's independence from the GPU",
        );
      }
    } finally {
      // every child that started is closed, also when another failed to start
      const started = await Promise.allSettled(starting);
      await Promise.all(started.map((s) => (s.status === "fulfilled" ? s.value.worker.close() : undefined)));
    }
    return { runs, skipped, notes: [...notes, ...backendNotes(runs)] };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const rows: Row[] = runs.map((r) => ({
      pairing: String(r.config.pairing),
      member: String(r.config.member),
      median: r.metrics[0].summary.median,
    }));
    return [
      barChart("tok-s", "Decode tok/s, solo and together", rows, "tok/s", { x: "pairing", color: "member" }),
      barChart(
        "preserved",
        "Foreground tok/s kept (% of solo)",
        preservedRows(runs, (r) => String(r.config.pairing)),
        "% of solo",
      ),
    ];
  },
};
