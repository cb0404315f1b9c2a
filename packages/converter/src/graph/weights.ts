/**
 * Weights into the graph, one checkpoint tensor at a time: read (stored dtype), convert the rows
 * needed to fp32, fold what the conversion folds (norm gains, −exp(A_log)), encode per role
 * (plain / LUT / int8) and hand the result to the builder, which streams it to the BlobSink when
 * it has one. Nothing keeps a reference to a tensor after its constant is made, so peak memory is
 * about one stored tensor plus its encoded form.
 */
import { AnemllError, f16BitsToF32, fromFloat32, type Tensor, toFloat32 } from "@anemll-qwen35/core";
import { type Qwen35Config, type Qwen35Parameter, qwen35ParameterMap } from "@anemll-qwen35/ir/checkpoint";
import type { MilBuilder, MilDType, MilVar } from "@anemll-qwen35/ir/mil";
import { depalettize, palettize } from "../palettize.js";
import { dequantizeInt8, quantizeInt8 } from "../quantize-int8.js";
import {
  DEFAULT_LUT_GROUP_SIZE,
  NO_QUANT,
  type QuantOptions,
  type WeightQuant,
  type WeightRole,
} from "./quant.js";

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
  readonly role: WeightRole;
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
}

export interface GraphWeightsOptions {
  readonly dtype: "fp16" | "fp32";
  readonly quant: QuantOptions;
  readonly onWeight?: (r: WeightEncodingReport) => void;
  readonly signal?: AbortSignal;
  /** Worker threads for k-means (palettize's default when absent). */
  readonly workers?: number;
  /** Rows are converted to fp32 about this many values at a time (default 16 Mi). */
  readonly chunkElements?: number;
}

/** Canonical tensor name → MIL identifier ("layers.3.self_attn.q_proj.weight" → "layers_3_self_attn_q_proj_weight"). */
export function milName(canonical: string): string {
  return canonical.replace(/[^A-Za-z0-9_]/g, "_");
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** Rows are converted to fp32 about this many values at a time, by default. */
const CHUNK_ELEMENTS = 1 << 24;

/** Running reconstruction error over chunks. */
class ErrorSum {
  private se = 0;
  private norm = 0;
  private maxAbs = 0;

  add(original: Float32Array, approx: Float32Array): void {
    for (let i = 0; i < original.length; i++) {
      const d = original[i] - approx[i];
      this.se += d * d;
      this.norm += original[i] * original[i];
      if (Math.abs(d) > this.maxAbs) this.maxAbs = Math.abs(d);
    }
  }

  result(n: number): { mse: number; relative: number; maxAbs: number } {
    return { mse: this.se / n, relative: Math.sqrt(this.se / (this.norm || 1)), maxAbs: this.maxAbs };
  }
}

/** The values of rows [start, end) of a 2-D stored tensor as fp32 (exact for bf16/fp16). */
export function rowsFloat32(t: Tensor, start: number, end: number): Float32Array {
  const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return toFloat32(t.dtype, t.data.subarray(start * cols, end * cols) as Tensor["data"]);
}

export class GraphWeights {
  readonly b: MilBuilder;
  readonly source: WeightSource;
  readonly dtype: "fp16" | "fp32";
  private readonly opts: GraphWeightsOptions;
  private readonly params: ReadonlyMap<string, Qwen35Parameter>;

  constructor(b: MilBuilder, source: WeightSource, opts: GraphWeightsOptions) {
    this.b = b;
    this.source = source;
    this.dtype = opts.dtype;
    this.opts = opts;
    this.params = qwen35ParameterMap(source.config, { tied: source.tiedEmbeddings });
  }

  /** The parameter table's entry for a tensor (what kind it is, whether its norm is zero-centred). */
  param(canonical: string): Qwen35Parameter {
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
    return this.source.get(canonical);
  }

  /** A small constant in the graph dtype (a table derived in the graph), named `name` in the current scope. */
  constant(values: Float32Array, shape: readonly number[], name: string): MilVar {
    return this.b.const(values, this.dtype, shape, { name });
  }

  /** A checkpoint tensor (or values folded from it) as a constant, named for the tensor in any scope. */
  tensorConstant(canonical: string, values: Float32Array, shape: readonly number[], suffix = ""): MilVar {
    return this.b.unscoped(() => this.constant(values, shape, `${milName(canonical)}${suffix}`));
  }

  /**
   * A projection weight [Cout, Cin] as a 1×1 conv weight [Cout, Cin, 1, 1] (channels-first
   * layout, see ane.ts), stored as the role says.
   */
  async conv1x1Weight(canonical: string, role: WeightRole): Promise<MilVar> {
    if (this.param(canonical).kind !== "projection")
      throw new AnemllError("E_NOT_A_PROJECTION", `"${canonical}" is not a projection matrix`);
    const t = await this.stored(canonical);
    const [cout, cin] = t.shape;
    return this.encodeRows(t, 0, cout, [cin, 1, 1], role, milName(canonical));
  }

  /**
   * Encodes rows [start, end) of a stored matrix (first dimension = output channel) as a weight
   * of shape [end − start, ...tail] and returns the dense weight var: a const, or the output of
   * a constexpr decompression op. Rows are converted to fp32 in chunks (whole groups), so a
   * vocabulary-sized table never exists in fp32 at once — except for a per-tensor LUT, whose
   * k-means needs every value.
   */
  async encodeRows(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    role: WeightRole,
    name: string,
  ): Promise<MilVar> {
    try {
      // weights are named for their tensor, not for where the graph uses them
      return await this.b.unscoped(() => this.encodeUnchecked(t, start, end, tail, role, name));
    } catch (e) {
      if (e instanceof WeightEncodingError) throw e;
      throw new WeightEncodingError(name, e);
    }
  }

  private async encodeUnchecked(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    role: WeightRole,
    name: string,
  ): Promise<MilVar> {
    const q: WeightQuant = this.opts.quant[role] ?? NO_QUANT;
    const dtype = this.dtype;
    const rows = end - start;
    const cols = tail.reduce((a, b) => a * b, 1);
    const shape = [rows, ...tail];
    const err = new ErrorSum();
    /** Calls `each(first, count)` over row chunks of about CHUNK_ELEMENTS values, `align` rows at a time. */
    const chunks = async (
      align: number,
      each: (first: number, count: number, values: Float32Array) => Promise<void> | void,
    ) => {
      const budget = this.opts.chunkElements ?? CHUNK_ELEMENTS;
      const step = Math.max(align, Math.floor(budget / cols / align) * align);
      for (let r = 0; r < rows; r += step) {
        const count = Math.min(step, rows - r);
        await each(r, count, rowsFloat32(t, start + r, start + r + count));
      }
    };
    let v: MilVar;
    let encoding: string;
    let bits: number;
    if (q.kind === "lut") {
      const wanted = q.groupSize ?? this.opts.quant.groupSize ?? DEFAULT_LUT_GROUP_SIZE;
      // a group must divide the output channels: tiny projections (Hv rows) get gcd(rows, group)
      const groupSize = q.perTensor ? rows : gcd(rows, wanted);
      const k = 2 ** q.bits;
      const indices = new Uint8Array(rows * cols);
      const lutBits = new Uint16Array((rows / groupSize) * k);
      let lutShape: readonly number[] = [];
      await chunks(groupSize, async (first, count, values) => {
        const p = await palettize(values, [count, ...tail], {
          bits: q.bits,
          groupSize,
          workers: this.opts.workers,
        });
        indices.set(p.indices, first * cols);
        lutBits.set(p.lut, (first / groupSize) * k);
        lutShape = [rows / groupSize, ...p.lutShape.slice(1)];
        err.add(values, depalettize(p));
      });
      v = this.b.constexprLutToDense({
        indices: { data: indices, dtype: `uint${q.bits}` as MilDType, shape },
        lut: {
          data: dtype === "fp16" ? lutBits : Float32Array.from(lutBits, f16BitsToF32),
          dtype,
          shape: lutShape,
        },
        name,
      });
      encoding = q.perTensor ? `lut${q.bits},per-tensor` : `lut${q.bits},g${groupSize}`;
      bits = q.bits;
    } else if (q.kind === "int8") {
      const blockSize = q.blockSize ?? tail[0];
      const blocks = tail[0] / blockSize;
      const data = new Int8Array(rows * cols);
      const scale = new Uint16Array(rows * blocks);
      await chunks(1, (first, count, values) => {
        const qi = quantizeInt8(values, [count, ...tail], blockSize);
        data.set(qi.data, first * cols);
        scale.set(qi.scale, first * blocks);
        err.add(values, dequantizeInt8(qi));
      });
      v = this.b.constexprBlockwiseShiftScale({
        data: { data, dtype: "int8", shape },
        scale: {
          data: dtype === "fp16" ? scale : Float32Array.from(scale, f16BitsToF32),
          dtype,
          shape: [rows, blocks, ...tail.slice(1)],
        },
        name,
      });
      encoding = `int8,b${blockSize}`;
      bits = 8;
    } else {
      const out = dtype === "fp16" ? new Uint16Array(rows * cols) : new Float32Array(rows * cols);
      await chunks(1, (first, _count, values) => {
        if (out instanceof Float32Array) {
          out.set(values, first * cols);
          return;
        }
        const bits = fromFloat32("f16", values); // bulk, integer-only conversions
        out.set(bits, first * cols);
        err.add(values, toFloat32("f16", bits));
      });
      v = this.b.const(out, dtype, shape, { name });
      encoding = dtype;
      bits = dtype === "fp16" ? 16 : 32;
    }
    this.opts.onWeight?.({ name, role, encoding, shape, bits, ...err.result(rows * cols) });
    return v;
  }
}

/** Re-thrown around a weight that fails to encode, naming the tensor. */
export class WeightEncodingError extends AnemllError {
  readonly tensor: string;
  constructor(tensor: string, cause: unknown) {
    super("E_WEIGHT_ENCODING", `cannot encode weight "${tensor}": ${(cause as Error).message}`, { cause });
    this.tensor = tensor;
  }
}
