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
import {
  type ExpertLayout,
  mtpLayerCount,
  type Qwen35Parameter,
  qwen35MtpParameters,
  qwen35Parameters,
  WEIGHT_DTYPES,
} from "./params.js";

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

/** What a check found, by canonical name. */
export interface WeightFindings {
  /** One WeightError per problem (missing, wrong shape, wrong dtype). */
  readonly problems: readonly WeightError[];
  readonly missing: readonly string[];
  readonly misshaped: readonly string[];
  readonly wrongDtype: readonly string[];
}

export interface WeightReport extends WeightFindings {
  readonly ok: boolean;
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
  const expected = qwen35Parameters(config, { tied, expertLayout: detectExpertLayout(map.toHf.keys()) });
  const found = newFindings();
  const seen = new Set<string>();
  for (const p of expected) {
    seen.add(p.canonical);
    checkTensor(p, map.toHf.get(p.canonical), hfName(p.canonical, map.layout), listing, file, found);
  }
  const unexpected = [...map.toHf.keys()]
    .filter((c) => !seen.has(c) && !(c === "lm_head" && tied))
    .map((c) => map.toHf.get(c)!);
  unexpected.push(...map.unknown);
  return { ok: found.problems.length === 0, ...found, unexpected, tied, map };
}

/** WeightFindings being filled. */
interface Findings {
  problems: WeightError[];
  missing: string[];
  misshaped: string[];
  wrongDtype: string[];
}

const newFindings = (): Findings => ({ problems: [], missing: [], misshaped: [], wrongDtype: [] });

/** One expected tensor: present (as `hf`), shaped as the table says, in a weight dtype. */
function checkTensor(
  { canonical, shape }: Qwen35Parameter,
  hf: string | undefined,
  name: string,
  listing: TensorListing,
  file: string | undefined,
  found: Findings,
): void {
  if (hf === undefined) {
    found.missing.push(canonical);
    found.problems.push(
      new WeightError({
        file,
        tensor: name,
        expected: shapeToString(shape),
        message: `missing tensor "${name}" (expected shape ${shapeToString(shape)})`,
      }),
    );
    return;
  }
  const info = listing.info(hf);
  const where = info.file ?? file;
  if (info.shape.length !== shape.length || info.shape.some((d, k) => d !== shape[k])) {
    found.misshaped.push(canonical);
    found.problems.push(
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
    found.wrongDtype.push(canonical);
    found.problems.push(
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

/** The head's findings (all empty when no `mtp.*` tensor is present). */
export interface MtpWeightReport extends WeightFindings {
  /** The checkpoint has `mtp.*` tensors. */
  readonly present: boolean;
  /** Exactly the head that the config's mtp_num_hidden_layers implies, every tensor shaped and typed right. */
  readonly complete: boolean;
  /** The head's decoder layers by the config (0 when it names none). */
  readonly layers: number;
  /** `mtp.*` tensors the table does not list. */
  readonly unexpected: readonly string[];
}

/**
 * Checks a checkpoint's multi-token-prediction head (`mtp.*`) against the config, like checkWeights
 * does the text model. Separate from checkWeights on purpose: every reader of the text model drops
 * the head, so a partial or odd head never stops them; a reader that uses the head asks for this.
 */
export function checkMtpWeights(
  config: Qwen35Config,
  listing: TensorListing,
  file?: string,
): MtpWeightReport {
  const names = new Set(listing.names().filter((n) => n.startsWith("mtp.")));
  const layers = mtpLayerCount(config);
  const experts = detectExpertLayout([...names].map((n) => n.replace(/^mtp\.layers\.(\d+)\./, "layers.$1.")));
  const expected = qwen35MtpParameters(config, { layers, expertLayout: experts });
  const found = newFindings();
  if (names.size > 0) {
    for (const p of expected)
      checkTensor(p, names.has(p.canonical) ? p.canonical : undefined, p.canonical, listing, file, found);
  }
  const listed = new Set(expected.map((p) => p.canonical));
  const unexpected = [...names].filter((n) => !listed.has(n)).sort();
  const complete = names.size > 0 && found.problems.length === 0 && unexpected.length === 0;
  return { present: names.size > 0, complete, layers, ...found, unexpected };
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
