import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import {
  ContextOverflowError,
  ModelUnavailableError,
  type StateSnapshot,
  type StepModel,
  type StepOptions,
  type StepOutput,
  type Tokenizer,
} from "@anemll-qwen35/generate";

/** The tiny random-weight Qwen3.5 checkpoint (1,000-id Qwen3.5-format tokenizer, ChatML template). */
export const FIXTURE = resolve(import.meta.dirname, "../../../fixtures/tiny-tied");

/** Converts the fixture into a temporary chain folder (ctx 128, one super-block per package: ~2 s). */
export async function convertTiny(): Promise<string> {
  const out = join(mkdtempSync(join(tmpdir(), "server-test-")), "tiny");
  await convert({ model: FIXTURE, out, ctx: 128, fuse: 1 });
  return out;
}

export interface ScriptedModelOptions {
  contextLength?: number;
  /** Milliseconds each prefill/decode step waits (to let an abort or a queue build up). */
  stepDelayMs?: number;
  /** Throw a runtime failure at this decode step (1 = the first decode). */
  failAtDecode?: number;
  /** Become unavailable for good at this decode step, as a model split across machines that lost a rank. */
  loseAtDecode?: number;
}

/**
 * A test double of a runtime for server tests that need a model to say something specific (a tool
 * call, thinking, a long answer): at prefill it asks `reply(promptText)` what to say and then
 * "predicts" those tokens one per step, by returning logits peaked at the next one. When the reply
 * runs out it predicts EOS. It records what it was fed.
 */
export class ScriptedModel implements StepModel {
  readonly contextLength: number;
  readonly outputKind = "logits" as const;
  position = 0;
  /** Prompt texts seen, in order. */
  readonly prompts: string[] = [];
  decodeSteps = 0;
  resets = 0;
  disposed = false;
  unavailable: ModelUnavailableError | undefined;
  private script: number[] = [];
  private step = 0;

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly reply: (prompt: string) => string,
    private readonly opts: ScriptedModelOptions = {},
  ) {
    this.contextLength = opts.contextLength ?? 4096;
  }

  reset(): void {
    this.position = 0;
    this.step = 0;
    this.resets++;
  }

  async prefill(ids: Int32Array | number[], opts?: StepOptions): Promise<StepOutput> {
    await this.wait(opts);
    if (this.unavailable) throw this.unavailable;
    if (this.position + ids.length > this.contextLength) {
      throw new ContextOverflowError(this.position + ids.length, this.contextLength);
    }
    const prompt = this.tokenizer.decode(Array.from(ids));
    this.prompts.push(prompt);
    this.script = [...this.tokenizer.encode(this.reply(prompt)), this.tokenizer.eosTokenIds[0]];
    this.position += ids.length;
    return this.output();
  }

  async decode(_id: number, opts?: StepOptions): Promise<StepOutput> {
    await this.wait(opts);
    if (this.unavailable) throw this.unavailable;
    this.decodeSteps++;
    if (this.decodeSteps === this.opts.failAtDecode) throw new Error("scripted device failure");
    if (this.decodeSteps === this.opts.loseAtDecode) {
      this.unavailable = new ModelUnavailableError("scripted: rank 1 was lost");
      throw this.unavailable;
    }
    this.position++;
    return this.output();
  }

  dispose(): void {
    this.disposed = true;
  }

  private async wait(opts?: StepOptions): Promise<void> {
    if (this.opts.stepDelayMs) await new Promise((r) => setTimeout(r, this.opts.stepDelayMs));
    opts?.signal?.throwIfAborted();
  }

  private output(): StepOutput {
    const id = this.script[Math.min(this.step++, this.script.length - 1)];
    const logits = new Float32Array(this.tokenizer.vocabSize).fill(-5);
    logits[id] = 10;
    return { logits };
  }
}

/**
 * A model that answers EOS at once and records the prompt ids it is given: for what the server does
 * around generation. With `snapshots`, it can snapshot and restore its (trivial) state, so the
 * server's prompt cache works around it as around a real model.
 */
export class EosModel implements StepModel {
  readonly outputKind = "logits" as const;
  position = 0;
  readonly snapshots: boolean;
  /** States restored from snapshots (prompt-cache hits). */
  restores = 0;
  /** The prefill calls: where each began and its ids (typed-array copies: cheap even for huge prompts). */
  readonly prefills: { start: number; ids: Int32Array }[] = [];
  constructor(
    readonly contextLength: number,
    private readonly tokenizer: Tokenizer,
    o: { snapshots?: boolean } = {},
  ) {
    this.snapshots = o.snapshots ?? false;
  }
  /**
   * The prompts prefilled, one per request: pieces that continue where the last one ended are
   * joined; after a restore from a snapshot, only the part prefilled.
   */
  get prompts(): number[][] {
    const out: number[][] = [];
    let end = -1;
    for (const p of this.prefills) {
      if (p.start === end && p.start > 0) for (const id of p.ids) out[out.length - 1].push(id);
      else out.push(Array.from(p.ids));
      end = p.start + p.ids.length;
    }
    return out;
  }
  reset(): void {
    this.position = 0;
  }
  async prefill(ids: Int32Array | number[]): Promise<StepOutput> {
    this.prefills.push({ start: this.position, ids: Int32Array.from(ids) });
    this.position += ids.length;
    return this.eos();
  }
  async decode(): Promise<StepOutput> {
    this.position++;
    return this.eos();
  }
  async snapshot(): Promise<StateSnapshot> {
    return { position: this.position, bytes: 64, dispose() {} };
  }
  async restore(s: StateSnapshot): Promise<void> {
    this.restores++;
    this.position = s.position;
  }
  dispose(): void {}
  private eos(): StepOutput {
    const logits = new Float32Array(this.tokenizer.vocabSize).fill(-5);
    logits[this.tokenizer.eosTokenIds[0]] = 10;
    return { logits };
  }
}
