/**
 * split: experiment B of the reference study — one model split across runtimes, the first N
 * layers on MLX and the rest on the ANE chain, the hidden state handed over per token — with N
 * swept over every super-block boundary (N = 0: the chain alone; N = L: MLX alone). Per N: decode
 * tok/s, each step's time on either side, and the greedy tokens' agreement with each runtime
 * alone (every run is fed the chain's own tokens, so positions compare one to one).
 */

import { aneBackend } from "../backends.js";
import type { ChartSpec } from "../charts.js";
import { nothingRan, tokSMetric, withOpened } from "../measure.js";
import { conversionOf, ensureChain, modelInfo } from "../models.js";
import { backendNotes, lineChart, lineRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import { aneSide, isSkip, mlxSide } from "../sides.js";
import { SplitModel } from "../split-model.js";
import { metric } from "../stats.js";
import { promptIds, runSteps, type StepTimings } from "../steps.js";

/** The reference study's experiment B (9B on a Mac mini M4 Pro). */
export const STUDY_SPLIT = { tokPerS: 18.75, overAnePct: 65, pureAneTokPerS: 11.39 };

function agreement(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let same = 0;
  for (let i = 0; i < n; i++) if (a[i] === b[i]) same++;
  return n ? same / n : 0;
}

export const split: Scenario = {
  name: "split",
  question:
    "With the first N layers of one model on MLX and the rest on the ANE chain, the hidden state handed over per token, how fast does it decode for each N, against either runtime alone?",
  async run(ctx, p) {
    const s = p.split;
    const spec = p.model;
    const ane = await aneSide(ctx, spec, { fuse: 1, body: s.body, lmHead: s.lmHead });
    const mlx = await mlxSide(ctx, spec, { bits: s.mlx.bits ?? null, dtype: s.mlx.dtype });
    if (isSkip(mlx)) {
      return nothingRan("split (needs MLX for the first layers)", mlx.reason, [
        "experiment B needs both runtimes; nothing ran",
      ]);
    }
    const info = await modelInfo(spec);
    const L = info.layers ?? 0;
    const prompt = promptIds(p.promptTokens, info.vocabSize ?? 1024);
    const steps = p.warmupSteps + p.decodeSteps;
    const runs: Run[] = [];
    // the chain alone first: its greedy tokens are what every other run is fed
    ctx.log(`split: N = 0 (${ane.label} alone)`);
    const reference = await withOpened(ane, (o) => runSteps(o.model, prompt, { decodeSteps: steps }));
    const forced = reference.tokens.slice(0, steps);
    ctx.log(`split: N = ${L} (${mlx.label} alone)`);
    const mlxAlone = await withOpened(mlx, (o) => runSteps(o.model, prompt, { decodeSteps: steps, forced }));
    const chain = await ensureChain(spec, { ctx: p.ctx, fuse: 1, body: s.body, lmHead: s.lmHead }, ctx.log);
    const results: { n: number; t: StepTimings; mlxMs: number[]; aneMs: number[] }[] = [
      { n: 0, t: reference, mlxMs: [], aneMs: reference.decodeMs },
    ];
    for (let n = 4; n < L; n += 4) {
      ctx.signal?.throwIfAborted();
      ctx.log(`split: N = ${n} (layers 0-${n - 1} on MLX, ${n}-${L - 1} on the chain)`);
      const model = await SplitModel.open({
        checkpoint: mlx.dir,
        chainDir: chain.dir,
        manifest: chain.manifest,
        layers: n,
        backend: aneBackend(ctx.ane).backend,
        mlx: { bits: s.mlx.bits, dtype: s.mlx.dtype },
      });
      const mlxMs: number[] = [];
      const aneMs: number[] = [];
      try {
        const t = await runSteps(model, prompt, {
          decodeSteps: steps,
          forced,
          afterStep: (i) => {
            if (i < 0) return;
            mlxMs.push(model.lastMs.mlx);
            aneMs.push(model.lastMs.ane);
          },
        });
        results.push({ n, t, mlxMs, aneMs });
      } finally {
        await model.dispose();
      }
    }
    results.push({ n: L, t: mlxAlone, mlxMs: mlxAlone.decodeMs, aneMs: [] });

    const warm = (xs: readonly number[]) => xs.slice(p.warmupSteps);
    const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
    const aneTokS = 1000 / median(warm(reference.decodeMs));
    for (const r of results) {
      const decodeMs = warm(r.t.decodeMs);
      const tokS = 1000 / median(decodeMs);
      const where = r.n === 0 ? "chain alone" : r.n === L ? "MLX alone" : "split";
      runs.push({
        id: `N=${r.n} · ${where}`,
        backend: r.n === L ? mlx.backend : ane.backend,
        model: info,
        conversion: r.n === L ? mlx.conversion : conversionOf(chain.manifest, ane.conversion.precision),
        config: {
          mlxLayers: r.n,
          aneLayers: L - r.n,
          where,
          mlxBackend: mlx.backend,
          aneBackend: ane.backend,
        },
        metrics: [
          tokSMetric(decodeMs),
          metric("decode_ms", "ms", decodeMs, "each warm decode step"),
          ...(r.mlxMs.length
            ? [metric("mlx_ms", "ms", warm(r.mlxMs), "the MLX layers of each warm step")]
            : []),
          ...(r.aneMs.length
            ? [metric("ane_ms", "ms", warm(r.aneMs), "the chain's packages of each warm step")]
            : []),
          metric(
            "vs_chain_pct",
            "%",
            [(100 * tokS) / aneTokS - 100],
            "median tok/s against the chain alone, same run",
          ),
          metric(
            "agreement_with_chain",
            "fraction",
            [agreement(r.t.tokens, reference.tokens)],
            "greedy tokens equal to the chain's",
          ),
          metric(
            "agreement_with_mlx",
            "fraction",
            [agreement(r.t.tokens, mlxAlone.tokens)],
            "greedy tokens equal to MLX's",
          ),
        ],
        notes: [],
      });
    }
    const best = runs.reduce((a, b) => (a.metrics[0].summary.median >= b.metrics[0].summary.median ? a : b));
    return {
      runs,
      skipped: [],
      notes: [
        `fastest here: ${best.id} at ${best.metrics[0].summary.median.toFixed(2)} tok/s (chain alone ${aneTokS.toFixed(2)} tok/s)`,
        `reference study, 9B on a Mac mini M4 Pro: ${STUDY_SPLIT.tokPerS} tok/s split, +${STUDY_SPLIT.overAnePct}% over pure ANE (${STUDY_SPLIT.pureAneTokPerS} tok/s)`,
        "every run after the chain alone is fed the chain's greedy tokens (teacher forcing), so agreement compares the same positions",
        ...backendNotes(runs),
      ],
    };
  },
  charts(result): ChartSpec[] {
    const rows = lineRows(result.runs, "decode_tok_s", (r) => Number(r.config.mlxLayers));
    const title = "Decode tok/s with the first N layers on MLX, the rest on the ANE chain";
    return [
      lineChart("tok-s", title, rows, {
        xTitle: "layers on MLX (N)",
        xType: "quantitative",
        yTitle: "tok/s",
      }),
    ];
  },
};
