/**
 * A backend loads one component package and runs predictions on it. The chain runner owns every
 * buffer and decides what to feed; backends only move tensors in and out (fp16 as bit patterns).
 */

import type { Tensor } from "@anemll-qwen35/core";
import type { ChainComponentState, ComponentIO } from "@anemll-qwen35/ir/chain";

/** A Core ML state (mlstate KV) or the interpreter's equivalent; opaque to the chain runner. */
export type ComponentState = ChainComponentState;

export interface LoadedComponent {
  newState(): ComponentState;
  predict(inputs: Record<string, Tensor>, state?: ComponentState): Promise<Record<string, Tensor>>;
  dispose(): void;
}

export interface LoadComponentOptions {
  readonly name: string;
  readonly functionName: string;
  readonly io: ComponentIO;
  /** sha256 of the package (from model.json): the compile-cache key. */
  readonly sha256: string;
  readonly signal?: AbortSignal;
}

export interface Backend {
  /** "reference" or "coreml" (the names @anemll-qwen35/models' BackendName gives them). */
  readonly name: "reference" | "coreml";
  load(packagePath: string, options: LoadComponentOptions): Promise<LoadedComponent>;
}
