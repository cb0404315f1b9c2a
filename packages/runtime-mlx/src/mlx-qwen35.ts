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
 *
 * Speculative decoding with the checkpoint's MTP head (generate's `speculative: "mtp"`): the head's
 * own KV cache is filled on every prefill/decode step from the main model's post-norm hidden
 * states (pair (h_t, x_{t+1}) at slot t, so it always holds slots 0..position-2 and the last hidden
 * state waits for its next token); `draft` runs the head recursively from there, `verify` scores
 * 1 + γ ids in one forward that returns every row's GDN state, and `accept(n)` commits row n-1's
 * states — per-row states rather than re-running the accepted rows, because a second forward
 * would read all the weights again (the cost decode is bound by) while the per-row states are
 * only the small recurrent/conv tensors — rewinds the KV caches to the accepted length and writes
 * the head's slots for the accepted ids from the main model's hidden states (overwriting its drafts).
 */

import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { SpeculativeStepModel, StateSnapshot, StepOptions, StepOutput } from "@anemll-qwen35/generate";
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
import { mtpForward } from "./qwen35/mtp.js";
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
  /**
   * Load the checkpoint's multi-token-prediction head (`mtp.*`, a complete one, dense models, HF
   * format) for `speculative: "mtp"` (default true; false leaves it out and saves its memory and
   * the small cost of filling its cache on every step).
   */
  mtp?: boolean;
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
  /** With the MTP head: the last row's post-norm hidden state [1, 1, D], to pair with the next token. */
  readonly pending?: MxArray;
  /** The head's cache buffers this step writes, to evaluate with it (owned by the cache). */
  readonly head: MxArray[];
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

/** What an MlxSnapshot holds: the GDN states, KV buffers and the MTP head's cache and pending row. */
interface HeldState {
  gdn: (GdnState | undefined)[];
  kv: (KvSnapshot | undefined)[];
  mtpKv?: KvSnapshot;
  pending?: MxArray;
}

/** An MlxQwen35 state: handles to its GDN states and KV buffers (MLX arrays are values: no copy). */
class MlxSnapshot implements StateSnapshot {
  private held: HeldState | undefined;
  readonly bytes: number;
  constructor(
    readonly owner: MlxQwen35,
    readonly position: number,
    held: HeldState,
  ) {
    this.held = held;
    this.bytes = this.arrays().reduce((n, a) => n + a.nbytes, 0);
  }
  /** What it holds (undefined once disposed). */
  get state() {
    return this.held;
  }
  arrays(): MxArray[] {
    const h = this.held;
    if (!h) return [];
    return [
      ...h.gdn.flatMap(gdnStateArrays),
      ...h.kv.flatMap((k) => k?.arrays ?? []),
      ...(h.mtpKv?.arrays ?? []),
      ...(h.pending ? [h.pending] : []),
    ];
  }
  dispose(): void {
    mx.dispose(this.arrays());
    this.held = undefined;
  }
}

const gdnHandle = (s: GdnState | undefined): GdnState | undefined =>
  s ? { conv: handle(s.conv), recurrent: handle(s.recurrent) } : undefined;

/** The most drafts one verify takes on MLX (no conversion fixes k here; generate's gamma ≤ this). */
const MLX_MAX_DRAFT_TOKENS = 8;

/** A verify's provisional results, until accept() or any other step drops them. */
interface Verified {
  readonly ids: readonly number[];
  /** [1, T, D] post-norm hidden rows. */
  readonly normed: MxArray;
  /** Per layer, the GDN state after each row. */
  readonly rows: (GdnState[] | undefined)[];
}

/** A loaded Qwen3.5 model with its per-sequence state. */
export class MlxQwen35 implements SpeculativeStepModel, AsyncDisposable {
  readonly outputKind = "logits" as const;
  readonly contextLength: number;
  /** Which layout the checkpoint was in. */
  readonly format: CheckpointFormat;
  readonly dtype: Dtype;
  /** The quantization the weights carry (at load, or stored), if any. */
  readonly quantization: { bits: number; groupSize: number } | undefined;

  private readonly kv: (KvCache | undefined)[];
  private gdn: (GdnState | undefined)[];
  /** The MTP head's KV cache (slots 0..pos-2) and the last row's hidden state, when loaded. */
  private readonly mtpKv: KvCache | undefined;
  private pending: MxArray | undefined;
  private verified: Verified | undefined;
  /** The most drafts one verify takes: 0 without an MTP head (or split across ranks). */
  readonly maxDraftTokens: number;
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
    const head = weights.mtp !== undefined && !options.ranks;
    this.mtpKv = head
      ? new KvCache({
          step: options.kvStep,
          preallocate: options.preallocate ? options.contextLength : undefined,
        })
      : undefined;
    this.maxDraftTokens = head ? MLX_MAX_DRAFT_TOKENS : 0;
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
    const head = (this.mtpKv?.bytes ?? 0) + (this.pending?.nbytes ?? 0);
    return { weightsBytes, stateBytes: gdn + head + this.kv.reduce((n, c) => n + (c?.bytes ?? 0), 0) };
  }

  reset(): void {
    this.check("reset", true);
    if (this.busy) throw new ModelBusyError("reset");
    this.dropSpeculation();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = this.gdn.map(() => undefined);
    for (const c of this.kv) c?.reset();
    this.mtpKv?.reset();
    this.pending?.dispose();
    this.pending = undefined;
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
    const snap = new MlxSnapshot(this, this.pos, {
      gdn: this.gdn.map(gdnHandle),
      kv: this.kv.map((c) => c?.snapshot(this.pos)),
      mtpKv: this.mtpKv?.snapshot(this.headSlots),
      pending: this.pending && handle(this.pending),
    });
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
    if (this.mtpKv && held.mtpKv) this.mtpKv.restore(held.mtpKv);
    this.pending?.dispose();
    this.pending = held.pending && handle(held.pending);
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
      this.dropVerified();
      const hit = this.lastArgmax === id;
      if (this.options.pipeline === "auto") this.speculateNext = hit;
      let step: StepArrays;
      let done: Promise<void>;
      const spec = this.spec;
      this.spec = undefined;
      if (spec && hit) {
        // The step for this token is already scheduled: adopt it.
        this.commit(spec.gdn, 1, spec.pending);
        mx.dispose(spec.token);
        step = spec;
        done = spec.done;
      } else {
        if (spec) this.discard(spec);
        step = this.step(mx.array(Int32Array.of(id), [1, 1]));
        done = this.evaluate([step.logits, step.argmax, ...step.sent, ...step.head], "decode");
      }
      return { logits: await this.finishStep(step, done, opts?.signal) };
    } finally {
      this.busy = false;
    }
  }

  /**
   * Drafts `gamma` tokens after `next` with the MTP head, recursively (SpeculativeStepModel): step 0
   * pairs the last row's hidden state with `next`, step i > 0 the head's own output with draft
   * i-1, at the following slots. The drafts' cache slots are provisional (accept() rewrites them
   * from the main model); the main model's state does not move.
   */
  async draft(
    next: number,
    gamma: number,
    pick: (out: StepOutput, i: number) => number,
    opts?: StepOptions,
  ): Promise<{ ids: number[]; outputs: StepOutput[] }> {
    this.checkSpeculative("draft");
    if (!Number.isInteger(gamma) || gamma < 1 || gamma > this.maxDraftTokens)
      throw new InvalidArgumentError(
        `draft: gamma must be an integer from 1 to ${this.maxDraftTokens}, got ${gamma}`,
      );
    this.checkIds([next], "draft");
    if (!this.pending)
      throw new InvalidArgumentError("draft: nothing consumed yet; prefill the prompt first");
    opts?.signal?.throwIfAborted();
    this.busy = true;
    const cache = this.mtpKv!;
    try {
      this.dropSpeculation();
      const base = this.headSlots;
      cache.offset = base;
      const ids: number[] = [];
      const outputs: StepOutput[] = [];
      let hidden = this.pending;
      let token = next;
      try {
        for (let i = 0; i < gamma; i++) {
          const r = mx.tidy(() => {
            const t = mx.array(Int32Array.of(token), [1, 1]);
            const h = mtpForward(this.config, this.weights, hidden, t, cache, true)!;
            return { out: h.out, logits: mx.astype(h.logits, "float32") };
          });
          if (hidden !== this.pending) hidden.dispose();
          hidden = r.out;
          try {
            await raceAbort(mx.asyncEval([r.logits, r.out, ...cache.arrays()]), opts?.signal);
            const out = { logits: r.logits.toTypedArray() as Float32Array };
            outputs.push(out);
            token = pick(out, i);
          } finally {
            r.logits.dispose();
          }
          this.checkIds([token], "draft: pick");
          ids.push(token);
        }
      } finally {
        if (hidden !== this.pending) hidden.dispose();
        cache.offset = base;
      }
      return { ids, outputs };
    } finally {
      this.busy = false;
    }
  }

  /**
   * Scores `ids` ([next, ...drafts]) in one forward from the committed state and returns every
   * row's logits (SpeculativeStepModel). Provisional: the KV rows written stay unread and the
   * per-row GDN states wait for accept(); any other step drops them.
   */
  async verify(ids: number[], opts?: StepOptions): Promise<StepOutput[]> {
    this.checkSpeculative("verify");
    const T = ids.length;
    if (T < 1 || T > this.maxDraftTokens + 1)
      throw new InvalidArgumentError(`verify: takes 1 to ${this.maxDraftTokens + 1} ids, got ${T}`);
    this.checkIds(ids, "verify");
    opts?.signal?.throwIfAborted();
    if (this.pos + T > this.contextLength) throw new ContextOverflowError(this.pos + T, this.contextLength);
    this.busy = true;
    try {
      this.dropSpeculation();
      const r = mx.tidy(() => {
        const input = mx.array(Int32Array.from(ids), [1, T]);
        const f = forward(
          this.config,
          this.weights,
          input,
          { kv: this.kv, gdn: this.gdn },
          { logits: "all", normed: true, perRow: true },
        );
        // only the per-row states leave the scope (the last row's are the final ones)
        return { logits: mx.astype(f.logits!, "float32"), normed: f.normed!, rows: f.gdnRows! };
      });
      // the cache rows past the committed position are provisional: nothing reads them until accept
      for (const c of this.kv) if (c) c.offset = this.pos;
      const verified: Verified = { ids: ids.slice(), normed: r.normed, rows: r.rows };
      try {
        const states = r.rows.flatMap((rs) => rs?.flatMap(gdnStateArrays) ?? []);
        await raceAbort(
          mx.asyncEval([r.logits, r.normed, ...states, ...this.kv.flatMap((c) => c?.arrays() ?? [])]),
          opts?.signal,
        );
        const flat = r.logits.toTypedArray() as Float32Array;
        const V = flat.length / T;
        this.verified = verified;
        return ids.map((_, j) => ({ logits: flat.subarray(j * V, (j + 1) * V) }));
      } catch (error) {
        mx.dispose([r.normed, ...r.rows.flatMap((rs) => rs?.flatMap(gdnStateArrays) ?? [])]);
        throw error;
      } finally {
        r.logits.dispose();
      }
    } finally {
      this.busy = false;
    }
  }

  /**
   * Commits the first `n` ids of the last verify (SpeculativeStepModel): row n-1's GDN states, the
   * KV caches at position + n, and the head's slots for those ids from the main model's rows.
   */
  async accept(n: number, opts?: StepOptions): Promise<void> {
    this.checkSpeculative("accept");
    const v = this.verified;
    if (!v) throw new InvalidArgumentError("accept: no verify to accept (or another step came in between)");
    if (!Number.isInteger(n) || n < 1 || n > v.ids.length)
      throw new InvalidArgumentError(`accept: n must be an integer from 1 to ${v.ids.length}, got ${n}`);
    this.busy = true;
    try {
      this.verified = undefined;
      const gdn = v.rows.map((rs) => rs?.[n - 1]);
      mx.dispose(v.rows.flatMap((rs) => rs?.filter((_, j) => j !== n - 1).flatMap(gdnStateArrays) ?? []));
      const head = mx.tidy(() => {
        const D = v.normed.shape[2];
        const rows = mx.slice(v.normed, [0, 0, 0], [1, n, D]);
        const ids = mx.array(Int32Array.from(v.ids.slice(0, n)), [1, n]);
        return this.fillHead(rows, ids);
      });
      v.normed.dispose();
      for (const c of this.kv) if (c) c.offset = this.pos + n;
      this.commit(gdn, n, head.pending);
      this.lastArgmax = undefined;
      await raceAbort(mx.asyncEval([...head.arrays, head.pending]), opts?.signal);
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
    this.mtpKv?.reset();
    this.pending?.dispose();
    this.pending = undefined;
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

  private checkSpeculative(what: string): void {
    this.check(what, true);
    if (this.busy) throw new ModelBusyError(what);
    if (this.maxDraftTokens === 0) {
      throw new InvalidArgumentError(
        `${what}: this model has no MTP head (${this.options.ranks ? "split across ranks" : "none in the checkpoint, or loaded with mtp: false"})`,
      );
    }
  }

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
          : {
              ...forward(this.config, this.weights, ids, state, { logits, normed: this.mtpKv !== undefined }),
              sent: [] as MxArray[],
            };
        const f32 = r.logits && mx.astype(r.logits, "float32");
        const normed = (r as { normed?: MxArray }).normed;
        const head = normed ? this.fillHead(normed, ids) : undefined;
        return {
          logits: f32,
          argmax: f32 && logits === "last" ? mx.argmax(f32, -1) : undefined,
          gdn: r.gdn,
          sent: r.sent,
          pending: head?.pending,
          head: head?.arrays ?? [],
        };
      });
    return ranks ? ranks.group.run(build) : build();
  }

  /** Slots the head's cache holds: one per consumed position whose next token is known. */
  private get headSlots(): number {
    return Math.max(0, this.pos - 1);
  }

  /**
   * Writes the head's cache slots for rows just consumed (`normed` [1, T, D] after the final norm,
   * `ids` [1, T] the tokens): pairs (pending, ids[0]), (row 0, ids[1]) … at slot position-1 …;
   * returns the new pending row and the cache buffers to evaluate.
   */
  private fillHead(normed: MxArray, ids: MxArray): { pending: MxArray; arrays: MxArray[] } {
    const cache = this.mtpKv!;
    const T = normed.shape[1];
    const D = normed.shape[2];
    cache.offset = this.headSlots;
    const rows = T > 1 ? mx.slice(normed, [0, 0, 0], [1, T - 1, D]) : undefined;
    const hidden = this.pending ? (rows ? mx.concatenate([this.pending, rows], 1) : this.pending) : rows;
    if (hidden) {
      const next = this.pending ? ids : mx.slice(ids, [0, 1], [1, T]);
      mtpForward(this.config, this.weights, hidden, next, cache, false);
    }
    return { pending: mx.slice(normed, [0, T - 1, 0], [1, T, D]), arrays: cache.arrays() };
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
          this.commit(out.gdn, part.length, out.pending);
          if (logits === "all") {
            try {
              await raceAbort(this.evaluate([out.logits!, ...out.sent, ...out.head], what), signal);
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
              head: out.head,
            };
            const done = this.evaluate([step.logits, step.argmax, ...step.sent, ...step.head], what);
            rows.push(await this.finishStep(step, done, signal, true));
          }
        } else {
          const out = this.forwardStep(idsArray, "none");
          idsArray.dispose();
          this.commit(out.gdn, part.length, out.pending);
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
    const r = this.lastStep(token);
    token.dispose();
    this.commit(r.gdn, 1, r.pending);
    return r;
  }

  /** forwardStep for one token with the last row's logits, which (with their argmax) it then has. */
  private lastStep(token: MxArray): StepArrays {
    const r = this.forwardStep(token, "last");
    return { ...r, logits: r.logits!, argmax: r.argmax! };
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
    const spec = mx.keep(this.lastStep(token));
    const done = this.evaluate([spec.logits, spec.argmax, ...spec.sent, ...spec.head], "decode");
    done.catch(() => {}); // a failure surfaces when (if) the step is adopted
    this.spec = { token, ...spec, done };
  }

  /** Drops a speculative step: its GDN states go, the KV caches rewind to the committed position. */
  private discard(spec: Speculation): void {
    mx.dispose([spec.token, spec.logits, spec.argmax, ...spec.sent, ...spec.gdn.flatMap(gdnStateArrays)]);
    spec.pending?.dispose();
    for (const c of this.kv) if (c) c.offset = this.pos;
    if (this.mtpKv) this.mtpKv.offset = this.headSlots;
  }

  /** Drops a pending pipelined step and a verify nobody accepted (its KV rows are never read). */
  private dropSpeculation(): void {
    if (this.spec) this.discard(this.spec);
    this.spec = undefined;
    this.dropVerified();
  }

  /** Forgets the last verify: once the state moved another way, its rows no longer apply. */
  private dropVerified(): void {
    const v = this.verified;
    this.verified = undefined;
    if (v) mx.dispose([v.normed, ...v.rows.flatMap((r) => r?.flatMap(gdnStateArrays) ?? [])]);
  }

  /**
   * Makes `gdn` the current GDN state (releasing the previous one), `pending` the head's waiting
   * row, and advances the position.
   */
  private commit(gdn: (GdnState | undefined)[], tokens = 1, pending?: MxArray): void {
    mx.keep(gdn);
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = gdn;
    if (pending) {
      mx.keep(pending);
      this.pending?.dispose();
      this.pending = pending;
    }
    this.pos += tokens;
  }

  private stateArrays(): MxArray[] {
    return [
      ...this.gdn.flatMap(gdnStateArrays),
      ...this.kv.flatMap((c) => c?.arrays() ?? []),
      ...(this.mtpKv?.arrays() ?? []),
      ...(this.pending ? [this.pending] : []),
    ];
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
    const weights = await buildWeights(
      config,
      view,
      { dtype, quantize: r.quantize, mtp: opts.mtp ?? true },
      opts,
      layers,
    );
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
