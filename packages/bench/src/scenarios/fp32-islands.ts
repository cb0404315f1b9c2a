/**
 * fp32-islands: the reference study's mixed precision by op selection (coremltools' op_selector:
 * chosen ops stay fp32 inside an fp16 program), ruled out because no selection kept the ANE while
 * recovering precision. Both sides of that trade, per selection:
 *
 *  - precision: the chain's fp16 program on the reference interpreter with the selected ops' results
 *    kept fp32, against the same program in fp32 throughout (teacher-forced on the fp32 run's
 *    greedy tokens): logit error, cosine and top-1 agreement per step;
 *  - placement: costplan's placement with the selected ops moved off the ANE (the ANE computes in
 *    fp16 only, costplan's rule "fp32-compute"): ops off the ANE, graph interruptions and the
 *    estimated ms per token.
 */

import { applyTiming, costplan } from "@anemll-qwen35/costplan";
import type { StepModel } from "@anemll-qwen35/generate";
import { ChainRunner, referenceBackend } from "@anemll-qwen35/runtime-ane";
import type { ChartSpec } from "../charts.js";
import { promptFor, sideRun } from "../measure.js";
import { barChart, barRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import { aneSide } from "../sides.js";
import { metric } from "../stats.js";
import { greedy } from "../steps.js";

type Selector = (op: { readonly type: string; readonly name: string }) => boolean;

/** The selections tried, by op name as the converter names ops (l<i>_gdn_…, l<i>_attn_…, …_norm…). */
export const ISLANDS: readonly { readonly name: string; readonly select: Selector }[] = [
  { name: "none (all fp16)", select: () => false },
  { name: "norms", select: (op) => /norm/.test(op.name) },
  { name: "GDN decay (softplus, exp)", select: (op) => /_gdn_(a_dt|softplus|g$|decay$)/.test(op.name) },
  { name: "GDN state update", select: (op) => /_gdn_(S_decay|Sk|kv|v_kv|delta|k_delta|Sq|o)$/.test(op.name) },
  { name: "attention", select: (op) => /_attn_/.test(op.name) },
  { name: "all (fp32 throughout)", select: () => true },
];

/** The study's finding (Mac mini M4 Pro): fp32 compute kept ops on the CPU; pinning selected ops failed or gave NaNs. */
export const STUDY_FP32_ISLANDS = "no op selection kept the ANE while recovering precision";

function logitsOf(out: Awaited<ReturnType<StepModel["decode"]>>): Float32Array {
  if ("logits" in out) return out.logits;
  throw new Error("fp32-islands needs a logits head (convert without --argmax)");
}

/** prompt, then one decode per forced token; the logits of every step. */
async function logitsAlong(model: StepModel, prompt: readonly number[], forced: readonly number[]) {
  await model.reset();
  const all = [logitsOf(await model.prefill(prompt.slice()))];
  for (const t of forced) all.push(logitsOf(await model.decode(t)));
  return all;
}

function compare(a: Float32Array, ref: Float32Array): { maxAbs: number; cosine: number; top1: boolean } {
  let maxAbs = 0;
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    maxAbs = Math.max(maxAbs, Math.abs(a[i] - ref[i]));
    dot += a[i] * ref[i];
    na += a[i] * a[i];
    nb += ref[i] * ref[i];
  }
  return {
    maxAbs,
    cosine: dot / Math.sqrt(na * nb || 1),
    top1: greedy({ logits: a }) === greedy({ logits: ref }),
  };
}

export const fp32Islands: Scenario = {
  name: "fp32-islands",
  question:
    "Keeping selected ops in fp32 inside the fp16 chain (op_selector mixed precision): how much precision does each selection recover, and what does it cost in ANE placement?",
  async run(ctx, p) {
    const side = await aneSide(ctx, p.model);
    const dir = side.dir;
    const prompt = promptFor(side, p.promptTokens);
    const steps = p.decodeSteps;
    ctx.log("fp32-islands: the same program in fp32 throughout (the reference)");
    const ref = await ChainRunner.load(dir, { backend: referenceBackend({ precision: "fp32" }) });
    let refLogits: Float32Array[];
    let forced: number[];
    try {
      await ref.reset();
      const first = logitsOf(await ref.prefill(prompt.slice()));
      refLogits = [first];
      forced = [greedy({ logits: first })];
      for (let i = 0; i < steps; i++) {
        const l = logitsOf(await ref.decode(forced[forced.length - 1]));
        refLogits.push(l);
        forced.push(greedy({ logits: l }));
      }
      forced = forced.slice(0, steps);
    } finally {
      ref.dispose();
    }
    const plan = await costplan(dir, { native: "off" });
    const runs: Run[] = [];
    for (const island of ISLANDS) {
      ctx.signal?.throwIfAborted();
      ctx.log(`fp32-islands: ${island.name}`);
      const model = await ChainRunner.load(dir, {
        backend: referenceBackend({ precision: "fp16", keepFp32: island.select }),
      });
      let got: Float32Array[];
      try {
        got = await logitsAlong(model, prompt, forced);
      } finally {
        model.dispose();
      }
      const cmp = got.map((l, i) => compare(l, refLogits[i]));
      // placement: the selected runtime ops leave the ANE (fp32 compute), then everything is re-timed
      const moved = structuredClone(plan);
      let offAne = 0;
      for (const pkg of moved.packages) {
        for (const f of pkg.functions) {
          for (const op of f.ops) {
            if (op.device !== "ANE" || !island.select(op)) continue;
            op.device = "CPU";
            op.rule = "fp32-compute";
            op.reason = "kept in fp32 (an fp32 island); the ANE computes in fp16 only";
            offAne++;
          }
        }
      }
      const timed = applyTiming(moved);
      const ms = timed.chain?.estimatedMsPerToken ?? timed.totals.estimatedMs;
      const perStep = (name: string, unit: string, of: (c: (typeof cmp)[number]) => number) =>
        metric(name, unit, cmp.map(of), "per step, against fp32 throughout");
      const top1 = cmp.filter((c) => c.top1).length / cmp.length;
      runs.push(
        sideRun(side, island.name, {
          config: { islands: island.name, steps: cmp.length },
          metrics: [
            perStep("max_abs_logit_error", "logit", (c) => c.maxAbs),
            perStep("logit_cosine", "cosine", (c) => c.cosine),
            metric("top1_agreement", "fraction", [top1], "greedy token equal to fp32's"),
            metric("ops_off_ane", "ops", [offAne], "runtime ops costplan moves off the ANE (fp32 compute)"),
            metric("interruptions", "count", [timed.totals.interruptions], "graph interruptions (costplan)"),
            metric(
              "estimated_ms_per_token",
              "ms",
              [ms],
              "costplan estimate on its chip, with the islands on the CPU",
            ),
          ],
        }),
      );
    }
    return {
      runs,
      skipped: [],
      notes: [
        `reference study (Mac mini M4 Pro): ${STUDY_FP32_ISLANDS}; global fp32 compute kept ops on the CPU`,
        "precision measured on the reference interpreter (fp16 rounding of every result except the island's); placement and time are costplan's static estimate (MLComputePlan is not asked to place a modified program)",
        `estimate on ${plan.chip.name}`,
      ],
    };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    return [
      barChart(
        "error",
        "Largest logit error vs fp32, per fp32-island selection",
        barRows(runs, "max_abs_logit_error"),
        "max |Δ logit| (median over steps)",
        { whiskers: true },
      ),
      barChart(
        "cost",
        "Estimated ms per token with the islands off the ANE (costplan)",
        barRows(runs, "estimated_ms_per_token"),
        "ms per token (estimate)",
      ),
    ];
  },
};
