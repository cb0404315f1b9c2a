/**
 * Weights into the graph, one checkpoint tensor at a time: canonical tensor → MIL constant. Reads
 * the stored tensor, folds what the conversion folds (norm gains, −exp(A_log): the callers), has
 * the encoder (quant/encode.ts) store it as the quantization plan says, and makes the constant —
 * `const`, `constexpr_lut_to_dense` or `constexpr_blockwise_shift_scale` — which the builder
 * streams to its BlobSink when it has one. Nothing keeps a reference to a tensor after its
 * constant is made, so peak memory is about one stored tensor plus its encoded form.
 */
import { AnemllError, f16BitsToF32, type Tensor } from "@anemll-qwen35/core";
import {
  mtpLayerCount,
  type Qwen35Config,
  type Qwen35Parameter,
  qwen35MtpParameters,
  qwen35ParameterMap,
} from "@anemll-qwen35/ir/checkpoint";
import type { MilBuilder, MilData, MilDType, MilVar } from "@anemll-qwen35/ir/mil";
import { WeightEncodingError } from "../errors.js";
import {
  type EncodedWeight,
  type EncodeOptions,
  encodedWeightKey,
  encodeWeight,
  type RowRange,
  rowsFloat32,
} from "../quant/encode.js";
import type { QuantPlan } from "../quant/plan.js";
import { flushF16Bits, flushF16Values } from "./ane.js";

/**
 * Where weights come from: canonical names (see ir's checkpoint/weights.ts) → stored tensors.
 * `Qwen35Checkpoint` satisfies it; `get("lm_head")` returns the embedding when tied.
 */
export interface WeightSource {
  readonly config: Qwen35Config;
  readonly tiedEmbeddings: boolean;
  get(canonical: string): Promise<Tensor>;
}

/** One encoded weight, as reported to `onWeight`. */
export interface WeightEncodingReport {
  /** The constant's name in the graph (derived from the canonical tensor name). */
  readonly name: string;
  /** The checkpoint tensor (canonical name) and its role in ir's parameter table (`lm_head` for a tied head). */
  readonly tensor: string;
  readonly role: string;
  /** e.g. "fp16", "lut4,g8", "lut6,per-tensor", "int8,b128". */
  readonly encoding: string;
  readonly shape: readonly number[];
  /** Bits per weight element (index bits for LUTs, 8 for int8, 16/32 when plain). */
  readonly bits: number;
  /** Mean squared error of the stored weight against the checkpoint's fp32 values. */
  readonly mse: number;
  /** ‖W − Ŵ‖ / ‖W‖. */
  readonly relative: number;
  readonly maxAbs: number;
  /** Taken from an interrupted conversion instead of being computed again. */
  readonly reused?: boolean;
}

export interface GraphWeightsOptions extends EncodeOptions {
  /** How each tensor is stored (quant/plan.ts). */
  readonly quant: QuantPlan;
  readonly onWeight?: (r: WeightEncodingReport) => void;
  /** Keeps k-means results for a resumed conversion (convert's TensorJournal). */
  readonly store?: EncodedWeightStore;
  /**
   * Weight constants by name, shared by the functions of one package: a weight another function
   * already made is adopted (the same stored data, encoded once), not encoded again.
   */
  readonly shared?: Map<string, MilVar>;
}

/** Keeps k-means results across an interrupted conversion. */
export interface EncodedWeightStore {
  /** A weight finished by an earlier attempt under this key, verified; undefined if none. */
  reuse(key: string): Promise<EncodedWeight | undefined>;
  /** A weight just handed to the builder; `data` are the arrays given to its op, in order. */
  finished(key: string, name: string, weight: EncodedWeight, data: readonly MilData[]): void;
}

/** Canonical tensor name → MIL identifier ("layers.3.self_attn.q_proj.weight" → "layers_3_self_attn_q_proj_weight"). */
export function milName(canonical: string): string {
  return canonical.replace(/[^A-Za-z0-9_]/g, "_");
}

export class GraphWeights {
  readonly b: MilBuilder;
  readonly source: WeightSource;
  readonly dtype: "fp16" | "fp32";
  private readonly opts: GraphWeightsOptions;
  private readonly params: ReadonlyMap<string, Qwen35Parameter>;
  /** Weight constant name → the checkpoint tensor it holds (for messages that name the tensor). */
  private readonly constants = new Map<string, string>();

  constructor(b: MilBuilder, source: WeightSource, opts: GraphWeightsOptions) {
    this.b = b;
    this.source = source;
    this.dtype = opts.dtype;
    this.opts = opts;
    const params = new Map(qwen35ParameterMap(source.config, { tied: source.tiedEmbeddings }));
    const mtp = mtpLayerCount(source.config);
    if (mtp > 0)
      for (const p of qwen35MtpParameters(source.config, { layers: mtp })) params.set(p.canonical, p);
    this.params = params;
  }

  /**
   * The checkpoint's name for `canonical`: decoder layer numbers past the trunk's name the MTP
   * head's layers (vLLM numbers them after the trunk's), so one layer builder serves both —
   * `layers.{N + k}.x` is `mtp.layers.{k}.x` for an N-layer trunk.
   */
  canonical(canonical: string): string {
    const m = /^layers\.(\d+)\.(.*)$/.exec(canonical);
    const N = this.source.config.numHiddenLayers;
    if (!m || Number(m[1]) < N) return canonical;
    return `mtp.layers.${Number(m[1]) - N}.${m[2]}`;
  }

  /** The parameter table's entry for a tensor (what kind it is, whether its norm is zero-centred). */
  param(name: string): Qwen35Parameter {
    const canonical = this.canonical(name);
    const p = this.params.get(canonical === "lm_head" && this.source.tiedEmbeddings ? "embed" : canonical);
    if (!p)
      throw new AnemllError("E_UNKNOWN_TENSOR", `"${canonical}" is not a tensor of this Qwen3.5 text model`);
    return p;
  }

  /** A whole checkpoint tensor as fp32 values. */
  async float32(canonical: string): Promise<Float32Array> {
    const t = await this.stored(canonical);
    return rowsFloat32(t, 0, t.shape[0]);
  }

  /** The stored tensor (checks the abort signal first: this is where conversion spends its time). */
  async stored(canonical: string): Promise<Tensor> {
    this.opts.signal?.throwIfAborted();
    return this.source.get(this.canonical(canonical));
  }

  /** A small constant in the graph dtype (a table derived in the graph), named `name` in the current scope. */
  constant(values: Float32Array, shape: readonly number[], name: string): MilVar {
    const v = this.dtype === "fp16" ? flushF16Values(values) : values;
    return this.b.const(v, this.dtype, shape, { name });
  }

  /** A checkpoint tensor (or values folded from it) as a constant, named for the tensor in any scope. */
  tensorConstant(tensorName: string, values: Float32Array, shape: readonly number[], suffix = ""): MilVar {
    const canonical = this.canonical(tensorName);
    const name = `${milName(canonical)}${suffix}`;
    const v = this.adoptShared(name, shape) ?? this.b.unscoped(() => this.constant(values, shape, name));
    this.opts.shared?.set(name, v);
    this.constants.set(v.name, canonical);
    return v;
  }

  /** The constant `name` another function of the package made, in this function (if any, of this shape). */
  private adoptShared(name: string, shape: readonly number[]): MilVar | undefined {
    const prior = this.opts.shared?.get(name);
    if (!prior || prior.shape.join() !== shape.join()) return undefined;
    return this.b.adopt(prior); // the very var when it is this function's own
  }

  /** The checkpoint tensor a weight constant (by op name) was made from. */
  tensorOf(constName: string): string | undefined {
    return this.constants.get(constName);
  }

  /**
   * A projection weight [Cout, Cin] as a 1×1 conv weight [Cout, Cin, 1, 1] (channels-first
   * layout, see ane.ts), stored as the plan says.
   */
  async conv1x1Weight(tensorName: string): Promise<MilVar> {
    const canonical = this.canonical(tensorName);
    const t = await this.projection(canonical);
    const [cout, cin] = t.shape;
    return this.encodeRows(t, { start: 0, end: cout, tail: [cin, 1, 1] }, canonical, milName(canonical));
  }

  /**
   * Part of a projection as a 1×1 conv weight: output rows [rows.rowOffset, +rows) or input
   * columns [cols.rowOffset, +cols) (for splitting a projection wider than the ANE handles),
   * named `<tensor>_<suffix>`.
   */
  async conv1x1WeightPiece(
    tensorName: string,
    piece: { readonly rowOffset: number; readonly rows: number },
    along: "rows" | "cols",
    suffix: string,
  ): Promise<MilVar> {
    const canonical = this.canonical(tensorName);
    const t = await this.projection(canonical);
    const [cout, cin] = t.shape;
    const name = `${milName(canonical)}_${suffix}`;
    if (along === "rows") {
      const rows = { start: piece.rowOffset, end: piece.rowOffset + piece.rows, tail: [cin, 1, 1] };
      return this.encodeRows(t, rows, canonical, name);
    }
    const data = t.data.constructor as new (n: number) => Tensor["data"];
    const cols = new data(cout * piece.rows);
    for (let r = 0; r < cout; r++) {
      const from = r * cin + piece.rowOffset;
      cols.set(t.data.subarray(from, from + piece.rows) as never, r * piece.rows);
    }
    const part: Tensor = { dtype: t.dtype, shape: [cout, piece.rows], data: cols };
    return this.encodeRows(part, { start: 0, end: cout, tail: [piece.rows, 1, 1] }, canonical, name);
  }

  private async projection(canonical: string): Promise<Tensor> {
    if (this.param(canonical).kind !== "projection")
      throw new AnemllError("E_NOT_A_PROJECTION", `"${canonical}" is not a projection matrix`);
    return this.stored(canonical);
  }

  /**
   * Rows `rows` of a stored matrix (first dimension = output channel) as the weight `name`, stored
   * as the plan says for `canonical`: the dense weight var — a const, or the output of a
   * constexpr decompression op.
   */
  async encodeRows(t: Tensor, rows: RowRange, canonical: string, name: string): Promise<MilVar> {
    try {
      // weights are named for their tensor, not for where the graph uses them
      return await this.b.unscoped(() => this.encodeUnchecked(t, rows, canonical, name));
    } catch (e) {
      if (e instanceof WeightEncodingError || this.opts.signal?.aborted) throw e;
      throw new WeightEncodingError(name, e);
    }
  }

  private async encodeUnchecked(t: Tensor, rows: RowRange, canonical: string, name: string): Promise<MilVar> {
    const adopted = this.adoptShared(name, [rows.end - rows.start, ...rows.tail]);
    if (adopted) {
      this.constants.set(adopted.name, canonical);
      return adopted;
    }
    const planned = this.opts.quant.tensor(canonical);
    const store = planned.encoding.kind === "lut" ? this.opts.store : undefined;
    const key = store ? encodedWeightKey(t, rows, planned, name, this.dtype) : "";
    const reused = store ? await store.reuse(key) : undefined;
    const e = reused ?? (await encodeWeight(t, rows, planned, this.opts));
    const dtype = this.dtype;
    // fp16 values as the package stores them: subnormals are 0 on the ANE, and so in the package
    const lutDtype = (bits: Uint16Array) =>
      dtype === "fp16" ? flushF16Bits(bits) : Float32Array.from(bits, f16BitsToF32);
    let v: MilVar;
    if (e.kind === "lut") {
      const lut = lutDtype(e.lut);
      v = this.b.constexprLutToDense({
        indices: { data: e.indices, dtype: `uint${e.bits}` as MilDType, shape: e.shape },
        lut: { data: lut, dtype, shape: e.lutShape },
        name,
      });
      store?.finished(key, name, e, [e.indices, lut]);
    } else if (e.kind === "int8") {
      v = this.b.constexprBlockwiseShiftScale({
        data: { data: e.data, dtype: "int8", shape: e.shape },
        scale: { data: lutDtype(e.scale), dtype, shape: e.scaleShape },
        name,
      });
    } else {
      v = this.b.const(e.data instanceof Uint16Array ? lutDtype(e.data) : e.data, dtype, e.shape, { name });
    }
    const { encoding, bits, shape, error } = e;
    this.opts.shared?.set(name, v);
    this.constants.set(v.name, canonical);
    this.opts.onWeight?.({
      name,
      tensor: canonical,
      role: planned.role,
      encoding,
      shape,
      bits,
      ...error,
      reused: reused !== undefined,
    });
    return v;
  }
}
