import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ContextOverflowError, type StepModel, type StepOptions, type StepOutput } from "../src/index.js";

/** The Qwen3.5-format fixture tokenizer made by tools/oracle/make_tokenizer.py (BPE ids, then the 33 specials). */
export const FIXTURE_TOKENIZER_DIR = join(
  dirname(fileURLToPath(import.meta.url)),
  "../../../fixtures/tokenizer",
);

/**
 * Id of the first special token (<|endoftext|>) in the fixture = its number of BPE ids; the 33
 * Qwen3.5 specials follow in their official order (Qwen3.5 itself: 248044).
 */
export const SPECIAL_BASE: number = (
  JSON.parse(readFileSync(join(FIXTURE_TOKENIZER_DIR, "tokenizer.json"), "utf8")) as {
    added_tokens: { id: number; content: string }[];
  }
).added_tokens.find((t) => t.content === "<|endoftext|>")!.id;

export interface ChatCase {
  name: string;
  messages: Array<Record<string, unknown>>;
  tools?: Array<Record<string, unknown>>;
  add_generation_prompt: boolean;
  enable_thinking?: boolean;
  expected_text: string;
  expected_ids: number[];
}

/** Conversations and probe strings rendered/encoded by Python jinja2 + HF tokenizers (the oracle). */
export function chatCases(): { cases: ChatCase[]; probes: Array<{ text: string; ids: number[] }> } {
  return JSON.parse(readFileSync(join(FIXTURE_TOKENIZER_DIR, "chat_cases.json"), "utf8"));
}

export interface ScriptedModelOptions {
  vocabSize: number;
  contextLength?: number;
  /** Return `{top1}` instead of logits, like an ANE argmax head. */
  top1?: boolean;
  /** Milliseconds each step waits (to let an abort land mid-run). */
  stepDelayMs?: number;
  /** Called as each step (1: the prefill) begins its wait: where a test aborts "during a step". */
  onStep?: (step: number) => void;
  /** Declare `outputKind` up front. */
  declareOutputKind?: boolean;
}

/**
 * A test double of a runtime: it "predicts" a fixed token sequence, one per step, by returning
 * logits peaked at the next scripted id. It records what the Generator fed it.
 */
export class ScriptedModel implements StepModel {
  readonly contextLength: number;
  readonly outputKind?: "logits" | "top1";
  position = 0;
  prefilled: number[][] = [];
  decoded: number[] = [];
  resets = 0;
  disposed = false;
  private step = 0;

  constructor(
    private readonly script: readonly number[],
    private readonly opts: ScriptedModelOptions,
  ) {
    this.contextLength = opts.contextLength ?? 4096;
    if (opts.declareOutputKind) this.outputKind = opts.top1 ? "top1" : "logits";
  }

  reset(): void {
    this.position = 0;
    this.step = 0;
    this.resets++;
  }

  async prefill(ids: Int32Array | number[], opts?: StepOptions): Promise<StepOutput> {
    await this.wait(opts);
    if (this.position + ids.length > this.contextLength) {
      throw new ContextOverflowError(this.position + ids.length, this.contextLength);
    }
    this.prefilled.push(Array.from(ids));
    this.position += ids.length;
    return this.output();
  }

  async decode(id: number, opts?: StepOptions): Promise<StepOutput> {
    await this.wait(opts);
    if (this.position >= this.contextLength)
      throw new ContextOverflowError(this.position + 1, this.contextLength);
    this.decoded.push(id);
    this.position++;
    return this.output();
  }

  dispose(): void {
    this.disposed = true;
  }

  private steps = 0;

  private async wait(opts?: StepOptions): Promise<void> {
    this.opts.onStep?.(++this.steps);
    if (this.opts.stepDelayMs) await new Promise((r) => setTimeout(r, this.opts.stepDelayMs));
    opts?.signal?.throwIfAborted();
  }

  private output(): StepOutput {
    if (this.step >= this.script.length) throw new Error("ScriptedModel: script exhausted");
    const id = this.script[this.step++];
    if (this.opts.top1) return { top1: { id, value: 10 } };
    const logits = new Float32Array(this.opts.vocabSize);
    // A smooth background so the distribution is not degenerate, and a clear winner.
    for (let i = 0; i < logits.length; i++) logits[i] = -((i * 7919) % 13) / 4;
    logits[id] = 12;
    return { logits };
  }
}
