/**
 * The measuring loop every scenario shares: feed a prompt, then decode greedily, timing each
 * model call by itself (no sampling, no detokenization), as generate's stats define prefillMs and
 * decodeMs. Token ids are given directly so models without a tokenizer (synthetic checkpoints)
 * run the same loop.
 */
import type { StepModel, StepOutput } from "@anemll-qwen35/generate";

/** The greedy choice of a step's output (the head's own argmax for top-1 heads). */
export function greedy(out: StepOutput): number {
  if ("top1" in out) return out.top1.id;
  const l = out.logits;
  let best = 0;
  for (let i = 1; i < l.length; i++) if (l[i] > l[best]) best = i;
  return best;
}

/**
 * A fixed prompt of `n` ids in [16, min(vocab, 960)): a seeded LCG, so every backend and run sees
 * the same tokens (the fixture tokenizer has 993 ids; 960+ are special tokens).
 */
export function promptIds(n: number, vocab: number, seed = 7): number[] {
  const hi = Math.min(vocab, 960);
  const ids: number[] = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push(16 + (s % (hi - 16)));
  }
  return ids;
}

export interface StepTimings {
  readonly prefillMs: number;
  /** One entry per decode() call. */
  readonly decodeMs: number[];
  /** Greedy tokens: the prefill's, then one per decode. */
  readonly tokens: number[];
  /** Logit of the greedy token minus the runner-up's, per output (empty for top-1 heads). */
  readonly margins: number[];
}

/** top-1 minus top-2 logit (how decided the greedy choice was), or undefined for top-1 heads. */
export function top2Margin(out: StepOutput): number | undefined {
  if ("top1" in out) return undefined;
  let a = Number.NEGATIVE_INFINITY;
  let b = Number.NEGATIVE_INFINITY;
  for (const v of out.logits) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) b = v;
  }
  return a - b;
}

export interface RunStepsOptions {
  readonly decodeSteps: number;
  /** Called after the prefill (index -1) and after each decode step (index 0…). */
  readonly afterStep?: (index: number) => void;
  /** Feed these tokens instead of the model's own greedy choices (teacher forcing). */
  readonly forced?: readonly number[];
}

/** reset → prefill(prompt) → decodeSteps greedy decodes. */
export async function runSteps(
  model: StepModel,
  prompt: readonly number[],
  o: RunStepsOptions,
): Promise<StepTimings> {
  await model.reset();
  const t0 = performance.now();
  let out = await model.prefill(prompt.slice());
  const prefillMs = performance.now() - t0;
  o.afterStep?.(-1);
  const tokens = [greedy(out)];
  const margins: number[] = [];
  const noteMargin = () => {
    const m = top2Margin(out);
    if (m !== undefined) margins.push(m);
  };
  noteMargin();
  const decodeMs: number[] = [];
  for (let i = 0; i < o.decodeSteps; i++) {
    const feed = o.forced ? o.forced[i] : tokens[tokens.length - 1];
    const t = performance.now();
    out = await model.decode(feed);
    decodeMs.push(performance.now() - t);
    o.afterStep?.(i);
    tokens.push(greedy(out));
    noteMargin();
  }
  return { prefillMs, decodeMs, tokens, margins };
}

/** tok/s of one step time. */
export const tokPerS = (ms: number): number => 1000 / ms;
