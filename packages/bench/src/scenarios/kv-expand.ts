/**
 * kv-expand: the reference study's ruled-out pre-expanded KV cache — each op got faster (+25%)
 * but the whole run slower (−33%). Both levels here, on MLX:
 *
 *  - per op: one attention layer of the model's shape writing one token's K/V and attending, with
 *    the cache grown to the current position (concatenate, attend over `pos` rows) or pre-expanded
 *    to the context (slice update in place, attend over all `ctx` rows under a mask — the ANE
 *    chain's static form), timed at a few positions;
 *  - end to end: the model's decode with its KV cache grown in 256-position steps (mlx-lm's
 *    policy) or allocated for the whole context at first use (`kvCache.preallocate`).
 */

import { join } from "node:path";
import { readQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { mx } from "@anemll-qwen35/runtime-mlx";
import type { ChartSpec } from "../charts.js";
import { nothingRan, promptFor, sideRun, tokSMetric, warmDecode, withOpened } from "../measure.js";
import { backendNotes, barChart, barRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import { isSkip, mlxSide } from "../sides.js";
import { metric, summarize } from "../stats.js";

/** The reference study's figures (Mac mini M4 Pro). */
export const STUDY_KV_EXPAND = { perOpPct: 25, endToEndPct: -33 };

interface Shape {
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
}

/** ms of one cache write + attention at `pos`, grown or pre-expanded to `ctx` (median of `reps`). */
function attentionOpMs(s: Shape, pos: number, ctx: number, expanded: boolean, reps: number): number[] {
  const dtype = "float32";
  const q = mx.keep(mx.randomNormal([1, s.heads, 1, s.headDim], { dtype }));
  const kNew = mx.keep(mx.randomNormal([1, s.kvHeads, 1, s.headDim], { dtype }));
  const rows = expanded ? ctx : pos;
  const k = mx.keep(mx.randomNormal([1, s.kvHeads, rows, s.headDim], { dtype }));
  const v = mx.keep(mx.randomNormal([1, s.kvHeads, rows, s.headDim], { dtype }));
  // additive mask: rows ≤ pos visible (the one just written included), the rest masked
  const maskValues = new Float32Array(ctx).fill(-1e9);
  maskValues.fill(0, 0, pos + 1);
  const mask = mx.keep(mx.array(maskValues, [1, 1, 1, ctx]));
  mx.evaluate(q, kNew, k, v, mask);
  const scale = 1 / Math.sqrt(s.headDim);
  const times: number[] = [];
  try {
    for (let r = 0; r < reps + 1; r++) {
      const t = performance.now();
      const out = mx.tidy(() => {
        if (expanded) {
          const k2 = mx.sliceUpdate(k, kNew, [0, 0, pos, 0], [1, s.kvHeads, pos + 1, s.headDim]);
          const v2 = mx.sliceUpdate(v, kNew, [0, 0, pos, 0], [1, s.kvHeads, pos + 1, s.headDim]);
          return mx.scaledDotProductAttention(q, k2, v2, { scale, mask });
        }
        const k2 = mx.concatenate([k, kNew], 2);
        const v2 = mx.concatenate([v, kNew], 2);
        return mx.scaledDotProductAttention(q, k2, v2, { scale });
      });
      mx.evaluate(out);
      out.dispose();
      if (r > 0) times.push(performance.now() - t); // the first is a warm-up
    }
  } finally {
    mx.dispose([q, kNew, k, v, mask]);
  }
  return times;
}

export const kvExpand: Scenario = {
  name: "kv-expand",
  question:
    "A KV cache pre-expanded to the context (fixed shapes, masked) against one grown as tokens arrive: what does it change per attention op, and per decoded token?",
  async run(ctx, p) {
    const grown = await mlxSide(ctx, p.model, { contextLength: p.ctx, preallocate: false });
    const expanded = await mlxSide(ctx, p.model, { contextLength: p.ctx, preallocate: true });
    if (isSkip(grown)) return nothingRan("kv-expand (MLX)", grown.reason);
    if (isSkip(expanded)) return nothingRan("kv-expand (MLX)", expanded.reason);
    const cfg = await readQwen35Config(join(grown.dir, "config.json"));
    const shape: Shape = {
      heads: cfg.numAttentionHeads,
      kvHeads: cfg.numKeyValueHeads,
      headDim: cfg.headDim,
    };
    const runs: Run[] = [];
    const reps = Math.max(20, p.decodeSteps);
    const positions = [Math.floor(p.ctx / 8), Math.floor(p.ctx / 2), p.ctx - 1];
    ctx.log(
      `kv-expand: one attention op (${shape.heads}/${shape.kvHeads} heads × ${shape.headDim}) at positions ${positions.join(", ")}`,
    );
    const perOp: Record<string, number[]> = { grown: [], expanded: [] };
    for (const pos of positions) {
      for (const kind of ["grown", "expanded"] as const) {
        const ms = attentionOpMs(shape, pos, p.ctx, kind === "expanded", reps);
        perOp[kind].push(summarize(ms).median);
        runs.push(
          sideRun(grown, `op · ${kind} · pos ${pos}`, {
            config: { level: "op", cache: kind, position: pos, ctx: p.ctx },
            metrics: [metric("op_ms", "ms", ms, "one layer's K/V write + attention, evaluated")],
          }),
        );
      }
    }
    const prompt = promptFor(grown, p.promptTokens);
    // ABBA order, so that neither policy gets the first (cold) open to itself
    const sides = { grown, expanded };
    const samples: Record<"grown" | "expanded", { stepMs: number[]; prefillMs: number[] }> = {
      grown: { stepMs: [], prefillMs: [] },
      expanded: { stepMs: [], prefillMs: [] },
    };
    for (const kind of ["grown", "expanded", "expanded", "grown"] as const) {
      ctx.signal?.throwIfAborted();
      ctx.log(`kv-expand: decode with the cache ${kind}`);
      const t = await withOpened(sides[kind], (opened) => warmDecode(opened.model, prompt, p));
      samples[kind].stepMs.push(...t.warm);
      samples[kind].prefillMs.push(t.prefillMs);
    }
    const e2e: Record<string, number> = {};
    for (const kind of ["grown", "expanded"] as const) {
      const tokS = tokSMetric(samples[kind].stepMs, "1000 / ms of each warm decode step (two opens, ABBA)");
      e2e[kind] = tokS.summary.median;
      runs.push(
        sideRun(sides[kind], `decode · ${kind}`, {
          config: { level: "end-to-end", cache: kind, ctx: p.ctx, opens: 2 },
          metrics: [
            tokS,
            metric(
              "prefill_ms",
              "ms",
              samples[kind].prefillMs,
              "the prompt after each open (first use allocates the cache)",
            ),
          ],
        }),
      );
    }
    const ratio = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x / b[i], 0) / a.length;
    const opPct = 100 * (ratio(perOp.grown, perOp.expanded) - 1);
    const e2ePct = 100 * (e2e.expanded / e2e.grown - 1);
    return {
      runs,
      skipped: [],
      notes: [
        `per op: pre-expanded ${opPct >= 0 ? "+" : ""}${opPct.toFixed(1)}% speed against grown (mean over positions); end to end: ${e2ePct >= 0 ? "+" : ""}${e2ePct.toFixed(1)}% tok/s`,
        `reference study (Mac mini M4 Pro): +${STUDY_KV_EXPAND.perOpPct}% per op, ${STUDY_KV_EXPAND.endToEndPct}% end to end`,
        ...backendNotes(runs),
      ],
    };
  },
  charts(result): ChartSpec[] {
    const ops = result.runs.filter((r) => r.config.level === "op");
    const opRows = barRows(ops, "op_ms", (r) => ({ cache: String(r.config.cache) }));
    return [
      barChart("op-ms", "One attention op (K/V write + attend): grown vs pre-expanded cache", opRows, "ms", {
        color: "cache",
        whiskers: true,
      }),
      barChart(
        "tok-s",
        "Decode tok/s: grown vs pre-expanded KV cache",
        barRows(result.runs, "decode_tok_s"),
        "tok/s",
        {
          whiskers: true,
        },
      ),
    ];
  },
};
