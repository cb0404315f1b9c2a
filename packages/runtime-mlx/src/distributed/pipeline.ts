/**
 * Pipeline parallel Qwen3.5 over a DistributedGroup: rank r holds layers [start_r, end_r); rank 0
 * also holds the embedding, the final norm and the head, and owns the tokens and sampling.
 *
 * One step goes around the ring: rank 0 sends a header and the hidden state of its layers to rank 1,
 * each rank runs its layers and passes the hidden state on, and the last rank sends the result back
 * to rank 0 (its ring neighbour), which applies the norm and the head. The header tells every rank
 * what comes next: the number of positions T, the position the step starts at (which also rewinds a
 * rank that ran a speculative step rank 0 then dropped), and whether rank 0 wants logits.
 *
 * Rank 0 schedules its sends before it builds the receive (a stream runs its work in that order), so
 * during a chunked prefill it computes chunk c+1 while the next rank computes chunk c.
 *
 * Compared with mlx-lm's pipeline (models/pipeline.py + qwen3_5.py: even layer counts per rank, the
 * last layers on rank 0, an all_gather so that every rank samples): here the split follows bytes and
 * memory, and only rank 0 samples, so the other ranks need neither the tokenizer nor the head.
 */
import { ModelUnavailableError } from "@anemll-qwen35/generate";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { DistributedError, MlxError } from "../errors.js";
import * as mx from "../mlx.js";
import type { Dtype, MxArray } from "../native.js";
import { type GdnState, gdnStateArrays, KvCache } from "../qwen35/cache.js";
import { embed, linear } from "../qwen35/linear.js";
import {
  type ForwardState,
  finalNorm,
  type LayerWeights,
  type Qwen35Weights,
  runLayers,
} from "../qwen35/model.js";
import type { DistributedGroup } from "./group.js";
import type { LayerRange } from "./split.js";

/** Header: int32 × 8 = [MAGIC, op, T, position, logits, 0, 0, 0]. */
const HEADER_LENGTH = 8;
/** "Q35" + protocol version 1: a rank built from other code is refused, not misread. */
const MAGIC = 0x51333501;
enum Op {
  Step = 1,
  Ping = 2,
  Shutdown = 3,
}
const LOGITS = ["none", "last", "all"] as const;
type LogitsMode = (typeof LOGITS)[number];

interface Header {
  readonly op: Op;
  readonly T: number;
  readonly pos: number;
  readonly logits: LogitsMode;
}

function headerArray(h: Header): MxArray {
  return mx.array(Int32Array.of(MAGIC, h.op, h.T, h.pos, LOGITS.indexOf(h.logits), 0, 0, 0), [HEADER_LENGTH]);
}

function readHeader(a: MxArray, from: string): Header {
  const v = a.toTypedArray() as Int32Array;
  if (v[0] !== MAGIC || v[1] < Op.Step || v[1] > Op.Shutdown || v[4] < 0 || v[4] > 2) {
    throw new DistributedError(
      "E_MLX_DIST_MISMATCH",
      `unexpected message from ${from} (${Array.from(v).join(", ")}): every rank must run the same anemll-qwen35 version`,
    );
  }
  return { op: v[1] as Op, T: v[2], pos: v[3], logits: LOGITS[v[4]] };
}

export interface PipelineOptions {
  /** A step with no answer in this long means a rank is gone (default 120 s). */
  readonly stepTimeoutMs?: number;
}

export const DEFAULT_STEP_TIMEOUT_MS = 120_000;

/** What rank 0 builds for one step. */
export interface PipelineStep {
  /** [1, 1 | T, V] in the activation dtype; undefined for logits "none". */
  readonly logits: MxArray | undefined;
  /** Rank 0's own layers' new GDN states. */
  readonly gdn: (GdnState | undefined)[];
  /** The sends (already scheduled); wait for them with the step, then dispose them. */
  readonly sent: MxArray[];
}

/** Rank 0's end of the pipeline: builds steps, waits for them under a timeout, and remembers a failure. */
export class PipelineHead {
  private failure: ModelUnavailableError | undefined;
  private readonly stepTimeoutMs: number;

  constructor(
    readonly group: DistributedGroup,
    readonly cfg: Qwen35Config,
    readonly dtype: Dtype,
    /** Per rank, the layers it holds. */
    readonly ranges: readonly LayerRange[],
    o: PipelineOptions = {},
  ) {
    this.stepTimeoutMs = o.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  }

  /** Set once a rank was lost (every later call throws it). */
  get unavailable(): ModelUnavailableError | undefined {
    return this.failure;
  }

  /** Builds one step over ids [1, T] from position `pos`; schedules its sends at once. */
  forward(
    w: Qwen35Weights,
    ids: MxArray,
    state: ForwardState,
    pos: number,
    logits: LogitsMode,
  ): PipelineStep {
    const g = this.group;
    const T = ids.shape[1];
    return this.guard("a pipeline step", () =>
      g.run(() =>
        mx.tidy(() => {
          const header = g.send(headerArray({ op: Op.Step, T, pos, logits }), g.next);
          g.schedule([header]);
          const { h, gdn } = runLayers(this.cfg, w.layers, embed(w.embed, ids), state);
          const hidden = g.send(h, g.next);
          g.schedule([hidden, ...gdn.flatMap(gdnStateArrays)]);
          let out: MxArray | undefined;
          if (logits !== "none") {
            const back = g.recv([1, logits === "all" ? T : 1, this.cfg.hiddenSize], this.dtype, g.previous);
            out = linear(w.lmHead, finalNorm(this.cfg, w, back, logits));
          }
          return { logits: out, gdn, sent: [header, hidden] };
        }),
      ),
    );
  }

  /**
   * Runs `build` (which schedules sends): MLX reports a peer it already knows is gone when work is
   * scheduled, not only when it is awaited; such a failure makes the model unavailable too.
   */
  private guard<T>(what: string, build: () => T): T {
    this.check();
    try {
      return build();
    } catch (cause) {
      if (cause instanceof MlxError) throw this.fail(this.group.peerError(what, cause), what);
      throw cause;
    }
  }

  /** Waits for a step's arrays; a lost or silent rank makes the model unavailable for good. */
  async wait(arrays: MxArray[], what: string): Promise<void> {
    this.check();
    try {
      await this.group.wait(arrays, { timeoutMs: this.stepTimeoutMs, what });
    } catch (cause) {
      throw this.fail(cause, what);
    }
  }

  /**
   * Sends an empty step around the ring and waits for it (the barrier after loading, and a measure of
   * the hand-off cost of one decode step); resolves with the round trip in milliseconds.
   */
  async ping(timeoutMs = this.stepTimeoutMs): Promise<number> {
    this.check();
    const g = this.group;
    const started = performance.now();
    const arrays = this.guard("pipeline ping", () =>
      g.run(() =>
        mx.tidy(() => {
          const header = g.send(headerArray({ op: Op.Ping, T: 1, pos: 0, logits: "none" }), g.next);
          g.schedule([header]);
          const hidden = g.send(mx.zeros([1, 1, this.cfg.hiddenSize], this.dtype), g.next);
          g.schedule([hidden]);
          return [header, hidden, g.recv([1, 1, this.cfg.hiddenSize], this.dtype, g.previous)];
        }),
      ),
    );
    try {
      await g.wait(arrays, { timeoutMs, what: "pipeline ping" });
    } catch (cause) {
      throw this.fail(cause, "pipeline ping");
    } finally {
      mx.dispose(arrays);
    }
    return performance.now() - started;
  }

  /** Tells every rank to stop (they exit their loops); waits up to `timeoutMs` for the ring to confirm. */
  async shutdown(timeoutMs = 5_000): Promise<void> {
    if (this.failure) return;
    const g = this.group;
    const arrays: MxArray[] = [];
    try {
      g.run(() => {
        arrays.push(g.send(headerArray({ op: Op.Shutdown, T: 0, pos: 0, logits: "none" }), g.next));
        g.schedule(arrays);
        arrays.push(g.recv([HEADER_LENGTH], "int32", g.previous));
      });
      await g.wait(arrays, { timeoutMs, what: "pipeline shutdown" });
    } catch (cause) {
      this.fail(cause, "pipeline shutdown");
    } finally {
      mx.dispose(arrays);
    }
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private fail(cause: unknown, what: string): ModelUnavailableError {
    this.failure ??= new ModelUnavailableError(
      `this model runs on ${this.group.size} ranks and ${what} failed, so it cannot run any more: ` +
        `${(cause as Error).message}. Restart the launch to serve it again.`,
      { cause },
    );
    return this.failure;
  }
}

export interface WorkerStats {
  readonly rank: number;
  readonly layers: LayerRange;
  readonly steps: number;
  /** Bytes of this rank's weights. */
  readonly weightsBytes: number;
  /** MLX's peak memory counter at the end. */
  readonly peakBytes: number;
}

interface StageSnapshot {
  /** Positions consumed. */
  readonly pos: number;
  readonly gdn: (GdnState | undefined)[];
}

/**
 * A later rank of the pipeline (rank > 0): receives steps from the previous rank, runs its layers,
 * passes the result on, until rank 0 says stop (resolves) or a peer is lost (rejects with
 * DistributedError). It waits for rank 0 as long as it takes: an idle server sends nothing.
 */
export async function runPipelineWorker(
  group: DistributedGroup,
  cfg: Qwen35Config,
  dtype: Dtype,
  stage: { layers: readonly LayerWeights[]; range: LayerRange; kv: { step: number; preallocate?: number } },
): Promise<WorkerStats> {
  const g = group;
  const last = g.rank === g.size - 1;
  const kv = stage.layers.map((l) => (l.mixer.kind === "attention" ? new KvCache(stage.kv) : undefined));
  let cur: StageSnapshot = { pos: 0, gdn: [] };
  let prev: StageSnapshot | undefined;
  let inflight: MxArray[] = [];
  let steps = 0;
  const from = g.describe(g.previous);

  // The state a step at `pos` starts from: the current one, or — after rank 0 dropped a speculative
  // step — the one before it.
  const stateAt = (pos: number): (GdnState | undefined)[] => {
    if (pos === 0) {
      mx.dispose([...cur.gdn, ...(prev?.gdn ?? [])].flatMap(gdnStateArrays));
      for (const c of kv) c?.reset();
      cur = { pos: 0, gdn: [] };
      prev = undefined;
    } else if (pos === cur.pos) {
      if (prev) mx.dispose(prev.gdn.flatMap(gdnStateArrays));
      prev = undefined;
    } else if (prev && pos === prev.pos) {
      mx.dispose(cur.gdn.flatMap(gdnStateArrays));
      cur = prev;
      prev = undefined;
    } else {
      throw new DistributedError(
        "E_MLX_DIST_MISMATCH",
        `rank ${g.rank} holds the state at position ${cur.pos}${prev ? ` or ${prev.pos}` : ""}, but a step starts at ${pos}`,
      );
    }
    for (const c of kv) if (c) c.offset = pos;
    return cur.gdn;
  };

  try {
    for (;;) {
      // Finish the previous step, then wait for the next header without a receive posted: MLX's
      // ring worker spins while one is pending, and an idle server may send nothing for hours.
      if (inflight.length) await g.wait(inflight, { what: `rank ${g.rank} finishing a step` });
      mx.dispose(inflight);
      inflight = [];
      await g.waitForData();
      const headerIn = g.recv([HEADER_LENGTH], "int32", g.previous);
      await g.wait([headerIn], { what: `rank ${g.rank} waiting for the next step` });
      const h = readHeader(headerIn, from);
      if (!last || h.op === Op.Shutdown) {
        // pass the header on (the last rank returns only the shutdown, as its acknowledgement)
        const sent = g.send(headerIn, g.next);
        g.schedule([sent]);
        inflight.push(sent);
      }
      inflight.push(headerIn);
      if (h.op === Op.Shutdown) {
        await g.wait(inflight, { timeoutMs: 5_000, what: "pipeline shutdown" });
        await g.flush(); // the process may end now: rank 0 waits for this acknowledgement
        break;
      }
      const D = cfg.hiddenSize;
      if (h.op === Op.Ping) {
        inflight.push(
          ...g.run(() => {
            const x = g.recv([1, 1, D], dtype, g.previous);
            const out = g.send(x, g.next);
            g.schedule([out]);
            return [x, out];
          }),
        );
        continue;
      }
      const start = stateAt(h.pos);
      const { sent, gdn } = g.run(() =>
        mx.tidy(() => {
          const x = g.recv([1, h.T, D], dtype, g.previous);
          const r = runLayers(cfg, stage.layers, x, { kv, gdn: start });
          let y: MxArray | undefined = r.h;
          if (last) {
            if (h.logits === "none") y = undefined;
            else if (h.logits === "last" && h.T > 1) y = mx.slice(r.h, [0, h.T - 1], [1, h.T]);
          }
          const out = y ? g.send(y, g.next) : undefined;
          const stateArrays = [...r.gdn.flatMap(gdnStateArrays), ...kv.flatMap((c) => c?.arrays() ?? [])];
          g.schedule(out ? [out, ...stateArrays] : stateArrays);
          return { sent: out, gdn: r.gdn };
        }),
      );
      if (sent) inflight.push(sent);
      mx.keep(gdn);
      prev = cur;
      cur = { pos: h.pos + h.T, gdn };
      steps++;
    }
  } finally {
    mx.dispose(inflight);
    mx.dispose([...cur.gdn, ...(prev?.gdn ?? [])].flatMap(gdnStateArrays));
    for (const c of kv) c?.reset();
  }
  return {
    rank: g.rank,
    layers: stage.range,
    steps,
    weightsBytes: 0,
    peakBytes: mx.getPeakMemory(),
  };
}
