/**
 * The two sides every model scenario compares, prepared the same way: "ane" (the scale's model
 * converted to a chain, on Core ML or the reference interpreter) and "mlx" (the same checkpoint on
 * MLX). Each side knows how to open itself and what to record about its conversion; a side that
 * cannot run here says why instead of opening.
 */

import { join } from "node:path";
import type { StepModel } from "@anemll-qwen35/generate";
import type { ChainManifest } from "@anemll-qwen35/ir/chain";
import { readQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { aneBackendHere, mlxBackendHere, mlxStatus, type Opened, openAne, openMlx } from "./backends.js";
import { type ChainOptions, conversionOf, ensureChain, type ModelSpec, modelInfo } from "./models.js";
import type { ScenarioContext } from "./scenario.js";
import type { BackendId, Conversion, ModelInfo, Skip } from "./schema.js";
import type { ComponentTimer } from "./timed-backend.js";

export interface Side {
  readonly label: string;
  readonly backend: BackendId;
  readonly model: ModelInfo;
  readonly conversion: Conversion;
  /** ANE: the chain folder; MLX: the checkpoint folder. */
  readonly dir: string;
  /** Seconds spent converting now (ANE side, cache miss only). */
  readonly convertSeconds?: number;
  /** ANE side: the chain's model.json (components and the super-blocks each holds). */
  readonly manifest?: ChainManifest;
  open(timer?: ComponentTimer): Promise<Opened<StepModel>>;
}

export async function aneSide(
  ctx: ScenarioContext,
  spec: ModelSpec,
  chain: Partial<ChainOptions> = {},
): Promise<Side> {
  const p = ctx.params;
  const o: ChainOptions = {
    ctx: chain.ctx ?? p.ctx,
    fuse: chain.fuse ?? "all",
    body: chain.body ?? p.body,
    lmHead: chain.lmHead ?? p.lmHead,
  };
  const prepared = await ensureChain(spec, o, ctx.log);
  const which = aneBackendHere(ctx.ane);
  const precision = which === "reference" ? "fp16" : undefined;
  return {
    label: which === "coreml" ? "ANE (Core ML)" : "ANE stand-in (reference interpreter)",
    backend: which === "coreml" ? "ane-coreml" : "ane-reference",
    model: await modelInfo(spec),
    conversion: conversionOf(prepared.manifest, precision),
    dir: prepared.dir,
    convertSeconds: prepared.convertSeconds,
    manifest: prepared.manifest,
    open: (timer) => openAne(prepared.dir, { backend: ctx.ane, timer }),
  };
}

/** The MLX side, or a Skip saying why it cannot run here. */
export async function mlxSide(
  ctx: ScenarioContext,
  spec: ModelSpec,
  o: {
    /** Load-time quantization; null: none; undefined: the scale's. */
    bits?: 4 | 8 | null;
    dtype?: "float32" | "bfloat16";
    contextLength?: number;
    preallocate?: boolean;
  } = {},
): Promise<Side | Skip> {
  const what = `mlx ${spec.name}`;
  if (ctx.noMlx) return { what, reason: "the MLX side was turned off (--no-mlx)" };
  const status = mlxStatus();
  if (!status.available) return { what, reason: `the mlx backend is unavailable: ${status.reason}` };
  const bits = o.bits === null ? undefined : (o.bits ?? ctx.params.mlx.bits);
  const dtype = o.dtype ?? ctx.params.mlx.dtype;
  const checkpoint = await spec.checkpoint(ctx.log);
  const contextLength = o.contextLength ?? ctx.params.ctx;
  const backend = mlxBackendHere();
  return {
    label: backend === "mlx-gpu" ? "MLX (GPU)" : "MLX CPU stand-in for the GPU",
    backend,
    model: await modelInfo(spec),
    // loadMlxModel's default dtype is the checkpoint's (bfloat16 for published configs)
    conversion: { bits, dtype: dtype ?? (await checkpointDtype(checkpoint)), ctx: contextLength },
    dir: checkpoint,
    open: () => openMlx(checkpoint, { bits, dtype, contextLength, preallocate: o.preallocate }),
  };
}

async function checkpointDtype(dir: string): Promise<string> {
  const config = await readQwen35Config(join(dir, "config.json"));
  return config.dtype ?? "float32";
}

export function isSkip(x: Side | Skip): x is Skip {
  return "reason" in x;
}

/** The scale's model on the ANE backend and on MLX (or MLX's skip reason). */
export async function sidesFor(ctx: ScenarioContext): Promise<{ sides: Side[]; skipped: Skip[] }> {
  const p = ctx.params;
  const sides: Side[] = [await aneSide(ctx, p.model)];
  const skipped: Skip[] = [];
  const m = await mlxSide(ctx, p.model);
  if (isSkip(m)) skipped.push(m);
  else sides.push(m);
  return { sides, skipped };
}
