/**
 * The canonical weight map: Hugging Face tensor names → short canonical names, and the tensors
 * (with shapes) a Qwen3.5 text model must have, derived from its config.
 *
 * Canonical names:
 *   embed                 ← {prefix}embed_tokens.weight
 *   norm                  ← {prefix}norm.weight
 *   lm_head               ← lm_head.weight
 *   layers.{i}.{rest}     ← {prefix}layers.{i}.{rest}   (rest unchanged, e.g. linear_attn.A_log)
 * where {prefix} is `model.language_model.` (official VL layout) or `model.` (text-only layout).
 * `model.visual.*` (vision tower) and `mtp.*` (multi-token-prediction head) are dropped.
 * Layer tensor names follow HF modeling_qwen3_5.py / modeling_qwen3_5_moe.py.
 */
import { AnemllError, type DType, shapeToString } from "@anemll-qwen35/core";
import { type Qwen35Config, usesTiedEmbeddings } from "./config.js";

/** A missing, mis-shaped or mis-typed tensor (or a list of them, in `problems`). */
export class WeightError extends AnemllError {
  readonly tensor: string | undefined;
  readonly expected: string | undefined;
  readonly actual: string | undefined;
  readonly file: string | undefined;
  readonly problems: readonly WeightError[];
  /** The message without the file prefix. */
  readonly detail: string;
  constructor(
    init: {
      tensor?: string;
      expected?: string;
      actual?: string;
      file?: string;
      message: string;
      problems?: WeightError[];
    },
    options?: { cause?: unknown },
  ) {
    super("E_WEIGHT", init.file ? `${init.file}: ${init.message}` : init.message, options);
    this.tensor = init.tensor;
    this.expected = init.expected;
    this.actual = init.actual;
    this.file = init.file;
    this.problems = init.problems ?? [];
    this.detail = init.message;
  }
}

export const VL_PREFIX = "model.language_model.";
export const TEXT_PREFIX = "model.";

export type NameMapping =
  | { kind: "weight"; canonical: string; layout: "vl" | "text" }
  | { kind: "dropped"; reason: "visual" | "mtp" }
  | { kind: "unknown" };

/** Maps one HF tensor name. */
export function mapHfName(name: string): NameMapping {
  if (name.startsWith("model.visual.")) return { kind: "dropped", reason: "visual" };
  if (name.startsWith("mtp.")) return { kind: "dropped", reason: "mtp" };
  if (name === "lm_head.weight") return { kind: "weight", canonical: "lm_head", layout: "text" };
  let rest: string;
  let layout: "vl" | "text";
  if (name.startsWith(VL_PREFIX)) {
    rest = name.slice(VL_PREFIX.length);
    layout = "vl";
  } else if (name.startsWith(TEXT_PREFIX)) {
    rest = name.slice(TEXT_PREFIX.length);
    layout = "text";
  } else {
    return { kind: "unknown" };
  }
  if (rest === "embed_tokens.weight") return { kind: "weight", canonical: "embed", layout };
  if (rest === "norm.weight") return { kind: "weight", canonical: "norm", layout };
  if (/^layers\.\d+\./.test(rest)) return { kind: "weight", canonical: rest, layout };
  return { kind: "unknown" };
}

/** The HF name of a canonical name in the given layout. */
export function hfName(canonical: string, layout: "vl" | "text"): string {
  if (canonical === "lm_head") return "lm_head.weight";
  const prefix = layout === "vl" ? VL_PREFIX : TEXT_PREFIX;
  if (canonical === "embed") return `${prefix}embed_tokens.weight`;
  if (canonical === "norm") return `${prefix}norm.weight`;
  return `${prefix}${canonical}`;
}

export interface WeightMap {
  /** canonical → HF name */
  readonly toHf: ReadonlyMap<string, string>;
  /** Which prefix the language-model tensors use. */
  readonly layout: "vl" | "text";
  /** HF names dropped (vision tower, MTP). */
  readonly dropped: readonly string[];
  /** HF names that are neither language model nor dropped. */
  readonly unknown: readonly string[];
}

/** Builds the map for a checkpoint's tensor names. */
export function buildWeightMap(names: Iterable<string>, file?: string): WeightMap {
  const toHf = new Map<string, string>();
  const dropped: string[] = [];
  const unknown: string[] = [];
  const layouts = new Set<"vl" | "text">();
  for (const name of names) {
    if (name.startsWith("language_model.model.")) {
      throw new WeightError({
        file,
        tensor: name,
        message: `tensor "${name}" uses MLX's layout (language_model.model.*), whose norms already have +1 baked in; convert from the original Hugging Face checkpoint instead`,
      });
    }
    const m = mapHfName(name);
    if (m.kind === "dropped") dropped.push(name);
    else if (m.kind === "unknown") unknown.push(name);
    else {
      const previous = toHf.get(m.canonical);
      if (previous !== undefined) {
        throw new WeightError({
          file,
          tensor: name,
          message: `tensors "${previous}" and "${name}" both map to "${m.canonical}"`,
        });
      }
      toHf.set(m.canonical, name);
      if (m.canonical !== "lm_head") layouts.add(m.layout);
    }
  }
  if (layouts.size > 1) {
    throw new WeightError({
      file,
      message: `checkpoint mixes "${VL_PREFIX}" and "${TEXT_PREFIX}" prefixes for the language model`,
    });
  }
  const layout = layouts.has("text") ? "text" : "vl";
  return { toHf, layout, dropped, unknown };
}

export interface ExpectedTensor {
  readonly canonical: string;
  readonly shape: readonly number[];
}

export type ExpertLayout = "fused" | "per-expert";

/** Float dtypes a weight may be stored in (official checkpoints: bf16, with f32 A_log and GDN norm). */
export const WEIGHT_DTYPES: readonly DType[] = ["bf16", "f16", "f32"];

/**
 * Every tensor the text model needs, with shapes from the config. `tied` leaves out lm_head;
 * `expertLayout` picks fused 3-D (`experts.gate_up_proj` [E, 2F, D], `experts.down_proj`
 * [E, D, F]) or per-expert 2-D expert tensors, per layer.
 */
export function expectedTensors(
  config: Qwen35Config,
  options: { tied: boolean; expertLayout?: ExpertLayout | ((layer: number) => ExpertLayout) },
): ExpectedTensor[] {
  const D = config.hiddenSize;
  const V = config.vocabSize;
  const out: ExpectedTensor[] = [{ canonical: "embed", shape: [V, D] }];
  const layoutOf =
    typeof options.expertLayout === "function"
      ? options.expertLayout
      : () => (options.expertLayout as ExpertLayout) ?? "fused";
  for (let i = 0; i < config.numHiddenLayers; i++) {
    const p = `layers.${i}.`;
    const add = (name: string, shape: number[]) => out.push({ canonical: p + name, shape });
    add("input_layernorm.weight", [D]);
    add("post_attention_layernorm.weight", [D]);
    if (config.layerTypes[i] === "linear_attention") {
      const Hv = config.linearNumValueHeads;
      add("linear_attn.in_proj_qkv.weight", [config.convDim, D]);
      add("linear_attn.in_proj_z.weight", [config.valueDim, D]);
      add("linear_attn.in_proj_b.weight", [Hv, D]);
      add("linear_attn.in_proj_a.weight", [Hv, D]);
      add("linear_attn.conv1d.weight", [config.convDim, 1, config.linearConvKernelDim]);
      add("linear_attn.dt_bias", [Hv]);
      add("linear_attn.A_log", [Hv]);
      add("linear_attn.norm.weight", [config.linearValueHeadDim]);
      add("linear_attn.out_proj.weight", [D, config.valueDim]);
    } else {
      const hd = config.headDim;
      const H = config.numAttentionHeads;
      const Hkv = config.numKeyValueHeads;
      add("self_attn.q_proj.weight", [2 * H * hd, D]); // per head: [query | gate]
      add("self_attn.k_proj.weight", [Hkv * hd, D]);
      add("self_attn.v_proj.weight", [Hkv * hd, D]);
      add("self_attn.o_proj.weight", [D, H * hd]);
      add("self_attn.q_norm.weight", [hd]);
      add("self_attn.k_norm.weight", [hd]);
    }
    if (config.moe) {
      const { numExperts: E, moeIntermediateSize: F, sharedExpertIntermediateSize: Fs } = config.moe;
      add("mlp.gate.weight", [E, D]);
      if (layoutOf(i) === "fused") {
        add("mlp.experts.gate_up_proj", [E, 2 * F, D]); // gate rows 0..F-1, up rows F..2F-1
        add("mlp.experts.down_proj", [E, D, F]);
      } else {
        for (let e = 0; e < E; e++) {
          add(`mlp.experts.${e}.gate_proj.weight`, [F, D]);
          add(`mlp.experts.${e}.up_proj.weight`, [F, D]);
          add(`mlp.experts.${e}.down_proj.weight`, [D, F]);
        }
      }
      add("mlp.shared_expert.gate_proj.weight", [Fs, D]);
      add("mlp.shared_expert.up_proj.weight", [Fs, D]);
      add("mlp.shared_expert.down_proj.weight", [D, Fs]);
      add("mlp.shared_expert_gate.weight", [1, D]);
    } else {
      const F = config.intermediateSize!;
      add("mlp.gate_proj.weight", [F, D]);
      add("mlp.up_proj.weight", [F, D]);
      add("mlp.down_proj.weight", [D, F]);
    }
  }
  out.push({ canonical: "norm", shape: [D] });
  if (!options.tied) out.push({ canonical: "lm_head", shape: [V, D] });
  return out;
}

/** Per layer: fused if a fused expert tensor is present, per-expert if any per-expert one is. */
export function detectExpertLayout(canonicalNames: Iterable<string>): (layer: number) => ExpertLayout {
  const perExpert = new Set<number>();
  const fused = new Set<number>();
  for (const n of canonicalNames) {
    const m = /^layers\.(\d+)\.mlp\.experts\.(\d+\.|gate_up_proj$|down_proj$)/.exec(n);
    if (!m) continue;
    (m[2].endsWith(".") ? perExpert : fused).add(Number(m[1]));
  }
  return (layer) => (perExpert.has(layer) && !fused.has(layer) ? "per-expert" : "fused");
}

/** Minimal view of a tensor listing, satisfied by SafetensorsCheckpoint and SafetensorsFile. */
export interface TensorListing {
  names(): string[];
  info(name: string): { dtype: DType; shape: readonly number[]; file?: string };
}

export interface WeightReport {
  readonly ok: boolean;
  /** One WeightError per problem (missing, wrong shape, wrong dtype). */
  readonly problems: readonly WeightError[];
  readonly missing: readonly string[];
  readonly misshaped: readonly string[];
  readonly wrongDtype: readonly string[];
  /** Language-model-looking tensors the config does not account for (HF would ignore them). */
  readonly unexpected: readonly string[];
  readonly tied: boolean;
  readonly map: WeightMap;
}

/**
 * Checks a checkpoint against its config: reports every missing tensor and every tensor whose
 * shape or dtype is not what the config implies. Does not read tensor data.
 */
export function checkWeights(config: Qwen35Config, listing: TensorListing, file?: string): WeightReport {
  const names = listing.names();
  const map = buildWeightMap(names, file);
  const tied = usesTiedEmbeddings(config, names);
  const expected = expectedTensors(config, { tied, expertLayout: detectExpertLayout(map.toHf.keys()) });
  const problems: WeightError[] = [];
  const missing: string[] = [];
  const misshaped: string[] = [];
  const wrongDtype: string[] = [];
  const seen = new Set<string>();
  for (const { canonical, shape } of expected) {
    seen.add(canonical);
    const hf = map.toHf.get(canonical);
    if (hf === undefined) {
      missing.push(canonical);
      const name = hfName(canonical, map.layout);
      problems.push(
        new WeightError({
          file,
          tensor: name,
          expected: shapeToString(shape),
          message: `missing tensor "${name}" (expected shape ${shapeToString(shape)})`,
        }),
      );
      continue;
    }
    const info = listing.info(hf);
    const where = info.file ?? file;
    if (info.shape.length !== shape.length || info.shape.some((d, k) => d !== shape[k])) {
      misshaped.push(canonical);
      problems.push(
        new WeightError({
          file: where,
          tensor: hf,
          expected: shapeToString(shape),
          actual: shapeToString(info.shape),
          message: `tensor "${hf}" has shape ${shapeToString(info.shape)}, expected ${shapeToString(shape)} from the config`,
        }),
      );
    }
    if (!WEIGHT_DTYPES.includes(info.dtype)) {
      wrongDtype.push(canonical);
      problems.push(
        new WeightError({
          file: where,
          tensor: hf,
          expected: WEIGHT_DTYPES.join(" | "),
          actual: info.dtype,
          message: `tensor "${hf}" is ${info.dtype}, expected one of ${WEIGHT_DTYPES.join(", ")}`,
        }),
      );
    }
  }
  const unexpected = [...map.toHf.keys()]
    .filter((c) => !seen.has(c) && !(c === "lm_head" && tied))
    .map((c) => map.toHf.get(c)!);
  unexpected.push(...map.unknown);
  return { ok: problems.length === 0, problems, missing, misshaped, wrongDtype, unexpected, tied, map };
}

/** Throws one WeightError listing every problem (each also in `.problems`). */
export function assertWeights(report: WeightReport, file?: string): void {
  if (report.ok) return;
  const lines = report.problems.map((p) => (p.file && p.file !== file ? `${p.file}: ${p.detail}` : p.detail));
  const shown = lines.slice(0, 20);
  const more = lines.length > shown.length ? `\n  ... and ${lines.length - shown.length} more` : "";
  throw new WeightError({
    file,
    tensor: report.problems[0]?.tensor,
    expected: report.problems[0]?.expected,
    actual: report.problems[0]?.actual,
    message: `${report.problems.length} weight problem(s):\n  - ${shown.join("\n  - ")}${more}`,
    problems: [...report.problems],
  });
}
