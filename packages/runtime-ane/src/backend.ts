/**
 * A backend loads one component package and runs predictions on it. The chain runner decides what
 * to feed (ir's ChainStepper); the backend keeps what a package carries from step to step (its
 * state: GDN states, io KV caches, Core ML states) and moves only the rest in and out (fp16 as bit
 * patterns).
 */

import type { Tensor } from "@anemll-qwen35/core";
import type {
  ChainComponentState,
  ChainPrefill,
  ComponentIO,
  PrefillFunction,
  StatePlan,
} from "@anemll-qwen35/ir/chain";
import type { FunctionCheckSeam } from "./prefill-check.js";

/** The buffers a component keeps between steps; opaque to the chain runner. */
export type ComponentState = ChainComponentState;

export interface LoadedComponent {
  /** A state keeping the buffers of `plan` (zeros); see ir's ChainComponent.newState. */
  newState(plan: StatePlan): ComponentState;
  /** See ir's ChainComponent.predict: with a state, its buffers are bound and kept by the backend. */
  predict(
    inputs: Record<string, Tensor>,
    state?: ComponentState,
    position?: number,
  ): Promise<Record<string, Tensor>>;
  /** The package's prefill function over the same state, when asked for and the backend runs it. */
  readonly prefill?: ChainPrefill;
  /** The package's verify function (a chain with an MTP head), when asked for. */
  readonly verify?: ChainPrefill;
  dispose(): void;
}

export interface LoadComponentOptions {
  readonly name: string;
  readonly functionName: string;
  readonly io: ComponentIO;
  /** The package's prefill function (model.json's component.prefill), to load beside `functionName`. */
  readonly prefill?: PrefillFunction;
  /** The package's verify function (model.json's component.verify), to load beside them. */
  readonly verify?: PrefillFunction;
  /**
   * Load `functionName` only when it is first run (a speculating chain: verify serves as its
   * decode step, so decode is loaded only if the chain needs it, at the end of the context).
   */
  readonly lazyMain?: boolean;
  /** sha256 of the package (from model.json): the compile-cache key. */
  readonly sha256: string;
  readonly signal?: AbortSignal;
}

/** What crossed between JS and a backend since it was made, counted by the backend itself. */
export interface TransferStats {
  readonly predictions: number;
  /** Tensor bytes handed to predict() (JS → backend). */
  readonly bytesIn: number;
  /** Tensor bytes predict() returned (backend → JS). */
  readonly bytesOut: number;
  /**
   * Bytes the backend copied inside itself to keep state: KV rows written into its caches, and on
   * Core ML any state output it had to copy because Core ML did not write into the given backing.
   */
  readonly bytesKept: number;
  /** Core ML: state outputs it wrote somewhere other than the backing it was given (then copied). */
  readonly backingMisses?: number;
}

export interface Backend {
  /** "reference" or "coreml" (the names @anemll-qwen35/models' BackendName gives them). */
  readonly name: "reference" | "coreml";
  load(packagePath: string, options: LoadComponentOptions): Promise<LoadedComponent>;
  /** Totals over every component this backend loaded. */
  transfers(): TransferStats;
  /**
   * Where a loaded function's ops run and how long a call takes, for the prefill check at first
   * load (Core ML: MLComputePlan and the clock); absent where ops have no devices to run on.
   */
  readonly functionCheck?: FunctionCheckSeam;
}

/** Bytes of tensor data in a record of tensors. */
export function tensorBytes(tensors: Record<string, Tensor>): number {
  let n = 0;
  for (const t of Object.values(tensors)) n += t.data.byteLength;
  return n;
}

/** A mutable TransferStats a backend adds to. */
export class TransferCounter implements TransferStats {
  predictions = 0;
  bytesIn = 0;
  bytesOut = 0;
  bytesKept = 0;
  backingMisses: number | undefined;

  add(s: TransferStats): void {
    this.predictions += s.predictions;
    this.bytesIn += s.bytesIn;
    this.bytesOut += s.bytesOut;
    this.bytesKept += s.bytesKept;
    if (s.backingMisses !== undefined) this.backingMisses = (this.backingMisses ?? 0) + s.backingMisses;
  }

  snapshot(): TransferStats {
    return {
      predictions: this.predictions,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
      bytesKept: this.bytesKept,
      ...(this.backingMisses === undefined ? {} : { backingMisses: this.backingMisses }),
    };
  }
}
