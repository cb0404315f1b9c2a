/**
 * Reading a Qwen3.5 checkpoint folder into MLX (lazily: tensor data is read when first evaluated) and
 * presenting it in one layout, mlx-lm's (names relative to `language_model.`, e.g.
 * `model.layers.0.linear_attn.conv1d.weight`), whatever the files hold:
 *
 * - "hf": Hugging Face safetensors (`model.language_model.*` or `model.*`). Checked against the config
 *   with ir's checkWeights, then sanitized as mlx-lm does: vision tower dropped, depthwise
 *   conv [C, 1, K] → [C, K, 1], `1 + w` added (in fp32) to the zero-centred norms (input/post-attention
 *   layernorm, final norm, q_norm, k_norm; never linear_attn.norm), fused experts split into
 *   switch_mlp.{gate,up}_proj, per-expert 2-D experts stacked. A complete multi-token-prediction
 *   head (`mtp.*`, checked with ir's checkMtpWeights) stays under its own names, norms + 1 too.
 * - "mlx": a checkpoint mlx-lm (or saveMlxCheckpoint) wrote: already sanitized (norms carry the +1,
 *   conv is [C, K, 1]), possibly quantized (`.scales` / `.biases` beside the packed `.weight`);
 *   mlx-lm drops the MTP head, so an MLX checkpoint has none.
 *
 * The format is detected like mlx-lm's sanitize does it, from the conv weights' layout, cross-checked
 * with the name prefix; a checkpoint whose two signals disagree is refused rather than risk applying
 * the +1 twice (or not at all).
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import type { DType } from "@anemll-qwen35/core";
import {
  assertWeights,
  checkMtpWeights,
  checkSafetensorsShape,
  checkWeights,
  INDEX_FILE,
  mtpLayerCount,
  parseSafetensorsIndex,
  type Qwen35Config,
  qwen35MtpParameters,
  qwen35Parameters,
  SafetensorsError,
  type TensorListing,
  WeightError,
} from "@anemll-qwen35/ir/checkpoint";
import { MlxModelLoadError } from "../errors.js";
import * as mx from "../mlx.js";
import type { Dtype, MxArray } from "../native.js";

export type CheckpointFormat = "hf" | "mlx";

/** The checkpoint's arrays by their stored names (lazy), and which file holds each. */
export class RawTensors {
  readonly arrays = new Map<string, MxArray>();
  readonly fileOf = new Map<string, string>();

  constructor(
    readonly dir: string,
    readonly files: readonly string[],
  ) {
    for (const file of files) {
      let loaded: Record<string, MxArray>;
      try {
        loaded = mx.keep(mx.loadSafetensors(file).arrays);
      } catch (cause) {
        this.dispose();
        throw new SafetensorsError(file, undefined, `MLX could not read it: ${(cause as Error).message}`, {
          cause,
        });
      }
      for (const [name, a] of Object.entries(loaded)) {
        if (this.arrays.has(name)) {
          a.dispose();
          this.dispose();
          throw new SafetensorsError(file, name, `also stored in ${this.fileOf.get(name)}`);
        }
        this.arrays.set(name, a);
        this.fileOf.set(name, file);
      }
    }
  }

  /** Stored names still held. */
  get names(): string[] {
    return [...this.arrays.keys()];
  }

  get(name: string): MxArray | undefined {
    return this.arrays.get(name);
  }

  /** Releases the handles of the stored tensors whose name matches (data already used stays with its users). */
  release(match: (name: string) => boolean): void {
    for (const [name, a] of this.arrays) {
      if (match(name)) {
        a.dispose();
        this.arrays.delete(name);
      }
    }
  }

  dispose(): void {
    this.release(() => true);
  }

  /** The float tensors whose stored name matches, checked for NaN and ±Inf (see FiniteCheck). */
  finite(match: (name: string) => boolean): FiniteCheck {
    // own handles: the stored ones may be released before the check is read
    const tensors = [...this.arrays]
      .filter(([name, a]) => match(name) && FLOAT.has(a.dtype))
      .map(([name, a]) => [name, mx.reshape(a, a.shape)] as const);
    // x − x is 0 for every finite x and NaN for NaN and ±Inf; a sum keeps the NaN
    const sums = tensors.map(([, a]) => mx.sum(mx.subtract(a, a)));
    const dispose = () => mx.dispose([...sums, ...tensors.map(([, a]) => a)]);
    return {
      arrays: sums,
      verify: () => {
        try {
          const bad = sums.findIndex((s) => s.item() !== 0);
          if (bad >= 0) throw this.nonFinite(tensors[bad][0], tensors[bad][1]);
        } finally {
          dispose();
        }
      },
      dispose,
    };
  }

  /** The error for a tensor known to hold a NaN or ±Inf: which element, what value (worded as ir's). */
  private nonFinite(name: string, a: MxArray): WeightError {
    return mx.tidy(() => {
      const flat = mx.reshape(a, [-1]);
      const at = Number(mx.argmax(mx.astype(mx.notEqual(mx.subtract(flat, flat), 0), "int32")).item());
      const value = Number(mx.astype(mx.slice(flat, [at], [at + 1]), "float32").item());
      return new WeightError({
        file: this.fileOf.get(name),
        tensor: name,
        actual: String(value),
        message: `"${name}" holds ${value} (element ${at} of [${a.shape.join(", ")}]); a checkpoint's weights must be finite`,
      });
    });
  }
}

const FLOAT = new Set<Dtype>(["float32", "float16", "bfloat16"]);

/**
 * Scalars to evaluate with the weights they check (`arrays`), then `verify()`: throws WeightError
 * naming the first tensor with a NaN or ±Inf, and releases the check (or `dispose()` it unread).
 */
export interface FiniteCheck {
  readonly arrays: MxArray[];
  verify(): void;
  dispose(): void;
}

/**
 * The safetensors files of a folder: those named by model.safetensors.index.json, else every
 * `model*.safetensors` (as mlx-lm globs; other .safetensors files, e.g. test goldens, are not weights).
 */
export function weightFiles(dir: string): string[] {
  const index = join(dir, INDEX_FILE);
  if (existsSync(index)) {
    // ir's checks, as the converter applies them: every entry a shard file name in this folder
    const { weightMap } = parseSafetensorsIndex(readFileSync(index, "utf8"), index);
    const files = [...new Set(Object.values(weightMap))].sort();
    for (const f of files) {
      const st = statSync(join(dir, f), { throwIfNoEntry: false });
      if (!st) throw new MlxModelLoadError(index, `lists ${f}, which is not in ${dir}`);
      // MLX would block forever opening a named pipe
      if (!st.isFile()) throw new MlxModelLoadError(index, `lists ${f}, which is not a regular file`);
    }
    return files.map((f) => join(dir, f));
  }
  const files = readdirSync(dir)
    .filter((f) => f.startsWith("model") && f.endsWith(".safetensors") && statSync(join(dir, f)).isFile())
    .sort();
  if (files.length === 0) {
    throw new MlxModelLoadError(dir, "no model.safetensors.index.json and no model*.safetensors files");
  }
  return files.map((f) => join(dir, f));
}

const IR_DTYPE: Partial<Record<Dtype, DType>> = {
  float32: "f32",
  float16: "f16",
  bfloat16: "bf16",
  int8: "i8",
  uint8: "u8",
  int16: "i16",
  int32: "i32",
  int64: "i64",
  bool: "bool",
};

/** ir's view of the tensor list (for checkWeights); dtypes ir does not know keep MLX's name. */
function listing(raw: RawTensors): TensorListing {
  return {
    names: () => raw.names,
    info: (name) => {
      const a = raw.arrays.get(name)!;
      return { dtype: IR_DTYPE[a.dtype] ?? (a.dtype as DType), shape: a.shape, file: raw.fileOf.get(name) };
    },
  };
}

const CONV = /linear_attn\.conv1d\.weight$/;

/** Which layout the files hold (see the module comment); throws MlxModelLoadError when unclear. */
export function detectFormat(raw: RawTensors): CheckpointFormat {
  const layouts = new Set<CheckpointFormat>();
  for (const name of raw.names) {
    if (!CONV.test(name)) continue;
    const shape = raw.arrays.get(name)!.shape;
    // HF: [C, 1, K]; MLX: [C, K, 1] (mlx-lm's test: the last axis is not 1 → not yet sanitized)
    if (shape.length === 3) layouts.add(shape[2] !== 1 ? "hf" : "mlx");
  }
  const mlxNames = raw.names.some((n) => n.startsWith("language_model."));
  const hfNames = raw.names.some((n) => n.startsWith("model.language_model."));
  if (layouts.size > 1) {
    throw new MlxModelLoadError(
      raw.dir,
      "conv1d weights mix the Hugging Face [C, 1, K] and MLX [C, K, 1] layouts",
    );
  }
  const byConv = [...layouts][0];
  const byName: CheckpointFormat | undefined = mlxNames ? "mlx" : hfNames ? "hf" : undefined;
  if (byConv && byName && byConv !== byName) {
    throw new MlxModelLoadError(
      raw.dir,
      `tensor names use the ${byName === "mlx" ? "MLX (language_model.model.*)" : "Hugging Face (model.language_model.*)"} ` +
        `layout but the conv1d weights are in the ${byConv === "mlx" ? "MLX [C, K, 1]" : "Hugging Face [C, 1, K]"} layout; ` +
        "refusing to guess whether the zero-centred norms already carry +1",
    );
  }
  return byConv ?? byName ?? "hf";
}

/** A checkpoint seen in mlx-lm's layout (names relative to `language_model.`). */
export interface MlxView {
  readonly format: CheckpointFormat;
  readonly tied: boolean;
  /** The tensor (lazy) or undefined; every call returns a new handle the caller owns. */
  get(name: string): MxArray | undefined;
  has(name: string): boolean;
  /** The name the files store `name` under (for error messages). */
  storedName(name: string): string;
  /** Releases the stored tensors that layer `i` used (or the non-layer ones for i = -1). */
  releaseLayer(i: number): void;
  /** The NaN/Inf check of the stored tensors of layer `i` (or the non-layer ones for i = -1). */
  finite(i: number): FiniteCheck;
  /**
   * Whether a complete MTP head (`mtp.*`) can be read through `get` (HF checkpoints of dense
   * models); `mtpFinite()` checks its tensors, `releaseMtp()` lets them go.
   */
  readonly mtp: boolean;
  mtpFinite(): FiniteCheck;
  releaseMtp(): void;
  dispose(): void;
}

const isMtp = (name: string): boolean => name.startsWith("mtp.");
/** The text-model layer a stored tensor belongs to, -1 for the others (never an MTP tensor's). */
const layerOf = (name: string): number => {
  const m = /\.layers\.(\d+)\./.exec(name);
  return m && !isMtp(name) ? Number(m[1]) : -1;
};

/** MLX-format files: strip the `language_model.` prefix; everything else is already in place. */
function mlxView(raw: RawTensors): MlxView {
  const stored = (name: string) => raw.get(`language_model.${name}`) ?? raw.get(name);
  const has = (name: string) => stored(name) !== undefined;
  const prefixed = raw.names.some((n) => n.startsWith("language_model."));
  return {
    format: "mlx",
    storedName: (name) => (raw.get(name) || !prefixed ? name : `language_model.${name}`),
    tied: !has("lm_head.weight"),
    get: (name) => {
      const a = stored(name);
      return a === undefined ? undefined : mx.reshape(a, a.shape);
    },
    has,
    releaseLayer: (i) => raw.release((n) => layerOf(n) === i),
    finite: (i) => raw.finite((n) => layerOf(n) === i),
    mtp: false,
    mtpFinite: () => raw.finite(() => false),
    releaseMtp: () => {},
    dispose: () => raw.dispose(),
  };
}

/** HF files, validated by ir, then sanitized on the fly into mlx-lm's layout. */
function hfView(raw: RawTensors, config: Qwen35Config): MlxView {
  const report = checkWeights(config, listing(raw), raw.dir);
  assertWeights(report, raw.dir);
  const toHf = report.map.toHf; // canonical (ir) → stored HF name
  const canonical = (name: string): string | undefined => {
    if (name === "model.embed_tokens.weight") return "embed";
    if (name === "model.norm.weight") return "norm";
    if (name === "lm_head.weight") return report.tied ? undefined : "lm_head";
    if (name.startsWith("model.layers.")) return name.slice("model.".length);
    return undefined;
  };
  const read = (c: string) => {
    const hf = toHf.get(c);
    return hf === undefined ? undefined : raw.get(hf);
  };
  // the norms that store w for a model that multiplies by 1 + w (never linear_attn.norm)
  const zeroCentred = new Set(
    qwen35Parameters(config, { tied: report.tied })
      .filter((p) => p.zeroCentred)
      .map((p) => p.canonical),
  );
  const E = config.moe?.numExperts ?? 0;
  const F = config.moe?.moeIntermediateSize ?? 0;
  // The MTP head: read only when complete (a partial or odd head never stops the text model) and
  // dense (the MoE head's experts are not wired up here).
  const mtp =
    !config.moe && mtpLayerCount(config) > 0 && checkMtpWeights(config, listing(raw), raw.dir).complete;
  const mtpZeroCentred = new Set(
    mtp
      ? qwen35MtpParameters(config, { layers: mtpLayerCount(config) })
          .filter((p) => p.zeroCentred)
          .map((p) => p.canonical)
      : [],
  );
  if (!mtp) raw.release(isMtp);

  const get = (name: string): MxArray | undefined => {
    if (isMtp(name)) {
      const a = raw.get(name);
      if (a === undefined) return undefined;
      return mtpZeroCentred.has(name) ? mx.add(mx.astype(a, "float32"), 1) : mx.reshape(a, a.shape);
    }
    // Experts: fused [E, 2F, D] (gate rows first) or per-expert 2-D tensors → switch_mlp banks.
    const sw = /^model\.(layers\.\d+\.mlp)\.switch_mlp\.(gate|up|down)_proj\.weight$/.exec(name);
    if (sw) {
      const [, mlpPath, part] = sw;
      const fused = read(`${mlpPath}.experts.${part === "down" ? "down_proj" : "gate_up_proj"}`);
      if (fused) {
        if (part === "down") return mx.reshape(fused, fused.shape);
        return part === "gate" ? mx.slice(fused, [0, 0], [E, F]) : mx.slice(fused, [0, F], [E, 2 * F]);
      }
      const parts: MxArray[] = [];
      for (let e = 0; e < E; e++) {
        const p = read(`${mlpPath}.experts.${e}.${part}_proj.weight`);
        if (!p) return undefined;
        parts.push(p);
      }
      return mx.stack(parts, 0);
    }
    const c = canonical(name);
    const a = c === undefined ? undefined : read(c);
    if (a === undefined) return undefined;
    if (CONV.test(name)) return mx.transpose(a, [0, 2, 1]); // [C, 1, K] → [C, K, 1]
    if (zeroCentred.has(c as string)) return mx.add(mx.astype(a, "float32"), 1);
    return mx.reshape(a, a.shape);
  };
  return {
    format: "hf",
    tied: report.tied,
    storedName: (name) => {
      const c = canonical(name);
      return (c && toHf.get(c)) ?? name;
    },
    get,
    has: (name) => {
      const a = get(name);
      a?.dispose();
      return a !== undefined;
    },
    releaseLayer: (i) => raw.release((n) => layerOf(n) === i),
    finite: (i) => raw.finite((n) => layerOf(n) === i),
    mtp,
    mtpFinite: () => raw.finite(isMtp),
    releaseMtp: () => raw.release(isMtp),
    dispose: () => raw.dispose(),
  };
}

/**
 * Checks every tensor shape in each file's header with ir's check, the one convert applies: MLX's
 * own reader would take a shape of [1024.5, 128] as [1024, 128]. (MLX files hold dtypes ir does
 * not read, U32 for packed weights, so only the shapes are ir's business here.)
 */
async function checkShapes(files: readonly string[]): Promise<void> {
  for (const file of files) {
    let header: unknown;
    try {
      const fh = await open(file, "r");
      try {
        const len = Buffer.alloc(8);
        await fh.read(len, 0, 8, 0);
        const n = Number(len.readBigUInt64LE(0));
        const { size } = await fh.stat();
        if (size < 8 || n > size - 8)
          throw new Error(`header length ${n} runs past the end of the file (${size} bytes)`);
        const json = Buffer.alloc(n);
        await fh.read(json, 0, n, 8);
        header = JSON.parse(json.toString("utf8"));
      } finally {
        await fh.close();
      }
    } catch (cause) {
      throw new SafetensorsError(
        file,
        undefined,
        `not a readable safetensors header (${(cause as Error).message})`,
        {
          cause,
        },
      );
    }
    if (typeof header !== "object" || header === null) continue; // MLX says what is wrong
    for (const [name, entry] of Object.entries(header)) {
      if (name !== "__metadata__" && typeof entry === "object" && entry !== null)
        checkSafetensorsShape((entry as { shape?: unknown }).shape, file, name);
    }
  }
}

/** Opens `dir`'s weights in mlx-lm's layout; checks the files' shapes, and HF checkpoints against the config. */
export async function openCheckpoint(dir: string, config: Qwen35Config): Promise<MlxView> {
  const files = weightFiles(dir);
  await checkShapes(files);
  const raw = new RawTensors(dir, files);
  try {
    const format = detectFormat(raw);
    // The vision tower is never used (nor is the MTP head of an MLX checkpoint): drop their handles now.
    raw.release(
      (n) => n.startsWith("model.visual.") || n.startsWith("vision_tower.") || (format === "mlx" && isMtp(n)),
    );
    return format === "mlx" ? mlxView(raw) : hfView(raw, config);
  } catch (error) {
    raw.dispose();
    throw error;
  }
}
