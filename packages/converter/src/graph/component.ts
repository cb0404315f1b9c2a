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
import {
  type ChainFunction,
  type ChainManifestComponent,
  type ComponentIO,
  DECODE_FAMILY,
  PREFILL_FAMILY,
  type PrefillFunction,
  VERIFY_FAMILY,
} from "@anemll-qwen35/ir/chain";
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

/**
 * One built package: its program, and the functions model.json records for it (the default one,
 * prefill, the per-bucket table, verify — see ir/chain's ChainManifestComponent).
 */
export interface BuiltComponent
  extends Pick<ChainManifestComponent, "function" | "io" | "prefill" | "functions" | "verify"> {
  readonly model: MlModel;
}

/** Function names of a super-block package with a prefill function (one bucket). */
export const DECODE_FUNCTION = "decode";
export const PREFILL_FUNCTION = "prefill";
/** A family's function at a bucket: "decode" with one bucket, "decode_1024" with several. */
export function bucketFunctionName(family: string, ctx: number, buckets: readonly number[]): string {
  return buckets.length > 1 ? `${family}_${ctx}` : family;
}

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
  // a prefill or verify function or more buckets beside decode (lm_head: verify beside main): one
  // program, its weights made once and adopted by every function
  const sb = spec.kind === "superblocks";
  const verifies = (sb || spec.kind === "lm_head") && o.verifyTokens > 0;
  const multi = ((sb && (o.prefillBatch > 0 || o.buckets.length > 1)) || verifies) && !builder;
  const program = multi ? new MilProgramBuilder({ blobSink: options.blobSink }) : undefined;
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
  // the verify function: k + 1 rows scored in one call (super-blocks: one per bucket, built after
  // the decode and prefill functions)
  const buildVerify = async (ctx = o.ctx): Promise<PrefillFunction | undefined> => {
    if (!program || !verifies) return undefined;
    const name = sb ? bucketFunctionName(VERIFY_FAMILY, ctx, o.buckets) : VERIFY_FAMILY;
    const vb = program.function(name);
    const vw = weightsFor(vb);
    const T = o.verifyTokens + 1;
    const shape = { tokens: T, gdnForm: "scan" as const, wyChunk: o.wyChunk, verify: true };
    const vio =
      spec.kind === "superblocks"
        ? await buildSuperblocks(vw, spec.first, spec.count, { ...o, ctx }, shape)
        : await buildLmHeadRows(vw, o, T);
    checkAneLimits(vb.function(), `${describe(spec)} (${name})`, (n) => vw.tensorOf(n));
    return { function: name, tokens: T, io: vio };
  };
  if (program && spec.kind === "superblocks") {
    // every bucket, largest first (its decode function is the package's default), decode then prefill
    const functions: ChainFunction[] = [];
    for (const ctx of [...o.buckets].reverse()) {
      const bo = { ...o, ctx };
      const families = [{ family: DECODE_FAMILY, tokens: 1 }];
      if (o.prefillBatch > 0) families.push({ family: PREFILL_FAMILY, tokens: o.prefillBatch });
      for (const { family, tokens } of families) {
        const name = bucketFunctionName(family, ctx, o.buckets);
        const fb = program.function(name);
        const fw = weightsFor(fb);
        const shape =
          family === PREFILL_FAMILY ? { tokens, gdnForm: o.gdnPrefill, wyChunk: o.wyChunk } : undefined;
        const fio = await buildSuperblocks(fw, spec.first, spec.count, bo, shape);
        checkAneLimits(fb.function(), `${describe(spec)} (${name})`, (n) => fw.tensorOf(n));
        functions.push({ family, ctx, function: name, tokens, io: fio });
      }
    }
    let verify: PrefillFunction | undefined;
    for (const ctx of [...o.buckets].reverse()) {
      const v = await buildVerify(ctx);
      if (v) functions.push({ family: VERIFY_FAMILY, ctx, ...v });
      if (ctx === o.ctx) verify = v; // model.json's `verify`: the largest bucket's
    }
    functions.sort((a, b) => a.ctx - b.ctx);
    const top = functions.filter((f) => f.ctx === o.ctx);
    const decode = top.find((f) => f.family === DECODE_FAMILY) as ChainFunction;
    const pf = top.find((f) => f.family === PREFILL_FAMILY);
    const prefill = pf && { function: pf.function, tokens: pf.tokens, io: pf.io };
    const model = program.model({
      metadata: metadataOf(spec, o, decode.io, prefill, verify),
      defaultFunctionName: decode.function,
    });
    return { model, function: decode.function, io: decode.io, prefill, functions, verify };
  }
  const b = program?.function("main") ?? builder ?? new MilBuilder({ blobSink: options.blobSink });
  const w = weightsFor(b);
  let io: ComponentIO;
  if (spec.kind === "embed") io = await buildEmbed(w, o);
  else if (spec.kind === "superblocks") io = await buildSuperblocks(w, spec.first, spec.count, o);
  else if (spec.kind === "mtp") io = await buildMtp(w, o);
  else io = await buildLmHead(w, o);
  checkAneLimits(b.function(), describe(spec), (name) => w.tensorOf(name));
  if (program) {
    const verify = await buildVerify();
    const metadata = metadataOf(spec, o, io, undefined, verify);
    return { model: program.model({ metadata, defaultFunctionName: "main" }), function: "main", io, verify };
  }
  return { model: b.model({ metadata: metadataOf(spec, o, io) }), function: b.functionName, io };
}

/** The package's Core ML metadata: what it is and the options that shaped it. */
function metadataOf(
  spec: ComponentSpec,
  o: ReturnType<typeof resolveBuildOptions>,
  io: ComponentIO,
  prefill?: PrefillFunction,
  verify?: PrefillFunction,
) {
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
  if (o.buckets.length > 1) userDefined["com.anemll.buckets"] = o.buckets.join(",");
  return { shortDescription: `Qwen3.5 ${describe(spec)} (anemll-qwen35)`, userDefined };
}

function describe(spec: ComponentSpec): string {
  if (spec.kind === "superblocks") {
    const last = spec.first + spec.count - 1;
    return spec.count === 1 ? `super-block ${spec.first}` : `super-blocks ${spec.first}..${last}`;
  }
  return spec.kind;
}
