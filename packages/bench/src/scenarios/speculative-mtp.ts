/**
 * speculative --draft mtp: speculative decoding with the model's own multi-token-prediction head
 * on MLX (generate's `speculative: "mtp"`: the head drafts γ tokens, the model verifies them in one
 * call). Measured in one run:
 * - on tiny-trained (its head trained on the frozen trunk; the Book of Ruth held out of training):
 *   acceptance rate and mean accepted drafts per verify call on held-out verses for γ = 1…4,
 *   greedy, each verse a prompt; decode tok/s speculative vs plain for the same tokens (checked
 *   identical), and the speed-up;
 * - at full scale, the cost of one round on the synthetic 0.8B (random weights: its acceptance is
 *   meaningless, its timing is not): plain decode step vs draft(γ) + verify(γ + 1) + accept, and the
 *   tok/s that cost gives at tiny-trained's measured acceptance.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  canSpeculate,
  type GenerationResult,
  generate,
  loadTokenizer,
  type SpeculativeStepModel,
  type StepOutput,
} from "@anemll-qwen35/generate";
import type { ChartSpec, Row } from "../charts.js";
import { nothingRan, promptFor, sideRun, withOpened } from "../measure.js";
import { fixtureModel } from "../models.js";
import { backendNotes, barChart } from "../report.js";
import type { ScaleParams } from "../scale.js";
import type { ScenarioContext, ScenarioOutput } from "../scenario.js";
import type { BenchResult, Metric, Run, Skip } from "../schema.js";
import { isSkip, mlxSide } from "../sides.js";
import { metric } from "../stats.js";
import { greedy } from "../steps.js";

const GAMMAS = [1, 2, 3, 4] as const;

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

export async function mtpSpeculative(ctx: ScenarioContext, p: ScaleParams): Promise<ScenarioOutput> {
  const smoke = p.scale === "smoke";
  const trained = await mlxSide(ctx, fixtureModel("tiny-trained"), {
    bits: null,
    dtype: "float32",
    contextLength: 1024,
  });
  if (isSkip(trained)) return nothingRan(trained.what, trained.reason);
  const skipped: Skip[] = [];
  const runs: Run[] = [];
  const notes: string[] = [];

  // held-out text: the verses of Ruth, each a prompt; greedy continuations of `tokens` tokens
  const tokenizer = await loadTokenizer(trained.dir);
  const verses = readFileSync(join(trained.dir, "heldout.txt"), "utf8").split("\n").filter(Boolean);
  const prompts = verses.slice(0, smoke ? 4 : 32).map((v) => tokenizer.encode(v));
  const tokens = smoke ? 12 : 36;
  ctx.log(`speculative --draft mtp: ${trained.label} · tiny-trained · ${prompts.length} held-out verses`);
  const meanAccepted = new Map<number, number>();
  await withOpened(trained, async ({ model }) => {
    if (!canSpeculate(model)) throw new Error("tiny-trained loaded without its MTP head");
    const metrics: Metric[] = [];
    const run = (prompt: number[], gamma?: number) =>
      generate(model, tokenizer, {
        prompt,
        maxTokens: tokens,
        eosTokenIds: [],
        ...(gamma ? { speculative: "mtp" as const, gamma } : {}),
      });
    await run(prompts[0]); // warm-up
    const plain: GenerationResult[] = [];
    for (const prompt of prompts) plain.push(await run(prompt));
    metrics.push(
      metric(
        "plain_decode_tok_s",
        "tok/s",
        plain.map((r) => r.stats.decodeTokensPerSecond),
        "plain greedy decoding, per verse",
      ),
    );
    for (const g of GAMMAS) {
      ctx.signal?.throwIfAborted();
      const spec: GenerationResult[] = [];
      for (const prompt of prompts) spec.push(await run(prompt, g));
      const s = spec.map((r) => r.stats.speculative!);
      const accepted = s.reduce((n, x) => n + x.acceptedTokens, 0);
      const calls = s.reduce((n, x) => n + x.calls, 0);
      const drafted = s.reduce((n, x) => n + x.draftTokens, 0);
      meanAccepted.set(g, accepted / calls);
      metrics.push(
        metric(
          `acceptance_rate_gamma${g}`,
          "fraction",
          [accepted / drafted],
          `accepted ÷ drafted, all verses, γ = ${g}`,
        ),
        metric(
          `mean_accepted_gamma${g}`,
          "tokens",
          [accepted / calls],
          "accepted drafts per verify call, all verses",
        ),
        metric(`tokens_per_call_gamma${g}`, "tokens", [(accepted + calls) / calls], "1 + accepted per call"),
        metric(
          `decode_tok_s_gamma${g}`,
          "tok/s",
          spec.map((r) => r.stats.decodeTokensPerSecond),
          "speculative decoding, per verse (draft + verify + accept time)",
        ),
        metric(
          `speedup_gamma${g}`,
          "x",
          spec.map((r, i) => plain[i].stats.decodeMs / r.stats.decodeMs),
          "plain ÷ speculative decode time for the same tokens, per verse, same run",
        ),
        metric(
          `same_tokens_gamma${g}`,
          "0/1",
          spec.map((r, i) => Number(r.tokenIds.join() === plain[i].tokenIds.join())),
          "1 where the speculative output equals plain greedy decoding (always, by the rule)",
        ),
      );
    }
    runs.push(
      sideRun(trained, `mtp · ${trained.backend} · tiny-trained`, {
        config: { role: "mtp", draft: "mtp", tokens, prompts: prompts.length, text: "heldout.txt (Ruth)" },
        metrics,
      }),
    );
  });
  const oracle = JSON.parse(readFileSync(join(trained.dir, "golden-mtp.json"), "utf8")) as {
    acceptance: { gamma: Record<string, { acceptance_rate: number; mean_accepted: number }> };
  };
  notes.push(
    `the oracle's acceptance on the same verses (tools/oracle/oracle_mtp.py: a draft from every position of a 36-token greedy continuation, not speculative rounds): ${GAMMAS.map(
      (g) =>
        `γ=${g} ${(100 * oracle.acceptance.gamma[g].acceptance_rate).toFixed(1)} % (${oracle.acceptance.gamma[g].mean_accepted.toFixed(2)} accepted)`,
    ).join(", ")}`,
  );

  if (!smoke) {
    const big = await mlxSide(ctx, p.model);
    if (isSkip(big)) skipped.push(big);
    else {
      ctx.log(`speculative --draft mtp: round cost on ${big.label} · ${big.model.name}`);
      const metrics = await withOpened(big, async ({ model }) => {
        if (!canSpeculate(model)) throw new Error(`${big.model.name} loaded without an MTP head`);
        return roundCost(model, promptFor(big, p.promptTokens), p.decodeSteps, meanAccepted);
      });
      runs.push(
        sideRun(big, `mtp cost · ${big.backend} · ${big.model.name}`, {
          config: { role: "mtp-cost", draft: "mtp", rounds: p.decodeSteps },
          metrics,
        }),
      );
      notes.push(
        `${big.model.name} has random weights: its rounds accept all γ + 1 ids regardless (what the cost of a round is measured with); projected tok/s = (1 + tiny-trained's mean accepted) ÷ round time`,
      );
    }
  }
  return { runs, skipped, notes: [...notes, ...backendNotes(runs)] };
}

/** Plain decode steps vs speculative rounds (draft γ, verify γ + 1, accept γ + 1) on `model`. */
async function roundCost(
  model: SpeculativeStepModel,
  prompt: number[],
  steps: number,
  meanAccepted: ReadonlyMap<number, number>,
): Promise<Metric[]> {
  const argmaxPick = (out: StepOutput) => greedy(out);
  await model.reset();
  let next = greedy(await model.prefill(prompt));
  const decodeMs: number[] = [];
  for (let i = 0; i <= steps; i++) {
    const t = performance.now();
    next = greedy(await model.decode(next));
    if (i > 0) decodeMs.push(performance.now() - t); // the first is a warm-up
  }
  const stepMs = median(decodeMs);
  const metrics: Metric[] = [metric("plain_decode_ms", "ms", decodeMs, "one plain decode step")];
  for (const g of GAMMAS) {
    if (g > model.maxDraftTokens) continue;
    const draftMs: number[] = [];
    const verifyMs: number[] = [];
    const roundMs: number[] = [];
    for (let i = 0; i <= Math.max(2, Math.ceil(steps / 2)); i++) {
      const t0 = performance.now();
      const { ids } = await model.draft(next, g, argmaxPick);
      const t1 = performance.now();
      const rows = await model.verify([next, ...ids]);
      const t2 = performance.now();
      await model.accept(g + 1);
      const t3 = performance.now();
      next = greedy(rows[g]);
      if (i === 0) continue; // warm-up
      draftMs.push(t1 - t0);
      verifyMs.push(t2 - t1);
      roundMs.push(t3 - t0);
    }
    const m = meanAccepted.get(g) ?? 0;
    metrics.push(
      metric(`draft_ms_gamma${g}`, "ms", draftMs, `γ head steps`),
      metric(`verify_ms_gamma${g}`, "ms", verifyMs, `one forward over ${g + 1} ids`),
      metric(`round_ms_gamma${g}`, "ms", roundMs, "draft + verify + accept"),
      metric(
        `projected_tok_s_gamma${g}`,
        "tok/s",
        [(1 + m) / (median(roundMs) / 1000)],
        `at tiny-trained's measured ${m.toFixed(2)} accepted per call`,
      ),
      metric(
        `projected_speedup_gamma${g}`,
        "x",
        [((1 + m) * stepMs) / median(roundMs)],
        "projected tok/s ÷ plain decode tok/s",
      ),
    );
  }
  return metrics;
}

/** Charts of the MTP runs: acceptance and measured speed-up by γ. */
export function mtpCharts(result: BenchResult): ChartSpec[] {
  const acceptance: Row[] = [];
  const speed: Row[] = [];
  for (const r of result.runs.filter((x) => x.config.role === "mtp")) {
    for (const m of r.metrics) {
      const a = /^acceptance_rate_gamma(\d+)$/.exec(m.name);
      if (a) acceptance.push({ run: `γ=${a[1]}`, median: m.summary.median });
      const s = /^speedup_gamma(\d+)$/.exec(m.name);
      if (s) speed.push({ run: `γ=${s[1]}`, median: m.summary.median });
    }
  }
  if (acceptance.length === 0) return [];
  return [
    barChart(
      "mtp-acceptance",
      "MTP head: acceptance on held-out text (tiny-trained)",
      acceptance,
      "acceptance rate",
    ),
    barChart(
      "mtp-speedup",
      "MTP speculative vs plain decode (tiny-trained, same run)",
      speed,
      "× plain speed",
    ),
  ];
}
