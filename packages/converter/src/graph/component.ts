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
import { MilBuilder, type MlModel } from "@anemll-qwen35/ir/mil";
import { buildEmbed } from "./embed.js";
import { UnsupportedModelError } from "./errors.js";
import type { ComponentIO } from "./io.js";
import { checkAneLimits } from "./limits.js";
import { buildLmHead } from "./lm-head.js";
import { type BuildOptions, type ComponentSpec, resolveOptions } from "./options.js";
import { formatWeightQuant } from "./quant.js";
import { buildSuperblocks } from "./superblock.js";
import { GraphWeights, type WeightSource } from "./weights.js";

export interface BuiltComponent {
  readonly model: MlModel;
  readonly io: ComponentIO;
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
  const o = resolveOptions(source.config, spec, options);
  const b = builder ?? new MilBuilder({ blobSink: options.blobSink });
  const w = new GraphWeights(b, source, {
    dtype: o.dtype,
    quant: o.quant,
    onWeight: options.onWeight,
    signal: options.signal,
    workers: options.workers,
    pool: options.pool,
    store: options.store,
  });
  let io: ComponentIO;
  if (spec.kind === "embed") io = await buildEmbed(w, o);
  else if (spec.kind === "superblocks") io = await buildSuperblocks(w, spec.first, spec.count, o);
  else io = await buildLmHead(w, o);
  checkAneLimits(b.function(), describe(spec), (name) => w.tensorOf(name));
  const rules = o.quant.rules.map((r) => `${r.pattern}=${formatWeightQuant(r.quant)}`);
  const userDefined: Record<string, string> = {
    "com.anemll.component": io.component,
    "com.anemll.dtype": io.dtype,
    "com.anemll.ctx": String(io.ctx),
    "com.anemll.kv": io.state,
    "com.anemll.quant": rules.join(",") || "none",
  };
  if (spec.kind === "superblocks") userDefined["com.anemll.attention"] = o.attention;
  if (io.layers.length) userDefined["com.anemll.layers"] = io.layers.join(",");
  const model = b.model({
    metadata: { shortDescription: `Qwen3.5 ${describe(spec)} (anemll-qwen35)`, userDefined },
  });
  return { model, io };
}

function describe(spec: ComponentSpec): string {
  if (spec.kind === "superblocks") {
    const last = spec.first + spec.count - 1;
    return spec.count === 1 ? `super-block ${spec.first}` : `super-blocks ${spec.first}..${last}`;
  }
  return spec.kind;
}
