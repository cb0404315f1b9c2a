/**
 * Qwen3.5 on MLX as a StepModel (packages/generate): load a checkpoint (Hugging Face or MLX format,
 * a folder or an `hf:` reference), then prefill / decode token by token.
 *
 * Decode is pipelined like mlx-lm's generate_step: once a step's logits are scheduled, the next step
 * is built on the device-side argmax of those logits and scheduled too, while JS reads the logits and
 * samples. When the caller then feeds exactly that token (greedy decoding), its step is already
 * running or done; when it feeds another token the speculative step is dropped — the GDN states it
 * produced are discarded (the previous ones were kept), and the KV caches need nothing: the real
 * step writes the same position again.
 */

import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { StateSnapshot, StepModel, StepOptions, StepOutput } from "@anemll-qwen35/generate";
import { ContextOverflowError, SnapshotMismatchError } from "@anemll-qwen35/generate";
import {
  type Qwen35Config,
  type ResolveOptions,
  readQwen35Config,
  resolveModelRef,
} from "@anemll-qwen35/ir/checkpoint";
import { type DtypeLike, toDtype } from "./array.js";
import { ModelDisposedError, RuntimeMlxError } from "./errors.js";
import * as mx from "./mlx.js";
import type { Dtype, MxArray } from "./native.js";
import { type GdnState, gdnStateArrays, handle, KvCache, type KvSnapshot } from "./qwen35/cache.js";
import { type CheckpointFormat, openCheckpoint } from "./qwen35/checkpoint.js";
import { forward, type Qwen35Weights } from "./qwen35/model.js";
import { type BuildProgress, buildWeights, validateMlx, weightsArrays } from "./qwen35/weights.js";

export interface LoadMlxModelOptions {
  /**
   * Weight and activation dtype: float32 (parity with the fp32 references), bfloat16 or float16
   * (speed). Default: the checkpoint's config dtype (bfloat16 for official checkpoints), else float32.
   * A_log always stays float32.
   */
  dtype?: DtypeLike;
  /** Quantize the projections, embedding and head at load (affine, as mlx-lm). Not for already-quantized checkpoints. */
  bits?: 4 | 8;
  /** Group size for `bits` (default 64). */
  groupSize?: number;
  /** Most tokens (prompt + generated) one sequence may hold. Default: the config's max_position_embeddings. */
  contextLength?: number;
  /** KV cache policy: grow in `step`-position increments (default 256, as mlx-lm) or allocate `contextLength` at once. */
  kvCache?: { preallocate?: boolean; step?: number };
  /** Prompt tokens per forward pass during prefill (default 512); caches are evaluated between chunks. */
  prefillChunk?: number;
  /**
   * Pipelined decode (see the module comment): true always speculates on the argmax, false never,
   * "auto" (default) speculates while the fed tokens keep matching the argmax (greedy decoding).
   */
  pipeline?: boolean | "auto";
  /** MLX device (default: MLX's default, the GPU when Metal is available). */
  device?: "cpu" | "gpu";
  /** How `hf:` references are resolved (cache folder, downloads). */
  resolve?: ResolveOptions;
  onProgress?: (p: BuildProgress) => void;
  signal?: AbortSignal;
}

/** Used while another prefill/decode of the same model is still running. */
export class ModelBusyError extends RuntimeMlxError {
  constructor(what: string) {
    super("E_MODEL_BUSY", `${what}: another prefill/decode on this model has not finished; await it first`);
  }
}

interface Speculation {
  /** Device-side argmax of the previous logits: the token this step was built for. */
  readonly token: MxArray;
  readonly logits: MxArray;
  readonly argmax: MxArray;
  readonly gdn: (GdnState | undefined)[];
  readonly done: Promise<void>;
}

interface StepArrays {
  /** [1, 1, V] float32 */
  readonly logits: MxArray;
  /** [1, 1] argmax of logits */
  readonly argmax: MxArray;
  readonly gdn: (GdnState | undefined)[];
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** Resolves with `p`, or rejects as soon as `signal` fires (the work itself runs on). */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** An MlxQwen35 state: handles to its GDN states and KV buffers (MLX arrays are values: no copy). */
class MlxSnapshot implements StateSnapshot {
  private held: { gdn: (GdnState | undefined)[]; kv: (KvSnapshot | undefined)[] } | undefined;
  readonly bytes: number;
  constructor(
    readonly owner: MlxQwen35,
    readonly position: number,
    gdn: (GdnState | undefined)[],
    kv: (KvSnapshot | undefined)[],
  ) {
    this.held = { gdn, kv };
    this.bytes = this.arrays().reduce((n, a) => n + a.nbytes, 0);
  }
  /** What it holds (undefined once disposed). */
  get state() {
    return this.held;
  }
  arrays(): MxArray[] {
    if (!this.held) return [];
    return [...this.held.gdn.flatMap(gdnStateArrays), ...this.held.kv.flatMap((k) => k?.arrays ?? [])];
  }
  dispose(): void {
    mx.dispose(this.arrays());
    this.held = undefined;
  }
}

const gdnHandle = (s: GdnState | undefined): GdnState | undefined =>
  s ? { conv: handle(s.conv), recurrent: handle(s.recurrent) } : undefined;

/** A loaded Qwen3.5 model with its per-sequence state. */
export class MlxQwen35 implements StepModel, AsyncDisposable {
  readonly outputKind = "logits" as const;
  readonly contextLength: number;
  /** Which layout the checkpoint was in. */
  readonly format: CheckpointFormat;
  readonly dtype: Dtype;
  /** The quantization the weights carry (at load, or stored), if any. */
  readonly quantization: { bits: number; groupSize: number } | undefined;

  private readonly kv: (KvCache | undefined)[];
  private gdn: (GdnState | undefined)[];
  private pos = 0;
  private spec: Speculation | undefined;
  /** The argmax of the logits last returned (for pipeline "auto"). */
  private lastArgmax: number | undefined;
  private speculateNext = true;
  private steps = 0;
  private busy = false;
  private disposedFlag = false;

  constructor(
    readonly config: Qwen35Config,
    readonly weights: Qwen35Weights,
    readonly dir: string,
    private readonly options: {
      format: CheckpointFormat;
      dtype: Dtype;
      quantization: { bits: number; groupSize: number } | undefined;
      contextLength: number;
      kvStep: number;
      preallocate: boolean;
      prefillChunk: number;
      pipeline: boolean | "auto";
    },
  ) {
    this.format = options.format;
    this.dtype = options.dtype;
    this.quantization = options.quantization;
    this.contextLength = options.contextLength;
    this.kv = config.layerTypes.map((t) =>
      t === "full_attention"
        ? new KvCache({
            step: options.kvStep,
            preallocate: options.preallocate ? options.contextLength : undefined,
          })
        : undefined,
    );
    this.gdn = config.layerTypes.map(() => undefined);
  }

  /** Tokens consumed since the last reset(). */
  get position(): number {
    return this.pos;
  }

  get disposed(): boolean {
    return this.disposedFlag;
  }

  /** Bytes held by the weights and by the current sequence state (KV caches + GDN states). */
  memory(): { weightsBytes: number; stateBytes: number } {
    this.check("memory");
    const weightsBytes = weightsArrays(this.weights).reduce((n, a) => n + a.nbytes, 0);
    const gdn = this.gdn.flatMap(gdnStateArrays).reduce((n, a) => n + a.nbytes, 0);
    return { weightsBytes, stateBytes: gdn + this.kv.reduce((n, c) => n + (c?.bytes ?? 0), 0) };
  }

  reset(): void {
    this.check("reset");
    if (this.busy) throw new ModelBusyError("reset");
    this.dropSpeculation();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = this.gdn.map(() => undefined);
    for (const c of this.kv) c?.reset();
    this.pos = 0;
    this.lastArgmax = undefined;
    this.speculateNext = true;
  }

  /**
   * The sequence state at this position: new handles to the GDN states and KV buffers, evaluated
   * (a pending speculative step is left as it is; what it wrote past the position is never read).
   */
  async snapshot(): Promise<StateSnapshot> {
    this.check("snapshot");
    if (this.busy) throw new ModelBusyError("snapshot");
    const snap = new MlxSnapshot(
      this,
      this.pos,
      this.gdn.map(gdnHandle),
      this.kv.map((c) => c?.snapshot(this.pos)),
    );
    await mx.asyncEval(snap.arrays());
    return snap;
  }

  /** Puts a snapshot of this model back; the next token continues from its position. */
  async restore(snapshot: StateSnapshot): Promise<void> {
    this.check("restore");
    if (this.busy) throw new ModelBusyError("restore");
    if (!(snapshot instanceof MlxSnapshot) || snapshot.owner !== this)
      throw new SnapshotMismatchError("this snapshot was not taken from this model");
    const held = snapshot.state;
    if (!held) throw new SnapshotMismatchError("this snapshot was disposed");
    this.dropSpeculation();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = held.gdn.map(gdnHandle);
    for (const [i, c] of this.kv.entries()) {
      const k = held.kv[i];
      if (c && k) c.restore(k);
    }
    this.pos = snapshot.position;
    this.lastArgmax = undefined;
    this.speculateNext = true;
  }

  /** Consumes `ids` and returns the logits of the last one (float32, vocabSize). */
  async prefill(ids: Int32Array | number[], opts?: StepOptions): Promise<StepOutput> {
    const rows = await this.run("prefill", ids, "last", opts?.signal);
    return { logits: rows };
  }

  /**
   * Consumes `ids` and returns the logits of every one of them, row after row (float32, ids.length ×
   * vocabSize): for scoring and parity checks. Not pipelined.
   */
  async prefillAll(ids: Int32Array | number[], opts?: StepOptions): Promise<Float32Array> {
    return this.run("prefillAll", ids, "all", opts?.signal);
  }

  /** Consumes one token and returns its logits. */
  async decode(id: number, opts?: StepOptions): Promise<StepOutput> {
    this.check("decode");
    if (this.busy) throw new ModelBusyError("decode");
    this.checkIds([id], "decode");
    opts?.signal?.throwIfAborted();
    if (this.pos + 1 > this.contextLength) throw new ContextOverflowError(this.pos + 1, this.contextLength);
    this.busy = true;
    try {
      const hit = this.lastArgmax === id;
      if (this.options.pipeline === "auto") this.speculateNext = hit;
      let step: StepArrays;
      let done: Promise<void>;
      const spec = this.spec;
      this.spec = undefined;
      if (spec && hit) {
        // The step for this token is already scheduled: adopt it.
        this.commit(spec.gdn);
        mx.dispose(spec.token);
        step = spec;
        done = spec.done;
      } else {
        if (spec) this.discard(spec);
        step = this.step(mx.array(Int32Array.of(id), [1, 1]));
        done = mx.asyncEval([step.logits, step.argmax]);
      }
      return { logits: await this.finishStep(step, done, opts?.signal) };
    } finally {
      this.busy = false;
    }
  }

  dispose(): void {
    if (this.disposedFlag) return;
    this.dropSpeculation();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    for (const c of this.kv) c?.reset();
    mx.dispose(weightsArrays(this.weights));
    this.disposedFlag = true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }

  // --- internals

  private check(what: string): void {
    if (this.disposedFlag) throw new ModelDisposedError(what);
  }

  private checkIds(ids: ArrayLike<number>, what: string): void {
    const V = this.config.vocabSize;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!Number.isInteger(id) || id < 0 || id >= V) {
        throw new InvalidArgumentError(
          `${what}: token id ${id} at index ${i} is not an integer in [0, ${V})`,
        );
      }
    }
  }

  private async run(
    what: string,
    input: Int32Array | number[],
    logits: "last" | "all",
    signal?: AbortSignal,
  ) {
    this.check(what);
    if (this.busy) throw new ModelBusyError(what);
    const ids = Int32Array.from(input);
    if (ids.length === 0) throw new InvalidArgumentError(`${what}: no token ids`);
    this.checkIds(ids, what);
    signal?.throwIfAborted();
    if (this.pos + ids.length > this.contextLength) {
      throw new ContextOverflowError(this.pos + ids.length, this.contextLength);
    }
    this.busy = true;
    try {
      this.dropSpeculation();
      const chunk = this.options.prefillChunk;
      const rows: Float32Array[] = [];
      for (let start = 0; start < ids.length; start += chunk) {
        const part = ids.subarray(start, Math.min(ids.length, start + chunk));
        const last = start + chunk >= ids.length;
        const idsArray = mx.array(part, [1, part.length]);
        if (logits === "all" || last) {
          const { out, gdn } = mx.tidy(() => {
            const r = forward(
              this.config,
              this.weights,
              idsArray,
              { kv: this.kv, gdn: this.gdn },
              { logits },
            );
            const f32 = mx.astype(r.logits!, "float32");
            return {
              out: logits === "last" ? this.withArgmax(f32) : { logits: f32, argmax: undefined },
              gdn: r.gdn,
            };
          });
          idsArray.dispose();
          this.commit(gdn, part.length);
          if (logits === "all") {
            await raceAbort(mx.asyncEval(out.logits), signal);
            rows.push(out.logits.toTypedArray() as Float32Array);
            out.logits.dispose();
          } else {
            const step: StepArrays = { logits: out.logits, argmax: out.argmax!, gdn };
            rows.push(await this.finishStep(step, mx.asyncEval([step.logits, step.argmax]), signal, true));
          }
        } else {
          const { gdn } = mx.tidy(() =>
            forward(this.config, this.weights, idsArray, { kv: this.kv, gdn: this.gdn }, { logits: "none" }),
          );
          idsArray.dispose();
          this.commit(gdn, part.length);
          await raceAbort(mx.asyncEval(this.stateArrays()), signal);
          mx.clearCache();
        }
      }
      if (rows.length === 1) return rows[0];
      const out = new Float32Array(rows.reduce((n, r) => n + r.length, 0));
      let at = 0;
      for (const r of rows) {
        out.set(r, at);
        at += r.length;
      }
      return out;
    } finally {
      this.busy = false;
    }
  }

  private withArgmax(logits: MxArray): { logits: MxArray; argmax: MxArray } {
    return { logits, argmax: mx.argmax(logits, -1) };
  }

  /** Builds one decode step for `token` ([1, 1] int) from the committed state; commits its state. */
  private step(token: MxArray): StepArrays {
    const r = mx.tidy(() => {
      const f = forward(this.config, this.weights, token, { kv: this.kv, gdn: this.gdn }, { logits: "last" });
      return { ...this.withArgmax(mx.astype(f.logits!, "float32")), gdn: f.gdn };
    });
    token.dispose();
    this.commit(r.gdn, 1);
    return r;
  }

  /**
   * Waits for a step, schedules the speculative next one when the pipeline is on, then reads the
   * logits (the only host copy of a step).
   */
  private async finishStep(
    step: StepArrays,
    done: Promise<void>,
    signal: AbortSignal | undefined,
    fromPrefill = false,
  ): Promise<Float32Array> {
    const pipeline = this.options.pipeline;
    if (pipeline === true || (pipeline === "auto" && (fromPrefill || this.speculateNext)))
      this.speculate(step);
    try {
      try {
        await raceAbort(done, signal);
      } catch (error) {
        // The speculated token is unknown now: never adopt that step.
        this.dropSpeculation();
        this.lastArgmax = undefined;
        throw error;
      }
      const logits = step.logits.toTypedArray() as Float32Array;
      this.lastArgmax = step.argmax.item() as number;
      return logits;
    } finally {
      mx.dispose([step.logits, step.argmax]);
      if (++this.steps % 256 === 0) mx.clearCache();
    }
  }

  /** Builds and schedules the step for argmax(step.logits) on top of the state `step` left. */
  private speculate(step: StepArrays): void {
    if (this.pos + 1 > this.contextLength) return;
    const token = mx.keep(mx.reshape(step.argmax, [1, 1]));
    const r = mx.tidy(() => {
      const f = forward(this.config, this.weights, token, { kv: this.kv, gdn: this.gdn }, { logits: "last" });
      return { ...this.withArgmax(mx.astype(f.logits!, "float32")), gdn: f.gdn };
    });
    mx.keep(r);
    const done = mx.asyncEval([r.logits, r.argmax]);
    done.catch(() => {}); // a failure surfaces when (if) the step is adopted
    this.spec = { token, ...r, done };
  }

  /** Drops a speculative step: its GDN states go, the KV caches rewind to the committed position. */
  private discard(spec: Speculation): void {
    mx.dispose([spec.token, spec.logits, spec.argmax, ...spec.gdn.flatMap(gdnStateArrays)]);
    for (const c of this.kv) if (c) c.offset = this.pos;
  }

  private dropSpeculation(): void {
    if (this.spec) this.discard(this.spec);
    this.spec = undefined;
  }

  /** Makes `gdn` the current GDN state (releasing the previous one) and advances the position. */
  private commit(gdn: (GdnState | undefined)[], tokens = 1): void {
    mx.keep(gdn);
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = gdn;
    this.pos += tokens;
  }

  private stateArrays(): MxArray[] {
    return [...this.gdn.flatMap(gdnStateArrays), ...this.kv.flatMap((c) => c?.arrays() ?? [])];
  }
}

const DTYPE_OF_CONFIG: Record<string, Dtype> = {
  bfloat16: "bfloat16",
  float16: "float16",
  float32: "float32",
};

/**
 * Loads a Qwen3.5 model (dense or MoE) from a folder or `hf:owner/name[@revision]`: Hugging Face
 * safetensors or an MLX-format checkpoint (detected). See LoadMlxModelOptions.
 */
export async function loadMlxModel(ref: string, opts: LoadMlxModelOptions = {}): Promise<MlxQwen35> {
  const dir = await resolveModelRef(ref, { ...opts.resolve, signal: opts.signal ?? opts.resolve?.signal });
  const config = await readQwen35Config(join(dir, "config.json"));
  const dtype = opts.dtype ? toDtype(opts.dtype) : (DTYPE_OF_CONFIG[config.dtype ?? ""] ?? "float32");
  if (!["float32", "bfloat16", "float16"].includes(dtype)) {
    throw new InvalidArgumentError(
      `loadMlxModel: dtype must be float32, bfloat16 or float16, got ${opts.dtype}`,
    );
  }
  if (opts.bits !== undefined && opts.bits !== 4 && opts.bits !== 8) {
    throw new InvalidArgumentError(`loadMlxModel: bits must be 4 or 8, got ${opts.bits}`);
  }
  const groupSize = opts.groupSize ?? 64;
  const contextLength = opts.contextLength ?? config.maxPositionEmbeddings ?? 262144;
  if (!Number.isInteger(contextLength) || contextLength < 1) {
    throw new InvalidArgumentError(
      `loadMlxModel: contextLength must be a positive integer, got ${contextLength}`,
    );
  }
  const maxPositions = config.maxPositionEmbeddings;
  if (maxPositions !== undefined && contextLength > maxPositions) {
    // positions past what the model was trained for give garbage, not an error: refuse up front
    throw new InvalidArgumentError(
      `loadMlxModel: contextLength ${contextLength} exceeds the model's max_position_embeddings (${maxPositions})`,
    );
  }
  const prefillChunk = opts.prefillChunk ?? 512;
  if (!Number.isInteger(prefillChunk) || prefillChunk < 1) {
    throw new InvalidArgumentError(
      `loadMlxModel: prefillChunk must be a positive integer, got ${prefillChunk}`,
    );
  }
  if (opts.device) mx.setDefaultDevice(opts.device);

  const view = openCheckpoint(dir, config);
  try {
    if (view.format === "mlx") validateMlx(config, view, dir);
    const quantize = opts.bits ? { bits: opts.bits, groupSize } : undefined;
    const weights = await buildWeights(config, view, { dtype, quantize }, opts);
    // Layer 0 is always a Gated DeltaNet layer; its output projection shows the quantization in use.
    const mixer = weights.layers[0]?.mixer;
    const probe = mixer?.kind === "gdn" ? mixer.w.out : undefined;
    const quantization =
      probe?.kind === "quantized" ? { bits: probe.bits, groupSize: probe.groupSize } : undefined;
    return new MlxQwen35(config, weights, dir, {
      format: view.format,
      dtype,
      quantization,
      contextLength,
      kvStep: opts.kvCache?.step ?? 256,
      preallocate: opts.kvCache?.preallocate ?? false,
      prefillChunk,
      pipeline: opts.pipeline ?? "auto",
    });
  } finally {
    view.dispose();
  }
}
