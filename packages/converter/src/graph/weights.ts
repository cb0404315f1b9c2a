/**
 * Weights into the graph, one checkpoint tensor at a time: read (stored dtype), convert the rows
 * needed to fp32, fold what the conversion folds (norm gains, −exp(A_log)), encode per role
 * (plain / LUT / int8) and hand the result to the builder, which streams it to the BlobSink when
 * it has one. Nothing keeps a reference to a tensor after its constant is made, so peak memory is
 * about one stored tensor plus its encoded form.
 */
import { createHash } from "node:crypto";
import { crc32 } from "node:zlib";
import {
  AnemllError,
  bf16BitsToF32,
  f16BitsToF32,
  fromFloat32,
  type Tensor,
  toFloat32,
} from "@anemll-qwen35/core";
import { type Qwen35Config, type Qwen35Parameter, qwen35ParameterMap } from "@anemll-qwen35/ir/checkpoint";
import type { MilBuilder, MilData, MilDType, MilVar } from "@anemll-qwen35/ir/mil";
import type { KmeansPool } from "../kmeans-pool.js";
import { palettize, type ReconstructionError, reconstructionErrorOf } from "../palettize.js";
import { dequantizeInt8, quantizeInt8 } from "../quantize-int8.js";
import { lutGroupSize, type QuantPolicy, quantFor, type WeightQuant, type WeightTarget } from "./quant.js";

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

export interface GraphWeightsOptions {
  readonly dtype: "fp16" | "fp32";
  readonly quant: QuantPolicy;
  readonly onWeight?: (r: WeightEncodingReport) => void;
  readonly signal?: AbortSignal;
  /** 1 = k-means on the main thread only (default: the pool's workers). */
  readonly workers?: number;
  /** Worker pool for k-means (default: palettize's process-wide pool). */
  readonly pool?: KmeansPool;
  /** Rows are converted to fp32 about this many values at a time (default 16 Mi). */
  readonly chunkElements?: number;
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
    for (let i = 0; i < original.length; i++) this.addRepeated(original[i], approx[i], 1);
  }

  /** `count` elements of value `original` stored as `approx`. */
  addRepeated(original: number, approx: number, count: number): void {
    const d = original - approx;
    this.se += count * d * d;
    this.norm += count * original * original;
    if (Math.abs(d) > this.maxAbs) this.maxAbs = Math.abs(d);
  }

  result(n: number): ReconstructionError {
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
  /** Weight constant name → the checkpoint tensor it holds (for messages that name the tensor). */
  private readonly constants = new Map<string, string>();

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

  /** The tensor as the quantization policy sees it (a tied head is the lm_head, not the embedding). */
  target(canonical: string): WeightTarget {
    return { canonical, role: canonical === "lm_head" ? "lm_head" : this.param(canonical).role };
  }

  /** How the policy stores `canonical`. */
  quantOf(canonical: string): WeightQuant {
    return quantFor(this.opts.quant, this.target(canonical));
  }

  /**
   * A projection weight [Cout, Cin] as a 1×1 conv weight [Cout, Cin, 1, 1] (channels-first
   * layout, see ane.ts), stored as the policy says.
   */
  async conv1x1Weight(canonical: string): Promise<MilVar> {
    const t = await this.projection(canonical);
    const [cout, cin] = t.shape;
    return this.encodeRows(t, 0, cout, [cin, 1, 1], canonical, milName(canonical));
  }

  /**
   * Part of a projection as a 1×1 conv weight: output rows [rows.rowOffset, +rows) or input
   * columns [cols.rowOffset, +cols) (for splitting a projection wider than the ANE handles),
   * named `<tensor>_<suffix>`.
   */
  async conv1x1WeightPiece(
    canonical: string,
    piece: { readonly rowOffset: number; readonly rows: number },
    along: "rows" | "cols",
    suffix: string,
  ): Promise<MilVar> {
    const t = await this.projection(canonical);
    const [cout, cin] = t.shape;
    const name = `${milName(canonical)}_${suffix}`;
    if (along === "rows")
      return this.encodeRows(t, piece.rowOffset, piece.rowOffset + piece.rows, [cin, 1, 1], canonical, name);
    const data = t.data.constructor as new (n: number) => Tensor["data"];
    const cols = new data(cout * piece.rows);
    for (let r = 0; r < cout; r++) {
      const from = r * cin + piece.rowOffset;
      cols.set(t.data.subarray(from, from + piece.rows) as never, r * piece.rows);
    }
    const part: Tensor = { dtype: t.dtype, shape: [cout, piece.rows], data: cols };
    return this.encodeRows(part, 0, cout, [piece.rows, 1, 1], canonical, name);
  }

  private async projection(canonical: string): Promise<Tensor> {
    if (this.param(canonical).kind !== "projection")
      throw new AnemllError("E_NOT_A_PROJECTION", `"${canonical}" is not a projection matrix`);
    return this.stored(canonical);
  }

  /**
   * Encodes rows [start, end) of a stored matrix (first dimension = output channel) as a weight
   * of shape [end − start, ...tail] and returns the dense weight var: a const, or the output of
   * a constexpr decompression op. Rows are converted to fp32 in chunks (whole groups), so a
   * vocabulary-sized table never exists in fp32 at once — except for a per-tensor LUT, whose
   * k-means needs every value. `canonical` names the tensor whose encoding the policy decides.
   */
  async encodeRows(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    canonical: string,
    name: string,
  ): Promise<MilVar> {
    try {
      // weights are named for their tensor, not for where the graph uses them
      return await this.b.unscoped(() => this.encodeUnchecked(t, start, end, tail, canonical, name));
    } catch (e) {
      if (e instanceof WeightEncodingError || this.opts.signal?.aborted) throw e;
      throw new WeightEncodingError(name, e);
    }
  }

  private async encodeUnchecked(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    canonical: string,
    name: string,
  ): Promise<MilVar> {
    const target = this.target(canonical);
    const adopted = this.adoptShared(name, [end - start, ...tail]);
    if (adopted) {
      this.constants.set(adopted.name, canonical);
      return adopted;
    }
    const q = quantFor(this.opts.quant, target);
    const store = q.kind === "lut" ? this.opts.store : undefined;
    const key = store ? this.weightKey(t, start, end, tail, q, name) : "";
    const reused = store ? await store.reuse(key) : undefined;
    const e = reused ?? (await this.encodeData(t, start, end, tail, q));
    const dtype = this.dtype;
    const lutDtype = (bits: Uint16Array) => (dtype === "fp16" ? bits : Float32Array.from(bits, f16BitsToF32));
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
      v = this.b.const(e.data, dtype, e.shape, { name });
    }
    const { encoding, bits, shape, error } = e;
    this.opts.shared?.set(name, v);
    this.constants.set(v.name, canonical);
    this.opts.onWeight?.({
      name,
      tensor: canonical,
      role: target.role,
      encoding,
      shape,
      bits,
      ...error,
      reused: reused !== undefined,
    });
    return v;
  }

  /** What a k-means result depends on: the tensor's stored rows (by checksum) and the encoding. */
  private weightKey(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    q: WeightQuant,
    name: string,
  ): string {
    const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
    const d = t.data as Exclude<Tensor["data"], BigInt64Array>;
    const rows = d.subarray(start * cols, end * cols);
    const stored = crc32(new Uint8Array(rows.buffer, rows.byteOffset, rows.byteLength));
    const groupSize = q.kind === "lut" ? lutGroupSize(this.opts.quant, q) : 0;
    return createHash("sha256")
      .update(
        JSON.stringify({
          name,
          dtype: t.dtype,
          shape: t.shape,
          start,
          end,
          tail,
          q,
          groupSize,
          graph: this.dtype,
          stored,
        }),
      )
      .digest("hex");
  }

  /** Rows [start, end) of `t` encoded as `q` says (no graph op yet). */
  private async encodeData(
    t: Tensor,
    start: number,
    end: number,
    tail: readonly number[],
    q: WeightQuant,
  ): Promise<EncodedWeight> {
    const rows = end - start;
    const cols = tail.reduce((a, b) => a * b, 1);
    const shape = [rows, ...tail];
    const stored16 = t.dtype === "bf16" || t.dtype === "f16";
    /**
     * Calls `each` over row chunks of about CHUNK_ELEMENTS values, `align` rows at a time, with
     * the rows as stored (bf16/f16) or as fp32.
     */
    const chunks = async (
      align: number,
      each: (first: number, count: number, values: StoredRows) => Promise<void> | void,
    ) => {
      const budget = this.opts.chunkElements ?? CHUNK_ELEMENTS;
      const step = Math.max(align, Math.floor(budget / cols / align) * align);
      for (let r = 0; r < rows; r += step) {
        this.opts.signal?.throwIfAborted();
        const count = Math.min(step, rows - r);
        const a = (start + r) * cols;
        const values: StoredRows = stored16
          ? { dtype: t.dtype as "bf16" | "f16", data: (t.data as Uint16Array).subarray(a, a + count * cols) }
          : rowsFloat32(t, start + r, start + r + count);
        await each(r, count, values);
      }
    };
    if (q.kind === "lut") {
      const wanted = lutGroupSize(this.opts.quant, q);
      // a group must divide the output channels: tiny projections (Hv rows) get gcd(rows, group)
      const groupSize = q.perTensor ? rows : gcd(rows, wanted);
      const k = 2 ** q.bits;
      const groups = rows / groupSize;
      const indices = new Uint8Array(rows * cols);
      const lut = new Uint16Array(groups * k);
      const groupErrors = new Float64Array(groups * 3);
      let lutShape: readonly number[] = [];
      await chunks(groupSize, async (first, count, values) => {
        const p = await palettize(values, [count, ...tail], {
          bits: q.bits,
          groupSize,
          workers: this.opts.workers,
          pool: this.opts.pool,
          signal: this.opts.signal,
        });
        indices.set(p.indices, first * cols);
        lut.set(p.lut, (first / groupSize) * k);
        groupErrors.set(p.groupErrors, (first / groupSize) * 3);
        lutShape = [groups, ...p.lutShape.slice(1)];
      });
      return {
        kind: "lut",
        shape,
        indices,
        lut,
        lutShape,
        bits: q.bits,
        encoding: q.perTensor ? `lut${q.bits},per-tensor` : `lut${q.bits},g${groupSize}`,
        error: reconstructionErrorOf({ groupErrors, indices }),
      };
    }
    const err = new ErrorSum();
    if (q.kind === "int8") {
      const blockSize = q.blockSize ?? tail[0];
      const blocks = tail[0] / blockSize;
      const data = new Int8Array(rows * cols);
      const scale = new Uint16Array(rows * blocks);
      await chunks(1, (first, count, stored) => {
        const values = stored instanceof Float32Array ? stored : toFloat32(stored.dtype, stored.data);
        const qi = quantizeInt8(values, [count, ...tail], blockSize);
        data.set(qi.data, first * cols);
        scale.set(qi.scale, first * blocks);
        err.add(values, dequantizeInt8(qi));
      });
      return {
        kind: "int8",
        shape,
        data,
        scale,
        scaleShape: [rows, blocks, ...tail.slice(1)],
        bits: 8,
        encoding: `int8,b${blockSize}`,
        error: err.result(rows * cols),
      };
    }
    const fp16 = this.dtype === "fp16";
    const out = fp16 ? new Uint16Array(rows * cols) : new Float32Array(rows * cols);
    await chunks(1, (first, _count, stored) => {
      if (out instanceof Float32Array) {
        out.set(stored instanceof Float32Array ? stored : toFloat32(stored.dtype, stored.data), first * cols);
      } else if (stored instanceof Float32Array) {
        const bits = fromFloat32("f16", stored); // bulk, integer-only conversions
        out.set(bits, first * cols);
        err.add(stored, toFloat32("f16", bits));
      } else if (stored.dtype === "f16") {
        out.set(stored.data, first * cols);
      } else {
        bf16ToF16(stored.data, out.subarray(first * cols), err);
      }
    });
    return {
      kind: "plain",
      shape,
      data: out,
      bits: fp16 ? 16 : 32,
      encoding: this.dtype,
      error: err.result(rows * cols),
    };
  }
}

/** Rows of a stored tensor as the encoders take them: 16-bit patterns as stored, or fp32 values. */
type StoredRows = Float32Array | { readonly dtype: "bf16" | "f16"; readonly data: Uint16Array };

/** One weight encoded for the graph: the constant data of its op, its shape and its error. */
export type EncodedWeight = {
  readonly shape: readonly number[];
  readonly encoding: string;
  readonly bits: number;
  readonly error: ReconstructionError;
} & (
  | {
      readonly kind: "lut";
      readonly indices: Uint8Array;
      readonly lut: Uint16Array;
      readonly lutShape: readonly number[];
    }
  | {
      readonly kind: "int8";
      readonly data: Int8Array;
      readonly scale: Uint16Array;
      readonly scaleShape: readonly number[];
    }
  | { readonly kind: "plain"; readonly data: Uint16Array | Float32Array }
);

let bf16ToF16Table: Uint16Array | undefined;

/**
 * bf16 patterns → fp16 patterns (round to nearest even, as fromFloat32 does) through a 64 Ki
 * table, with the rounding error summed over the patterns' histogram rather than per element.
 */
function bf16ToF16(src: Uint16Array, out: Uint16Array, err: ErrorSum): void {
  if (!bf16ToF16Table) {
    const f32 = new Float32Array(65536);
    const u32 = new Uint32Array(f32.buffer);
    for (let i = 0; i < 65536; i++) u32[i] = i << 16;
    bf16ToF16Table = fromFloat32("f16", f32);
  }
  const table = bf16ToF16Table;
  const count = new Uint32Array(65536);
  for (let i = 0; i < src.length; i++) {
    const b = src[i];
    out[i] = table[b];
    count[b] += 1;
  }
  for (let b = 0; b < 65536; b++) {
    if (count[b] > 0) err.addRepeated(bf16BitsToF32(b), f16BitsToF32(table[b]), count[b]);
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
