/**
 * The auto-tuned lm_head split (`lmHeadMaxRows: "auto"`): how many vocabulary pieces the lm_head
 * is cut into, chosen by a sweep rather than fixed at 16 as ANEMLL does. Each candidate is the
 * real lm_head graph (buildLmHead, same encoding, same shapes) over zero weights — what a split
 * costs depends on the shapes and the stored bytes, not on the values, and zero weights make the
 * k-means trivial. Where Core ML can time predictions (macOS with the addon), each candidate is
 * written as a package and timed; elsewhere costplan's estimate ranks them. Splits that put ops
 * off the ANE are recorded but not chosen while another keeps the ANE. The choice and every
 * candidate's time go into model.json (`lmHeadSplit`).
 *
 * Memory: one zero table of the lm_head's size (vocab × hidden, 16-bit) and one candidate's
 * encoded weights at a time — about what converting the lm_head itself needs.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Tensor, tensor } from "@anemll-qwen35/core";
import { costplan, nativeAvailability } from "@anemll-qwen35/costplan";
import type { LmHeadSplit } from "@anemll-qwen35/ir/chain";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { writeMlPackage } from "@anemll-qwen35/ir/mil";
import { buildComponent } from "./graph/component.js";
import { planPieces } from "./graph/io.js";
import type { WeightSource } from "./graph/weights.js";
import { type BuildOptions, DEFAULT_LM_HEAD_MAX_ROWS } from "./options.js";
import { asQuantPlan, pieceUnit } from "./quant/plan.js";

export type { LmHeadSplit } from "@anemll-qwen35/ir/chain";

export interface TuneLmHeadOptions {
  /** The lm_head build options of the conversion (ctx, dtype, quant, argmax …). */
  readonly build: Omit<BuildOptions, "lmHeadMaxRows" | "blobSink" | "onWeight" | "store">;
  /** "auto" (default): time through Core ML where it can, else estimate; "estimate": costplan only. */
  readonly method?: "auto" | "estimate";
  readonly log?: (line: string) => void;
  readonly signal?: AbortSignal;
}

/**
 * The candidate row limits: the fewest pieces the ANE's ~16384 per-dimension limit allows (k),
 * half that (over the limit, to show what it costs) and 1.5k, 2k, 4k; as row limits, deduplicated
 * by the number of pieces they give.
 */
export function lmHeadCandidates(vocab: number, unit: number): number[] {
  const kMin = Math.ceil(vocab / DEFAULT_LM_HEAD_MAX_ROWS);
  const ks = [Math.ceil(kMin / 2), kMin, Math.ceil(kMin * 1.5), kMin * 2, kMin * 4].filter(
    (k) => k >= 1 && k <= vocab,
  );
  const byPieces = new Map<number, number>();
  for (const k of ks) {
    const rows = Math.max(unit, Math.ceil(vocab / k / unit) * unit);
    const n = planPieces(vocab, rows, unit).length;
    if (!byPieces.has(n)) byPieces.set(n, rows);
  }
  return [...byPieces.values()];
}

/** A weight source with the model's lm_head and final-norm shapes and zero values. */
function zeroSource(config: Qwen35Config, tied: boolean): WeightSource {
  let head: Tensor | undefined;
  return {
    config,
    tiedEmbeddings: tied,
    async get(canonical: string) {
      if (canonical === "norm") return tensor("f32", [config.hiddenSize]);
      if (canonical === "lm_head" || canonical === "embed") {
        head ??= tensor("bf16", [config.vocabSize, config.hiddenSize]);
        return head;
      }
      throw new Error(`the lm_head probe reads no tensor "${canonical}"`);
    },
  };
}

type Candidate = LmHeadSplit["candidates"][number];

/**
 * The fastest candidate that keeps every op on the ANE (ties within 1 %: the fewer pieces). A
 * split that leaves ops off the ANE is timed for the record but chosen only when none keeps the
 * lm_head whole on the ANE: a CPU fallback can look faster on paper.
 */
export function chooseLmHeadSplit(candidates: readonly Candidate[]): Candidate {
  const onAne = candidates.filter((c) => c.offAne === 0);
  const eligible = onAne.length ? onAne : candidates;
  const best = Math.min(...eligible.map((c) => c.ms));
  return eligible.filter((c) => c.ms <= best * 1.01).sort((a, b) => a.pieces - b.pieces || a.ms - b.ms)[0];
}

/**
 * Sweeps the candidates and returns the fastest that keeps every op on the ANE (ties within 1 %:
 * the fewer pieces).
 */
export async function tuneLmHeadSplit(
  config: Qwen35Config,
  tied: boolean,
  o: TuneLmHeadOptions,
): Promise<LmHeadSplit> {
  const log = o.log ?? (() => {});
  const plan = asQuantPlan(config, o.build.quant);
  const source = zeroSource(config, tied);
  // pieces are cut in whole LUT groups, as buildLmHead cuts them
  const unit = pieceUnit(plan.tensor("lm_head").encoding);
  const native = o.method === "estimate" ? { available: false } : nativeAvailability();
  const method = native.available ? "coreml-measured" : "costplan-estimate";
  const dir = native.available ? await mkdtemp(join(tmpdir(), "lmhead-sweep-")) : undefined;
  const candidates: Candidate[] = [];
  try {
    for (const maxRows of lmHeadCandidates(config.vocabSize, unit)) {
      o.signal?.throwIfAborted();
      const built = await buildComponent(
        source,
        { kind: "lm_head" },
        { ...o.build, quant: plan, lmHeadMaxRows: maxRows },
      );
      const pieces = built.io.lmHead?.pieces.length ?? 1;
      let target: string | typeof built.model = built.model;
      if (dir) {
        target = join(dir, `lm_head_${pieces}.mlpackage`);
        await writeMlPackage(target, built.model);
      }
      const report = await costplan(target, {
        native: dir ? "require" : "off",
        measure: dir ? { warmup: 3, runs: 20 } : false,
        signal: o.signal,
      });
      const p = report.packages[0];
      const ms = p.prediction.measuredMs ?? p.prediction.estimatedMs;
      const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
      candidates.push({ maxRows, pieces, ms, offAne: f.summary.cpu + f.summary.gpu });
      log(`lm_head split: ${pieces} pieces of ≤ ${maxRows} rows → ${ms.toFixed(3)} ms (${method})`);
      if (dir) await rm(target as string, { recursive: true, force: true });
    }
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
  const chosen = chooseLmHeadSplit(candidates);
  log(`lm_head split: chose ${chosen.pieces} pieces (≤ ${chosen.maxRows} rows) by ${method}`);
  return { maxRows: chosen.maxRows, pieces: chosen.pieces, chosenBy: method, candidates };
}
