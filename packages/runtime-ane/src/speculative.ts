/**
 * The speculative-decoding contract of @anemll-qwen35/generate (SpeculativeStepModel), written out
 * here with exactly its shape until generate exports it; ChainRunner implements it.
 */
import type { StepModel, StepOptions, StepOutput } from "@anemll-qwen35/generate";

/** A StepModel that drafts with its own MTP head and scores several tokens in one call. */
export interface SpeculativeStepModel extends StepModel {
  /** The most draft tokens one verify call takes (k, fixed at conversion / load); 0: no head. */
  readonly maxDraftTokens: number;
  draft(
    next: number,
    gamma: number,
    pick: (out: StepOutput, i: number) => number,
    opts?: StepOptions,
  ): Promise<{ ids: number[]; outputs: StepOutput[] }>;
  verify(ids: number[], opts?: StepOptions): Promise<StepOutput[]>;
  accept(n: number, opts?: StepOptions): Promise<void>;
}
