/**
 * From a checkpoint view (mlx-lm layout) to the weights the model runs with: dtype cast (A_log stays
 * fp32), optional affine quantization at load (as mlx-lm's quantize_model: every nn.Linear-like
 * projection, the embedding and the head whose input width is a multiple of the group size; MoE router
 * and shared-expert gate at 8 bits), and projections that read the same input concatenated into one
 * matmul (q|k|v, GDN qkv|z|b|a, gate|up). Built and evaluated one layer at a time, so memory holds the
 * finished layers plus one layer in flight.
 */

import { shapeToString } from "@anemll-qwen35/core";
import { type Qwen35Config, WeightError } from "@anemll-qwen35/ir/checkpoint";
import { MlxModelLoadError } from "../errors.js";
import * as mx from "../mlx.js";
import type { Dtype, MxArray } from "../native.js";
import type { AttentionWeights } from "./attention.js";
import type { FiniteCheck, MlxView } from "./checkpoint.js";
import type { GdnWeights } from "./gdn.js";
import { dense, type FusedLinear, type Weight, weightArrays } from "./linear.js";
import type { MlpWeights } from "./mlp.js";
import type { LayerWeights, MtpWeights, Qwen35Weights } from "./model.js";
import type { MoeWeights } from "./moe.js";
import { isQuantizable, mtpParamSpecs, type ParamSpec, paramSpecs } from "./params.js";

export interface QuantizeOptions {
  /** 4 or 8 (the MoE router and shared-expert gate always get 8, as in mlx-lm). */
  readonly bits: 4 | 8;
  /** Elements per scale/bias group (default 64). */
  readonly groupSize: number;
}

export interface PrepareOptions {
  /** Activation and weight dtype. */
  readonly dtype: Dtype;
  /** Quantize float weights at load. */
  readonly quantize?: QuantizeOptions;
  /** Build the multi-token-prediction head when the view has one (default false). */
  readonly mtp?: boolean;
}

const FLOATS: readonly Dtype[] = ["float32", "bfloat16", "float16"];
const BITS = [2, 3, 4, 5, 6, 8];

/** Quantization found in the checkpoint for a module: bits and group size from the stored shapes. */
function storedQuantization(
  spec: ParamSpec,
  wq: MxArray,
  scales: MxArray,
): { bits: number; groupSize: number } {
  const inDim = spec.shape[spec.shape.length - 1];
  const packed = wq.shape[wq.ndim - 1];
  const groups = scales.shape[scales.ndim - 1];
  return { bits: (packed * 32) / inDim, groupSize: inDim / groups };
}

/**
 * Checks an MLX-format checkpoint against the config: every parameter present with its shape (or a
 * consistent quantized triple) and a float dtype. Throws one WeightError listing every problem.
 */
export function validateMlx(cfg: Qwen35Config, view: MlxView, file: string): void {
  const problems: WeightError[] = [];
  // Messages name tensors as the files store them (language_model.model.…).
  const problem = (name: string, expected: string, actual: string | undefined, message: string) => {
    const tensor = view.storedName(name);
    problems.push(
      new WeightError({
        file,
        tensor,
        expected,
        actual,
        message: message.replaceAll(`"${name}"`, `"${tensor}"`),
      }),
    );
  };
  const info = (name: string) => {
    const a = view.get(name);
    if (!a) return undefined;
    const r = { shape: a.shape, dtype: a.dtype };
    a.dispose();
    return r;
  };
  const checkFloat = (name: string, shape: readonly number[] | undefined) => {
    const got = info(name);
    if (!got) {
      problem(
        name,
        shape ? shapeToString(shape) : "present",
        undefined,
        `missing tensor "${name}"${shape ? ` (expected shape ${shapeToString(shape)})` : ""}`,
      );
      return;
    }
    if (shape && (got.shape.length !== shape.length || got.shape.some((d, k) => d !== shape[k]))) {
      problem(
        name,
        shapeToString(shape),
        shapeToString(got.shape),
        `tensor "${name}" has shape ${shapeToString(got.shape)}, expected ${shapeToString(shape)} from the config`,
      );
    }
    if (!FLOATS.includes(got.dtype)) {
      problem(
        name,
        FLOATS.join(" | "),
        got.dtype,
        `tensor "${name}" is ${got.dtype}, expected one of ${FLOATS.join(", ")}`,
      );
    }
  };
  for (const spec of paramSpecs(cfg, view.tied)) {
    if (!isQuantizable(spec.kind)) {
      checkFloat(spec.name, spec.shape);
      continue;
    }
    const w = `${spec.name}.weight`;
    if (!view.has(`${spec.name}.scales`)) {
      checkFloat(w, spec.shape);
      continue;
    }
    const wq = info(w);
    const scales = info(`${spec.name}.scales`);
    checkFloat(`${spec.name}.biases`, scales?.shape);
    if (!wq) {
      problem(w, "uint32", undefined, `missing tensor "${w}" (its .scales are present)`);
      continue;
    }
    if (wq.dtype !== "uint32") {
      problem(
        w,
        "uint32",
        wq.dtype,
        `tensor "${w}" is ${wq.dtype}, expected uint32 (packed quantized weights, since "${spec.name}.scales" exists)`,
      );
      continue;
    }
    const a = view.get(w)!;
    const s = view.get(`${spec.name}.scales`)!;
    const { bits, groupSize } = storedQuantization(spec, a, s);
    a.dispose();
    s.dispose();
    const lead = spec.shape.slice(0, -1);
    const sameLead = (shape: readonly number[]) =>
      shape.length === spec.shape.length && lead.every((d, k) => d === shape[k]);
    if (
      !BITS.includes(bits) ||
      !Number.isInteger(groupSize) ||
      !sameLead(wq.shape) ||
      !scales ||
      !sameLead(scales.shape)
    ) {
      problem(
        w,
        `${shapeToString([...lead, (spec.shape[spec.shape.length - 1] * 4) / 32])} (4-bit) with scales ${shapeToString([...lead, spec.shape[spec.shape.length - 1] / 64])} (group 64)`,
        `${shapeToString(wq.shape)} with scales ${scales ? shapeToString(scales.shape) : "missing"}`,
        `quantized tensor "${w}" ${shapeToString(wq.shape)} with scales ${scales ? shapeToString(scales.shape) : "missing"} does not fit the config's ${shapeToString(spec.shape)} (inferred ${bits} bits, group ${groupSize})`,
      );
    }
    if (scales && !FLOATS.includes(scales.dtype)) {
      problem(
        `${spec.name}.scales`,
        FLOATS.join(" | "),
        scales.dtype,
        `tensor "${spec.name}.scales" is ${scales.dtype}; only affine quantization (float scales) is supported`,
      );
    }
  }
  if (problems.length > 0) {
    const lines = problems.slice(0, 20).map((p) => p.detail);
    const more = problems.length > 20 ? `\n  ... and ${problems.length - 20} more` : "";
    throw new WeightError({
      file,
      tensor: problems[0].tensor,
      expected: problems[0].expected,
      actual: problems[0].actual,
      message: `${problems.length} weight problem(s):\n  - ${lines.join("\n  - ")}${more}`,
      problems,
    });
  }
}

/** True when the checkpoint stores quantized weights. */
export function isPrequantized(cfg: Qwen35Config, view: MlxView): boolean {
  return paramSpecs(cfg, view.tied).some((s) => isQuantizable(s.kind) && view.has(`${s.name}.scales`));
}

function required(view: MlxView, name: string): MxArray {
  const a = view.get(name);
  if (!a) throw new WeightError({ tensor: name, message: `missing tensor "${name}"` });
  return a;
}

/** One parameter, cast and (when asked) quantized; lazy. */
export function readParam(view: MlxView, spec: ParamSpec, opts: PrepareOptions): Weight | MxArray {
  if (!isQuantizable(spec.kind)) {
    return mx.astype(required(view, spec.name), spec.float32 ? "float32" : opts.dtype);
  }
  if (view.has(`${spec.name}.scales`)) {
    const weight = required(view, `${spec.name}.weight`);
    const scales = required(view, `${spec.name}.scales`);
    const { bits, groupSize } = storedQuantization(spec, weight, scales);
    return {
      kind: "quantized",
      weight,
      scales: mx.astype(scales, opts.dtype),
      biases: mx.astype(required(view, `${spec.name}.biases`), opts.dtype),
      bits,
      groupSize,
    };
  }
  const w = mx.astype(required(view, `${spec.name}.weight`), opts.dtype);
  const q = opts.quantize;
  if (q && spec.shape[spec.shape.length - 1] % q.groupSize === 0) {
    const bits = spec.bits ?? q.bits;
    const { wq, scales, biases } = mx.quantize(w, { bits, groupSize: q.groupSize });
    return { kind: "quantized", weight: wq, scales, biases: biases!, bits, groupSize: q.groupSize };
  }
  return dense(w);
}

const asWeight = (p: Weight | MxArray): Weight => {
  if ("kind" in p && (p.kind === "dense" || p.kind === "quantized")) return p as Weight;
  throw new TypeError("expected a projection weight");
};
const asArray = (p: Weight | MxArray): MxArray => {
  if ("kind" in p) throw new TypeError("expected a plain tensor");
  return p as MxArray;
};

const compatible = (a: Weight, b: Weight): boolean =>
  a.kind === b.kind &&
  (a.kind === "dense" || (a.bits === (b as typeof a).bits && a.groupSize === (b as typeof a).groupSize)) &&
  a.weight.dtype === b.weight.dtype;

/** Concatenates weights along the output axis (axis -2), grouping consecutive compatible ones. */
export function fuse(parts: Weight[]): FusedLinear {
  const groups: { weight: Weight; sizes: number[] }[] = [];
  let run: Weight[] = [];
  const flush = () => {
    if (run.length === 0) return;
    const sizes = run.map((w) => w.weight.shape[w.weight.ndim - 2]);
    const axis = run[0].weight.ndim - 2;
    const cat = (arrays: MxArray[]) => (arrays.length === 1 ? arrays[0] : mx.concatenate(arrays, axis));
    const first = run[0];
    const weight: Weight =
      first.kind === "dense"
        ? dense(cat(run.map((w) => w.weight)))
        : {
            kind: "quantized",
            weight: cat(run.map((w) => w.weight)),
            scales: cat(run.map((w) => (w as typeof first).scales)),
            biases: cat(run.map((w) => (w as typeof first).biases)),
            bits: first.bits,
            groupSize: first.groupSize,
          };
    groups.push({ weight, sizes });
    run = [];
  };
  for (const w of parts) {
    if (run.length > 0 && !compatible(run[0], w)) flush();
    run.push(w);
  }
  flush();
  return { groups };
}

export interface BuildProgress {
  /** Layers finished (the embedding/head count as one more step). */
  readonly done: number;
  readonly total: number;
}

function buildLayer(
  cfg: Qwen35Config,
  view: MlxView,
  specs: ParamSpec[],
  opts: PrepareOptions,
): LayerWeights {
  const byName = new Map(specs.map((s) => [s.name.replace(/^(?:model|mtp)\.layers\.\d+\./, ""), s]));
  const p = (name: string) => readParam(view, byName.get(name)!, opts);
  const w = (name: string) => asWeight(p(name));
  const a = (name: string) => asArray(p(name));
  const layer = specs[0].layer;
  let mixer: LayerWeights["mixer"];
  if (cfg.layerTypes[layer] === "linear_attention") {
    const gdn: GdnWeights = {
      inProj: fuse([
        w("linear_attn.in_proj_qkv"),
        w("linear_attn.in_proj_z"),
        w("linear_attn.in_proj_b"),
        w("linear_attn.in_proj_a"),
      ]),
      conv: a("linear_attn.conv1d.weight"),
      aLog: a("linear_attn.A_log"),
      dtBias: a("linear_attn.dt_bias"),
      norm: a("linear_attn.norm.weight"),
      out: w("linear_attn.out_proj"),
    };
    mixer = { kind: "gdn", w: gdn };
  } else {
    const att: AttentionWeights = {
      qkv: fuse([w("self_attn.q_proj"), w("self_attn.k_proj"), w("self_attn.v_proj")]),
      o: w("self_attn.o_proj"),
      qNorm: a("self_attn.q_norm.weight"),
      kNorm: a("self_attn.k_norm.weight"),
    };
    mixer = { kind: "attention", w: att };
  }
  let ffn: LayerWeights["ffn"];
  if (cfg.moe) {
    const shared: MlpWeights = {
      gateUp: fuse([w("mlp.shared_expert.gate_proj"), w("mlp.shared_expert.up_proj")]),
      down: w("mlp.shared_expert.down_proj"),
    };
    const moe: MoeWeights = {
      router: w("mlp.gate"),
      expertsGateUp: fuse([w("mlp.switch_mlp.gate_proj"), w("mlp.switch_mlp.up_proj")]),
      expertsDown: w("mlp.switch_mlp.down_proj"),
      shared,
      sharedGate: w("mlp.shared_expert_gate"),
    };
    ffn = { kind: "moe", w: moe };
  } else {
    ffn = {
      kind: "mlp",
      w: { gateUp: fuse([w("mlp.gate_proj"), w("mlp.up_proj")]), down: w("mlp.down_proj") },
    };
  }
  return {
    inputNorm: a("input_layernorm.weight"),
    postNorm: a("post_attention_layernorm.weight"),
    mixer,
    ffn,
  };
}

/** A contiguous run of layers: [start, end). */
export interface LayerRange {
  readonly start: number;
  readonly end: number;
}

/**
 * Builds (and evaluates, layer by layer, without blocking the event loop) the model's weights:
 * all of them, or — for the first stage of a pipeline — the embedding, norm and head with the layers
 * [0, layers.end). The view's stored tensors are released as each layer is done.
 */
export async function buildWeights(
  cfg: Qwen35Config,
  view: MlxView,
  opts: PrepareOptions,
  progress?: { onProgress?: (p: BuildProgress) => void; signal?: AbortSignal },
  layers: LayerRange = { start: 0, end: cfg.numHiddenLayers },
): Promise<Qwen35Weights> {
  // The head first: its stored tensors are released before the layers' (whose numbers its names share).
  const whole = layers.start === 0 && layers.end === cfg.numHiddenLayers;
  const mtp = opts.mtp && view.mtp && whole ? await buildMtp(cfg, view, opts) : undefined;
  view.releaseMtp();
  try {
    const parts = await buildParts(cfg, view, opts, progress, layers, true);
    const g = parts.globals!;
    return {
      embed: g.embedding,
      ...(mtp ? { mtp } : {}),
      layers: parts.layers,
      norm: g.norm,
      lmHead: g.lmHead,
      tied: view.tied,
    };
  } catch (error) {
    if (mtp) mx.dispose([...new Set(collect(mtp))]);
    throw error;
  }
}

/** The MTP head's weights (dense models), cast and quantized like the text model's; evaluated. */
async function buildMtp(cfg: Qwen35Config, view: MlxView, opts: PrepareOptions): Promise<MtpWeights> {
  const specs = mtpParamSpecs(cfg);
  const spec = (name: string) => specs.find((s) => s.name === name)!;
  const head = mx.tidy(
    (): MtpWeights => ({
      fc: asWeight(readParam(view, spec("mtp.fc"), opts)),
      preFcEmbedding: asArray(readParam(view, spec("mtp.pre_fc_norm_embedding.weight"), opts)),
      preFcHidden: asArray(readParam(view, spec("mtp.pre_fc_norm_hidden.weight"), opts)),
      layer: buildLayer(
        cfg,
        view,
        specs.filter((s) => s.layer === cfg.numHiddenLayers),
        opts,
      ),
      norm: asArray(readParam(view, spec("mtp.norm.weight"), opts)),
    }),
  );
  const arrays = [...new Set(collect(head))];
  mx.keep(arrays);
  try {
    await evalChecked(arrays, view.mtpFinite());
  } catch (error) {
    mx.dispose(arrays);
    throw error;
  }
  return head;
}

/** The layers [start, end) alone: a later stage of a pipeline (see buildWeights). */
export async function buildLayers(
  cfg: Qwen35Config,
  view: MlxView,
  opts: PrepareOptions,
  layers: LayerRange,
  progress?: { onProgress?: (p: BuildProgress) => void; signal?: AbortSignal },
): Promise<LayerWeights[]> {
  return (await buildParts(cfg, view, opts, progress, layers, false)).layers;
}

async function buildParts(
  cfg: Qwen35Config,
  view: MlxView,
  opts: PrepareOptions,
  progress: { onProgress?: (p: BuildProgress) => void; signal?: AbortSignal } | undefined,
  range: LayerRange,
  withGlobals: boolean,
): Promise<{ globals?: { embedding: Weight; lmHead: Weight; norm: MxArray }; layers: LayerWeights[] }> {
  if (opts.quantize && isPrequantized(cfg, view)) {
    throw new MlxModelLoadError(
      undefined,
      `the checkpoint is already quantized; load it without the \`bits\` option (asked for ${opts.quantize.bits}-bit)`,
    );
  }
  const specs = paramSpecs(cfg, view.tied);
  const total = range.end - range.start + (withGlobals ? 1 : 0);
  const built: MxArray[] = [];
  try {
    let globals: { embedding: Weight; lmHead: Weight; norm: MxArray } | undefined;
    if (withGlobals) {
      globals = mx.tidy(() => {
        const spec = (name: string) => specs.find((s) => s.name === name)!;
        const embedding = asWeight(readParam(view, spec("model.embed_tokens"), opts));
        const lmHead = view.tied ? embedding : asWeight(readParam(view, spec("lm_head"), opts));
        return { embedding, lmHead, norm: asArray(readParam(view, spec("model.norm.weight"), opts)) };
      });
      const globalArrays = [
        ...weightArrays(globals.embedding),
        ...weightArrays(globals.lmHead),
        globals.norm,
      ];
      built.push(...mx.keep(globalArrays));
      await evalChecked(globalArrays, view.finite(-1));
      progress?.onProgress?.({ done: 1, total });
    }
    view.releaseLayer(-1);

    const layers: LayerWeights[] = [];
    for (let i = 0; i < cfg.numHiddenLayers; i++) {
      if (i < range.start || i >= range.end) {
        view.releaseLayer(i); // another rank's
        continue;
      }
      progress?.signal?.throwIfAborted();
      const layer = mx.tidy(() =>
        buildLayer(
          cfg,
          view,
          specs.filter((s) => s.layer === i),
          opts,
        ),
      );
      const arrays = [...new Set(collect(layer))];
      built.push(...mx.keep(arrays));
      const finite = view.finite(i);
      view.releaseLayer(i);
      await evalChecked(arrays, finite);
      layers.push(layer);
      progress?.onProgress?.({ done: layers.length + (withGlobals ? 1 : 0), total });
    }
    return { globals, layers };
  } catch (error) {
    mx.dispose(built);
    throw error;
  }
}

/** Evaluates `arrays` with the NaN/Inf check of the stored tensors they were made from. */
async function evalChecked(arrays: MxArray[], finite: FiniteCheck): Promise<void> {
  try {
    await mx.asyncEval([...arrays, ...finite.arrays]);
  } catch (error) {
    finite.dispose();
    throw error;
  }
  finite.verify();
}

/** Every array inside a layer's weights. */
function collect(value: unknown, out: MxArray[] = []): MxArray[] {
  if (mx.isMxArray(value)) {
    out.push(value);
  } else if (Array.isArray(value)) {
    for (const v of value) collect(v, out);
  } else if (value && typeof value === "object") {
    for (const v of Object.values(value)) collect(v, out);
  }
  return out;
}

/** Every array the model's weights (or a pipeline stage's layers) hold (to dispose them, or count their bytes). */
export function weightsArrays(w: Qwen35Weights | readonly LayerWeights[]): MxArray[] {
  return [...new Set(collect(w))];
}
