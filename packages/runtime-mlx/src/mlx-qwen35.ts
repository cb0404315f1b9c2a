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
import {
  ContextOverflowError,
  type ModelUnavailableError,
  SnapshotMismatchError,
} from "@anemll-qwen35/generate";
import {
  type Qwen35Config,
  type ResolveOptions,
  readQwen35Config,
  resolveModelRef,
} from "@anemll-qwen35/ir/checkpoint";
import { type DtypeLike, toDtype } from "./array.js";
import { DEFAULT_JOIN_TIMEOUT_MS, type JoinOptions, joinGroup } from "./distributed/group.js";
import { PipelineHead, type PipelineOptions } from "./distributed/pipeline.js";
import type { LayerRange } from "./distributed/split.js";
import { planStages, type StageRequest } from "./distributed/stages.js";
import { DistributedError, ModelDisposedError, RuntimeMlxError } from "./errors.js";
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
   * "auto" (default) speculates while the fed tokens keep matching the argmax (greedy decoding). A
   * model split across ranks never speculates (see loadMlxModel).
   */
  pipeline?: boolean | "auto";
  /** MLX device (default: MLX's default, the GPU when Metal is available). */
  device?: "cpu" | "gpu";
  /** How `hf:` references are resolved (cache folder, downloads). */
  resolve?: ResolveOptions;
  /**
   * Split the model across the ranks this process was launched with (`anemll-qwen35 launch`, or
   * mlx.launch; MLX's ring backend): pipeline parallel, this process being rank 0. See DistributedOptions.
   */
  distributed?: DistributedOptions;
  onProgress?: (p: BuildProgress) => void;
  signal?: AbortSignal;
}

/** How a model is split across ranks (LoadMlxModelOptions.distributed). */
export interface DistributedOptions extends JoinOptions, PipelineOptions {
  /** Layers per rank, e.g. [6, 9, 9]; default: bytes in proportion to each rank's memory (rank 0 also holds the embedding and head). */
  split?: number[];
  /** How long rank 0 waits for every rank to load its layers (default 15 min). */
  loadTimeoutMs?: number;
}

export const DEFAULT_LOAD_TIMEOUT_MS = 15 * 60_000;

/** Used while another prefill/decode of the same model is still running. */
export class ModelBusyError extends RuntimeMlxError {
  constructor(what: string) {
    super("E_MODEL_BUSY", `${what}: another prefill/decode on this model has not finished; await it first`);
  }
}

interface StepArrays {
  /** [1, 1, V] float32 */
  readonly logits: MxArray;
  /** [1, 1] argmax of logits */
  readonly argmax: MxArray;
  readonly gdn: (GdnState | undefined)[];
  /** Pipelined across ranks: the step's sends, to wait for with it. */
  readonly sent: MxArray[];
}

interface Speculation extends StepArrays {
  /** Device-side argmax of the previous logits: the token this step was built for. */
  readonly token: MxArray;
  readonly done: Promise<void>;
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
      /** Set when the model is split across ranks: this is rank 0, holding the first layers. */
      ranks?: PipelineHead;
    },
  ) {
    this.format = options.format;
    this.dtype = options.dtype;
    this.quantization = options.quantization;
    this.contextLength = options.contextLength;
    this.kv = weights.layers.map((l) =>
      l.mixer.kind === "attention"
        ? new KvCache({
            step: options.kvStep,
            preallocate: options.preallocate ? options.contextLength : undefined,
          })
        : undefined,
    );
    this.gdn = weights.layers.map(() => undefined);
  }

  /** Set once the model cannot run any more (a rank of a split model was lost); calls then throw it. */
  get unavailable(): ModelUnavailableError | undefined {
    return this.options.ranks?.unavailable;
  }

  /** When split across ranks: how many, and the layers each holds. */
  get ranks(): { size: number; layers: readonly LayerRange[] } | undefined {
    const r = this.options.ranks;
    return r ? { size: r.group.size, layers: r.ranges } : undefined;
  }

  /**
   * Split across ranks: sends an empty step around the ring and returns its round trip in ms (the
   * hand-off cost of one decode step, without compute).
   */
  async pingRanks(): Promise<number> {
    this.check("pingRanks");
    if (!this.options.ranks)
      throw new InvalidArgumentError("pingRanks: this model is not split across ranks");
    if (this.busy) throw new ModelBusyError("pingRanks");
    this.busy = true;
    try {
      this.dropSpeculation();
      return await this.options.ranks.ping();
    } finally {
      this.busy = false;
    }
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
    this.check("reset", true);
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
  /** A model split across ranks keeps most of its state on the other ranks: no snapshots. */
  get snapshots(): boolean {
    return !this.options.ranks;
  }

  async snapshot(): Promise<StateSnapshot> {
    this.check("snapshot");
    if (this.busy) throw new ModelBusyError("snapshot");
    if (this.options.ranks)
      throw new InvalidArgumentError(
        "a model split across ranks cannot snapshot its state (the other ranks hold it)",
      );
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
    this.check("decode", true);
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
        done = this.evaluate([step.logits, step.argmax, ...step.sent], "decode");
      }
      return { logits: await this.finishStep(step, done, opts?.signal) };
    } finally {
      this.busy = false;
    }
  }

  /** Releases the weights and state; split across ranks, also tells the other ranks to stop. */
  async dispose(): Promise<void> {
    if (this.disposedFlag) return;
    this.disposedFlag = true;
    this.dropSpeculation();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    for (const c of this.kv) c?.reset();
    try {
      await this.options.ranks?.shutdown();
    } finally {
      mx.dispose(weightsArrays(this.weights));
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }

  // --- internals

  private check(what: string, run = false): void {
    if (this.disposedFlag) throw new ModelDisposedError(what);
    const down = this.unavailable;
    if (run && down) throw down;
  }

  /** One step's graph over ids [1, T] from the committed state (on the ranks' streams when split). */
  private forwardStep(ids: MxArray, logits: "none" | "last" | "all") {
    const ranks = this.options.ranks;
    const state = { kv: this.kv, gdn: this.gdn };
    const build = () =>
      mx.tidy(() => {
        const r = ranks
          ? ranks.forward(this.weights, ids, state, this.pos, logits)
          : { ...forward(this.config, this.weights, ids, state, { logits }), sent: [] as MxArray[] };
        const f32 = r.logits && mx.astype(r.logits, "float32");
        return {
          logits: f32,
          argmax: f32 && logits === "last" ? mx.argmax(f32, -1) : undefined,
          gdn: r.gdn,
          sent: r.sent,
        };
      });
    return ranks ? ranks.group.run(build) : build();
  }

  /** Computes `arrays` (split across ranks: under the step timeout; a lost rank makes the model unavailable). */
  private evaluate(arrays: MxArray[], what: string): Promise<void> {
    const ranks = this.options.ranks;
    return ranks ? ranks.wait(arrays, what) : mx.asyncEval(arrays);
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
    this.check(what, true);
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
          const out = this.forwardStep(idsArray, logits);
          idsArray.dispose();
          this.commit(out.gdn, part.length);
          if (logits === "all") {
            try {
              await raceAbort(this.evaluate([out.logits!, ...out.sent], what), signal);
              rows.push(out.logits!.toTypedArray() as Float32Array);
            } finally {
              mx.dispose([out.logits!, ...out.sent]);
            }
          } else {
            const step: StepArrays = {
              logits: out.logits!,
              argmax: out.argmax!,
              gdn: out.gdn,
              sent: out.sent,
            };
            const done = this.evaluate([step.logits, step.argmax, ...step.sent], what);
            rows.push(await this.finishStep(step, done, signal, true));
          }
        } else {
          const out = this.forwardStep(idsArray, "none");
          idsArray.dispose();
          this.commit(out.gdn, part.length);
          try {
            await raceAbort(this.evaluate([...this.stateArrays(), ...out.sent], what), signal);
          } finally {
            mx.dispose(out.sent);
          }
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

  /** Builds one decode step for `token` ([1, 1] int) from the committed state; commits its state. */
  private step(token: MxArray): StepArrays {
    const r = this.forwardStep(token, "last");
    token.dispose();
    this.commit(r.gdn, 1);
    return { logits: r.logits!, argmax: r.argmax!, gdn: r.gdn, sent: r.sent };
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
    try {
      try {
        if (pipeline === true || (pipeline === "auto" && (fromPrefill || this.speculateNext)))
          this.speculate(step);
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
      mx.dispose([step.logits, step.argmax, ...step.sent]);
      if (++this.steps % 256 === 0) mx.clearCache();
    }
  }

  /** Builds and schedules the step for argmax(step.logits) on top of the state `step` left. */
  private speculate(step: StepArrays): void {
    if (this.pos + 1 > this.contextLength) return;
    const ranks = this.options.ranks;
    const reshape = () => mx.keep(mx.reshape(step.argmax, [1, 1]));
    const token = ranks ? ranks.group.run(reshape) : reshape();
    const r = mx.keep(this.forwardStep(token, "last"));
    const spec = { logits: r.logits!, argmax: r.argmax!, gdn: r.gdn, sent: r.sent };
    const done = this.evaluate([spec.logits, spec.argmax, ...spec.sent], "decode");
    done.catch(() => {}); // a failure surfaces when (if) the step is adopted
    this.spec = { token, ...spec, done };
  }

  /** Drops a speculative step: its GDN states go, the KV caches rewind to the committed position. */
  private discard(spec: Speculation): void {
    mx.dispose([spec.token, spec.logits, spec.argmax, ...spec.sent, ...spec.gdn.flatMap(gdnStateArrays)]);
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

/** Load options checked and filled in (shared by loadMlxModel and the other ranks of a split model). */
export interface ResolvedLoad {
  readonly dir: string;
  readonly config: Qwen35Config;
  readonly dtype: Dtype;
  readonly quantize: { bits: 4 | 8; groupSize: number } | undefined;
  readonly contextLength: number;
  readonly prefillChunk: number;
  readonly kv: { step: number; preallocate: boolean };
}

/** Resolves `ref` and checks the options (InvalidArgumentError naming the bad one). */
export async function resolveLoad(ref: string, opts: LoadMlxModelOptions): Promise<ResolvedLoad> {
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
  return {
    dir,
    config,
    dtype,
    quantize: opts.bits ? { bits: opts.bits, groupSize } : undefined,
    contextLength,
    prefillChunk,
    kv: { step: opts.kvCache?.step ?? 256, preallocate: opts.kvCache?.preallocate ?? false },
  };
}

/**
 * Loads a Qwen3.5 model (dense or MoE) from a folder or `hf:owner/name[@revision]`: Hugging Face
 * safetensors or an MLX-format checkpoint (detected). See LoadMlxModelOptions.
 *
 * With `distributed`, this process is rank 0 of a group started by `anemll-qwen35 launch` (or
 * mlx.launch): it joins the group, agrees on the split, loads the first layers with the embedding and
 * head, and resolves once every rank has loaded its layers (the other ranks run runMlxWorker).
 */
export async function loadMlxModel(ref: string, opts: LoadMlxModelOptions = {}): Promise<MlxQwen35> {
  const r = await resolveLoad(ref, opts);
  const { config, dtype, dir } = r;
  const group = opts.distributed ? await joinGroup(opts.distributed) : undefined;
  if (group && group.rank !== 0) {
    throw new DistributedError(
      "E_MLX_DIST_SETUP",
      `this process is rank ${group.rank} of ${group.size}: it holds layers for rank 0, which loads the model; ` +
        "run it with runMlxWorker (the CLI does under `anemll-qwen35 launch -- serve`)",
    );
  }
  const view = await openCheckpoint(dir, config);
  try {
    if (view.format === "mlx") validateMlx(config, view, dir);
    let ranks: PipelineHead | undefined;
    let layers: LayerRange | undefined;
    if (group && group.size > 1) {
      const ranges = await planStages(group, config, stageRequest(r, view.tied, opts.distributed!), {
        timeoutMs: opts.distributed!.timeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS,
      });
      ranks = new PipelineHead(group, config, dtype, ranges, opts.distributed);
      layers = ranges[0];
    }
    const weights = await buildWeights(config, view, { dtype, quantize: r.quantize }, opts, layers);
    // Layer 0 is always a Gated DeltaNet layer; its output projection shows the quantization in use.
    const mixer = weights.layers[0]?.mixer;
    const probe = mixer?.kind === "gdn" ? mixer.w.out : undefined;
    const quantization =
      probe?.kind === "quantized" ? { bits: probe.bits, groupSize: probe.groupSize } : undefined;
    if (ranks) {
      try {
        // every rank has loaded its layers once an empty step comes back around the ring
        await ranks.ping(opts.distributed!.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS);
      } catch (error) {
        mx.dispose(weightsArrays(weights));
        throw error;
      }
    }
    return new MlxQwen35(config, weights, dir, {
      format: view.format,
      dtype,
      quantization,
      contextLength: r.contextLength,
      kvStep: r.kv.step,
      preallocate: r.kv.preallocate,
      prefillChunk: r.prefillChunk,
      // Split across ranks, a step is built only once the one before has come back: MLX's ring
      // never completes an operation queued after it lost a peer, and a speculative step queued in
      // that window would hold the group's stream (and MLX's shared task count) for good.
      pipeline: ranks ? false : (opts.pipeline ?? "auto"),
      ranks,
    });
  } finally {
    view.dispose();
  }
}

/** What every rank of a split model must agree on (see planStages). */
export function stageRequest(r: ResolvedLoad, tied: boolean, d: DistributedOptions): StageRequest {
  return {
    dtype: r.dtype,
    tied,
    bits: r.quantize?.bits,
    groupSize: r.quantize?.groupSize,
    contextLength: r.contextLength,
    split: d.split,
    extra: r.kv,
  };
}
