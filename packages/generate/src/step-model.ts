import { AnemllError } from "@anemll-qwen35/core";

/**
 * What one forward step returns for the last position it consumed: either the full row of logits
 * (vocab-sized, e.g. 248,320 for Qwen3.5) or, for heads that compute the arg-max inside the model
 * (ANE lm_head split into chunks that each return their best id), only the winning id and its logit.
 */
export type StepOutput = { logits: Float32Array } | { top1: { id: number; value: number } };

export interface StepOptions {
  /** Runtimes may stop early and throw an `AbortError` (`name === "AbortError"`) when this fires. */
  signal?: AbortSignal;
}

/**
 * The contract runtimes implement so that one Generator can drive them all: a stateful model that
 * consumes token ids in order (KV cache + GatedDeltaNet conv/recurrent state live inside it).
 */
export interface StepModel {
  /** The most tokens the model's state can hold (prompt + generated). */
  readonly contextLength: number;
  /** Tokens consumed since the last `reset()`. */
  readonly position: number;
  /**
   * What `prefill`/`decode` return, when the runtime knows it up front. Lets the Generator refuse a
   * sampling configuration an argmax-only head cannot serve before any work is done.
   */
  readonly outputKind?: "logits" | "top1";
  /**
   * Set once the model can no longer run (e.g. a rank of a model split across machines was lost);
   * every later call throws it. A server answers 503 for such a model and keeps serving the others.
   */
  readonly unavailable?: ModelUnavailableError;
  /** Forget all state; the next `prefill` starts at position 0. */
  reset(): void | Promise<void>;
  /**
   * Consume `ids` starting at `position` and return the output for the last of them.
   * Throws `ContextOverflowError` when `position + ids.length > contextLength`.
   */
  prefill(ids: Int32Array | number[], opts?: StepOptions): Promise<StepOutput>;
  /** Consume one token and return the output for it. */
  decode(id: number, opts?: StepOptions): Promise<StepOutput>;
  /**
   * A copy of the whole sequence state (KV caches, GatedDeltaNet conv and recurrent states, the
   * position): `restore()` of it later continues exactly as if nothing had happened in between.
   * Runtimes that cannot copy their state leave it out (a prompt cache then stays off).
   */
  snapshot?(): Promise<StateSnapshot>;
  /**
   * Puts a snapshot of this model's state back (the model's own, not another's: throws
   * `SnapshotMismatchError`); the next step continues from `snapshot.position`.
   */
  restore?(snapshot: StateSnapshot): Promise<void>;
  /** False when this instance cannot copy its state although its runtime can (a model split across ranks). */
  readonly snapshots?: boolean;
  dispose(): void | Promise<void>;
}

/** A copy of a StepModel's state, made by its `snapshot()`; opaque except for these fields. */
export interface StateSnapshot {
  /** The model's `position` when it was taken. */
  readonly position: number;
  /** Memory the snapshot holds (for cache budgets). */
  readonly bytes: number;
  /** Frees what it holds now (native arrays); it cannot be restored afterwards. Idempotent. */
  dispose(): void;
}

/** A StepModel that can snapshot and restore its state. */
export type SnapshotModel = StepModel & Required<Pick<StepModel, "snapshot" | "restore">>;

/** True when `model` implements snapshot() and restore() and has not turned them off. */
export function canSnapshot(model: StepModel): model is SnapshotModel {
  return (
    typeof model.snapshot === "function" && typeof model.restore === "function" && model.snapshots !== false
  );
}

/** restore() got a snapshot it cannot use: from another model, disposed, or of another shape. */
export class SnapshotMismatchError extends AnemllError {
  constructor(message: string) {
    super("E_SNAPSHOT_MISMATCH", message);
  }
}

/** The prompt (or prompt + generated tokens) does not fit the model's context. */
export class ContextOverflowError extends AnemllError {
  readonly promptTokens: number;
  readonly contextLength: number;
  constructor(promptTokens: number, contextLength: number) {
    super(
      "E_CONTEXT_OVERFLOW",
      `prompt is ${promptTokens} tokens but the model's context holds ${contextLength}; ` +
        "shorten the prompt or use a model converted with a longer context",
    );
    this.promptTokens = promptTokens;
    this.contextLength = contextLength;
  }
}

/** The model cannot run any more (see StepModel.unavailable); `message` says why and what to do. */
export class ModelUnavailableError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_MODEL_UNAVAILABLE", message, options);
  }
}

/** True for the errors `fetch`, `AbortSignal.throwIfAborted()` and runtimes throw on abort. */
export function isAbortError(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { name?: unknown }).name === "AbortError";
}
