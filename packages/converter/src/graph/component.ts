/**
 * buildComponent: one package of the ANE decode chain as an ML Program, plus the description of
 * its inputs, outputs and states that a chain runner binds by role.
 *
 *   await using ck = await Qwen35Checkpoint.open(dir);
 *   const w = await MlPackageWriter.create("out/sb_00_01.mlpackage");
 *   const { model, io } = await buildComponent(ck, { kind: "superblocks", first: 0, count: 2 },
 *     { ctx: 1024, quant: { rules: DEFAULT_QUANT_RULES }, blobSink: w.blobs });
 *   await w.finish(model);   // io goes to model.json
 *
 * Weights are read one tensor at a time and streamed to `blobSink` when given (without one, every
 * constant stays in memory — fine for small models and for running the result directly in the ir
 * interpreter). A caller-supplied `builder` (e.g. one function of a MilProgramBuilder) is used
 * instead of a fresh one; its own blob sink, if any, then applies. Every conv/matmul of the result
 * is checked against the ANE's size limits (limits.ts; AneLimitError names the tensor).
 */
import type { ComponentIO, PrefillFunction } from "@anemll-qwen35/ir/chain";
import { MilBuilder, MilProgramBuilder, type MilVar, type MlModel } from "@anemll-qwen35/ir/mil";
import { UnsupportedModelError } from "../errors.js";
import { type BuildOptions, type ComponentSpec, resolveBuildOptions } from "../options.js";
import { formatWeightQuant } from "../quant/policy.js";
import { buildEmbed } from "./embed.js";
import { checkAneLimits } from "./limits.js";
import { buildLmHead, buildLmHeadRows } from "./lm-head.js";
import { buildMtp } from "./mtp.js";
import { buildSuperblocks } from "./superblock.js";
import { GraphWeights, type WeightSource } from "./weights.js";

export interface BuiltComponent {
  readonly model: MlModel;
  /** The default function: "main", or "decode" beside a prefill function. */
  readonly function: string;
  readonly io: ComponentIO;
  /** Super-blocks built with prefillBatch > 0: the prefill function (same weights). */
  readonly prefill?: PrefillFunction;
  /** Super-blocks and lm_head built with verifyTokens > 0: the verify function (same weights). */
  readonly verify?: PrefillFunction;
}

/** Function names of a super-block package with a prefill function. */
export const DECODE_FUNCTION = "decode";
export const PREFILL_FUNCTION = "prefill";
/** The verify function of super-block and lm_head packages of a chain with an MTP head. */
export const VERIFY_FUNCTION = "verify";

/** Throws UnsupportedModelError for checkpoints the ANE graphs do not cover (MoE). */
export function assertConvertible(source: Pick<WeightSource, "config">): void {
  const cfg = source.config;
  if (cfg.moe) {
    const where = cfg.source.file ? `${cfg.source.file}: ` : "";
    throw new UnsupportedModelError(
      cfg.modelType,
      `${where}${cfg.modelType} is a mixture-of-experts model (${cfg.moe.numExperts} experts, top-${cfg.moe.numExpertsPerTok}); ` +
        "the ANE converter builds dense Qwen3.5 models only — run MoE checkpoints with @anemll-qwen35/runtime-mlx (GPU/CPU)",
    );
  }
}

/** Builds one component of the decode chain; see the module comment and ComponentIO. */
export async function buildComponent(
  source: WeightSource,
  spec: ComponentSpec,
  options: BuildOptions,
  builder?: MilBuilder,
): Promise<BuiltComponent> {
  assertConvertible(source);
  const o = resolveBuildOptions(source.config, spec, options);
  // a prefill or verify function beside decode (lm_head: verify beside main): one program, its
  // weights made once and adopted by every function
  const verifies = (spec.kind === "superblocks" || spec.kind === "lm_head") && o.verifyTokens > 0;
  const multi = ((spec.kind === "superblocks" && o.prefillBatch > 0) || verifies) && !builder;
  const program = multi ? new MilProgramBuilder({ blobSink: options.blobSink }) : undefined;
  const mainName = spec.kind === "superblocks" ? DECODE_FUNCTION : "main";
  const b = program?.function(mainName) ?? builder ?? new MilBuilder({ blobSink: options.blobSink });
  const shared = program ? new Map<string, MilVar>() : undefined;
  const weightsFor = (fb: MilBuilder) =>
    new GraphWeights(fb, source, {
      dtype: o.dtype,
      quant: o.quant,
      onWeight: options.onWeight,
      signal: options.signal,
      workers: options.workers,
      pool: options.pool,
      store: options.store,
      shared,
    });
  const w = weightsFor(b);
  let io: ComponentIO;
  if (spec.kind === "embed") io = await buildEmbed(w, o);
  else if (spec.kind === "superblocks") io = await buildSuperblocks(w, spec.first, spec.count, o);
  else if (spec.kind === "mtp") io = await buildMtp(w, o);
  else io = await buildLmHead(w, o);
  checkAneLimits(b.function(), describe(spec), (name) => w.tensorOf(name));
  let prefill: PrefillFunction | undefined;
  if (program && spec.kind === "superblocks" && o.prefillBatch > 0) {
    const pb = program.function(PREFILL_FUNCTION);
    const pw = weightsFor(pb);
    const shape = { tokens: o.prefillBatch, gdnForm: o.gdnPrefill, wyChunk: o.wyChunk };
    const pio = await buildSuperblocks(pw, spec.first, spec.count, o, shape);
    checkAneLimits(pb.function(), `${describe(spec)} (prefill)`, (name) => pw.tensorOf(name));
    prefill = { function: PREFILL_FUNCTION, tokens: o.prefillBatch, io: pio };
  }
  let verify: PrefillFunction | undefined;
  if (program && verifies) {
    const vb = program.function(VERIFY_FUNCTION);
    const vw = weightsFor(vb);
    const T = o.verifyTokens + 1;
    const shape = { tokens: T, gdnForm: "scan" as const, wyChunk: o.wyChunk, verify: true };
    const vio =
      spec.kind === "superblocks"
        ? await buildSuperblocks(vw, spec.first, spec.count, o, shape)
        : await buildLmHeadRows(vw, o, T);
    checkAneLimits(vb.function(), `${describe(spec)} (verify)`, (name) => vw.tensorOf(name));
    verify = { function: VERIFY_FUNCTION, tokens: T, io: vio };
  }
  const rules = o.quant.policy.rules.map((r) => `${r.pattern}=${formatWeightQuant(r.quant)}`);
  const userDefined: Record<string, string> = {
    "com.anemll.component": io.component,
    "com.anemll.dtype": io.dtype,
    "com.anemll.ctx": String(io.ctx),
    "com.anemll.kv": io.state,
    "com.anemll.quant": rules.join(",") || "none",
  };
  if (spec.kind === "superblocks") userDefined["com.anemll.attention"] = o.attention;
  if (prefill) {
    userDefined["com.anemll.prefill"] = String(prefill.tokens);
    userDefined["com.anemll.gdn_prefill"] = o.gdnPrefill;
  }
  if (verify) userDefined["com.anemll.verify"] = String(verify.tokens);
  if (io.layers.length) userDefined["com.anemll.layers"] = io.layers.join(",");
  const metadata = { shortDescription: `Qwen3.5 ${describe(spec)} (anemll-qwen35)`, userDefined };
  if (program) {
    const model = program.model({ metadata, defaultFunctionName: mainName });
    return { model, function: mainName, io, prefill, verify };
  }
  return { model: b.model({ metadata }), function: b.functionName, io };
}

function describe(spec: ComponentSpec): string {
  if (spec.kind === "superblocks") {
    const last = spec.first + spec.count - 1;
    return spec.count === 1 ? `super-block ${spec.first}` : `super-blocks ${spec.first}..${last}`;
  }
  return spec.kind;
}
