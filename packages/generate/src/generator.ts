import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { ChatMessage, ToolCall, ToolSpec } from "./chat-template.js";
import { type ConstraintPlan, planConstraint, type ToolChoice } from "./constraint.js";
import { SpeculativeUnsupportedError, UnsupportedSamplingError } from "./errors.js";
import { applyTokenMask, compileConstraint, type TokenMatcher } from "./grammar-engine.js";
import type { JsonSchema } from "./json-schema.js";
import type { PromptCache } from "./prompt-cache.js";
import { Sampler, type SamplingOptions } from "./sampler.js";
import {
  type Segment,
  Segmenter,
  THINK_CLOSE,
  THINK_OPEN,
  TOOL_CALL_CLOSE,
  TOOL_CALL_OPEN,
} from "./segmenter.js";
import {
  argmax,
  canSpeculate,
  rejectionStep,
  type SpeculativeStats,
  type SpeculativeStepModel,
  speculationUnsupported,
  speculativeStats,
} from "./speculative.js";
import {
  ContextOverflowError,
  canSnapshot,
  isAbortError,
  type StepModel,
  type StepOutput,
} from "./step-model.js";
import { StopRules } from "./stop.js";
import type { Tokenizer } from "./tokenizer.js";
import { type MalformedToolCall, parseToolCall } from "./tool-calls.js";

/**
 * Why generation ended.
 * - `stop`: an EOS token or a stop string.
 * - `tool_calls`: like `stop`, and the model made at least one well-formed tool call.
 * - `length`: `maxTokens` reached, or the model's context is full.
 * - `abort`: the `signal` fired, or the consumer left the `for await` loop early.
 */
export type FinishReason = "stop" | "length" | "abort" | "tool_calls";

/** The exact event behind a finish reason. */
export type FinishDetail =
  | { type: "eos"; tokenId: number }
  | { type: "stop_string"; stopString: string }
  | { type: "max_tokens" }
  | { type: "context_full" }
  | { type: "abort" };

export type GenerationChunk =
  /**
   * Answer text / thinking text. `tokenIds` are the ids consumed since the previous chunk: text held
   * back (half a UTF-8 character, a possible stop string or marker) belongs to the token releasing it.
   */
  | { type: "text"; text: string; tokenIds: number[] }
  | { type: "thinking"; text: string; tokenIds: number[] }
  /** A complete `<tool_call>` block, parsed; emitted as soon as its `</tool_call>` arrives. */
  | { type: "tool_call"; call: ToolCall }
  /** A `<tool_call>` block that could not be parsed (or was never closed). */
  | { type: "tool_call_error"; error: MalformedToolCall };

/**
 * Timings of one generation. All times are wall-clock milliseconds from `performance.now()`.
 *
 * - `promptTokens`: the prompt's ids (prefilled, or restored from the prompt cache).
 * - `cachedTokens`: prompt ids whose state came from the prompt cache instead of a prefill.
 * - `generatedTokens`: tokens sampled from the model's outputs, the EOS token that ended the run
 *   included (the model computed it); `tokenIds` of the result exclude it.
 * - `timeToFirstTokenMs`: from the `generate()` call to the first sampled token: template rendering,
 *   tokenization, `reset()`, `prefill()` and one sampling step. NaN if no token was sampled.
 * - `prefillMs`: the `model.prefill()` calls, and the prompt cache's restore and snapshots, alone.
 * - `prefillTokensPerSecond`: `(promptTokens - cachedTokens) / (prefillMs / 1000)`.
 * - `decodeSteps`: generated tokens fed back to the model: `model.decode()` calls, plus the tokens
 *   speculative rounds committed (the first token comes from the prefill output, so normally
 *   `decodeSteps = generatedTokens - 1`).
 * - `decodeMs`: the sum of the `model.decode()` calls alone (no sampling or detokenization); when
 *   speculating, also the draft, verify and accept calls.
 * - `decodeTokensPerSecond`: `decodeSteps / (decodeMs / 1000)`; 0 when no decode step ran.
 * - `totalMs`: from the `generate()` call until the result is ready.
 * - `maskMs`: constrained decoding: computing and applying the token masks (0 without a constraint);
 *   compiling the constraint is in `timeToFirstTokenMs`, not here.
 * - `speculative`: only with `speculative: "mtp"`: drafted and accepted tokens, verify calls.
 */
export interface GenerationStats {
  promptTokens: number;
  cachedTokens: number;
  generatedTokens: number;
  timeToFirstTokenMs: number;
  prefillMs: number;
  prefillTokensPerSecond: number;
  decodeSteps: number;
  decodeMs: number;
  decodeTokensPerSecond: number;
  totalMs: number;
  maskMs: number;
  speculative?: SpeculativeStats;
}

export interface GenerationResult {
  /** The answer, without thinking or tool-call blocks. */
  text: string;
  /** The thinking text (between <think> and </think>), trimmed. */
  thinking: string;
  /** Everything the model said, markers included, up to (not including) a stop string or EOS. */
  rawText: string;
  toolCalls: ToolCall[];
  toolCallErrors: MalformedToolCall[];
  /** Generated token ids, without the EOS token that ended the run. */
  tokenIds: number[];
  finishReason: FinishReason;
  finishDetail: FinishDetail;
  stats: GenerationStats;
}

export interface GenerateOptions {
  /**
   * Raw prompt text (no chat template applied) or prompt token ids. Exclusive with `messages`.
   * Special-token text in a raw prompt (`<|im_start|>`) becomes the control token: it is the
   * caller's own prompt. Never put untrusted text in it; use `messages`.
   */
  prompt?: string | number[] | Int32Array;
  /**
   * Chat messages, rendered with the tokenizer's chat template and the generation prompt. Special
   * tokens written inside them stay text, so content from users or tools cannot forge a turn.
   */
  messages?: ChatMessage[];
  /**
   * Tools offered to the model: rendered by the template, used to type parsed arguments, and the
   * only functions a parsed call may name (a call to another is a `tool_call_error`).
   */
  tools?: ToolSpec[];
  /** Qwen3.5 thinking on/off (`enable_thinking` of the template); undefined = template default. */
  enableThinking?: boolean;
  /** Extra variables for the chat template. */
  templateVariables?: Record<string, unknown>;
  /** The most tokens to sample (an ending EOS included). Default: until EOS or a full context. */
  maxTokens?: number;
  sampling?: SamplingOptions;
  /** Stop strings: generation ends when one appears; it and anything after it are not output. */
  stop?: string[];
  /** More EOS ids on top of the tokenizer's. */
  eosTokenIds?: number[];
  /**
   * Aborting stops after the current model step (or sooner, if the runtime honours the signal
   * itself) and the generation RESOLVES with `finishReason: "abort"` and the output so far; it
   * does not reject. The same happens when a `for await` loop over the generation is left early.
   */
  signal?: AbortSignal;
  /**
   * Snapshots of this model's state by token prefix (see PromptCache): a stored prefix of the
   * prompt is restored instead of prefilled, and new snapshots are taken on the way. Ignored for
   * models without snapshot()/restore(). One cache per model.
   */
  promptCache?: PromptCache;
  /**
   * With `promptCache`: prompt positions worth a snapshot besides those the cache picks itself,
   * e.g. where the system prompt and tool schemas end.
   */
  cacheCheckpoints?: readonly number[];
  /** Called once the prompt is encoded, before its prefill (which can take a while on long prompts). */
  onPrefill?: (promptTokens: number) => void;
  /** Called with each sampled token id (an ending EOS excluded), before it is decoded. */
  onToken?: (id: number) => void;
  /** Called with each chunk as it is produced (the same chunks the iterator yields). */
  onChunk?: (chunk: GenerationChunk) => void;
  /**
   * Constrained decoding: the answer is one JSON value valid against this schema (compact, one
   * line). Only the keywords listed in the README are accepted (UnsupportedSchemaError otherwise).
   * With thinking on, the constraint starts after </think>.
   */
  jsonSchema?: JsonSchema;
  /** Constrained decoding: the answer matches this EBNF grammar (xgrammar's dialect, `root ::= …`). */
  grammar?: string;
  /**
   * `"required"` / `{ name }`: the answer is one or more calls to `tools` (to that one), constrained
   * to their names and parameter schemas. `"auto"` (default): the model may answer or call; calls
   * to tools marked `strict: true` are constrained.
   */
  toolChoice?: ToolChoice;
  /** False: at most one tool call (the grammar ends after it). Default true. */
  parallelToolCalls?: boolean;
  /**
   * Text of the answer that the prompt already ends with (e.g. a forced `<tool_call>\n<function=`):
   * the constraint takes it as written. Only read when something is constrained.
   */
  answerPrefix?: string;
  /**
   * `"mtp"`: speculative decoding with the model's own multi-token-prediction head (a
   * SpeculativeStepModel): the head drafts `gamma` tokens, the model scores them in one call, and
   * the standard rule accepts a prefix, so greedy output is identical to plain decoding and sampled
   * output keeps the model's distribution. SpeculativeUnsupportedError when the model has no head.
   */
  speculative?: "mtp";
  /** Draft tokens per round with `speculative` (1 ≤ gamma ≤ the model's maxDraftTokens); default 2 (or fewer when k is). */
  gamma?: number;
}

/**
 * A running generation: iterate it for chunks as they come, await it for the result, or both.
 * Iterating again replays every chunk from the start.
 */
export interface Generation extends AsyncIterable<GenerationChunk>, PromiseLike<GenerationResult> {
  readonly result: Promise<GenerationResult>;
}

/**
 * Runs the text loop: render the prompt, prefill, then sample → stop checks → decode until EOS, a
 * stop string, `maxTokens`, a full context or abort. Starts immediately. Rejects with
 * `ContextOverflowError` when the prompt does not fit the model's context, `InvalidArgumentError`
 * for bad options, `UnsupportedSamplingError` when an argmax-only model meets non-greedy sampling,
 * `SpeculativeUnsupportedError` for `speculative: "mtp"` on a model without an MTP head, and with whatever the model throws (other than an abort).
 */
export function generate(model: StepModel, tokenizer: Tokenizer, options: GenerateOptions): Generation {
  return new GenerationImpl(model, tokenizer, options);
}

const MARKERS = new Set([THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE]);

class GenerationImpl implements Generation {
  readonly result: Promise<GenerationResult>;
  private readonly chunks: GenerationChunk[] = [];
  private finished = false;
  private failure: { error: unknown } | undefined;
  private wake: Array<() => void> = [];
  private readonly stopper = new AbortController();
  private readonly t0 = performance.now();

  constructor(
    private readonly model: StepModel,
    private readonly tokenizer: Tokenizer,
    private readonly options: GenerateOptions,
  ) {
    this.result = this.run().then(
      (r) => {
        this.end();
        return r;
      },
      (err: unknown) => {
        this.failure = { error: err };
        this.end();
        throw err;
      },
    );
    // Whoever only iterates learns of a failure from the iterator; don't also crash the process
    // with an unhandled rejection. `then()` still hands the rejection to those who await.
    this.result.catch(() => {});
  }

  // biome-ignore lint/suspicious/noThenProperty: a Generation is awaitable by design (PromiseLike).
  then<A = GenerationResult, B = never>(
    onfulfilled?: ((value: GenerationResult) => A | PromiseLike<A>) | null,
    onrejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    return this.result.then(onfulfilled, onrejected);
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerationChunk> {
    let i = 0;
    return {
      next: async (): Promise<IteratorResult<GenerationChunk>> => {
        for (;;) {
          if (i < this.chunks.length) return { value: this.chunks[i++], done: false };
          if (this.finished) {
            if (this.failure) throw this.failure.error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((resolve) => this.wake.push(resolve));
        }
      },
      return: async (): Promise<IteratorResult<GenerationChunk>> => {
        // Leaving the loop early means nobody wants the rest: stop the model too.
        if (!this.finished) this.stopper.abort();
        return { value: undefined, done: true };
      },
    };
  }

  private emit(chunk: GenerationChunk): void {
    this.chunks.push(chunk);
    this.options.onChunk?.(chunk);
    this.notify();
  }

  private end(): void {
    this.finished = true;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = [];
    for (const w of wake) w();
  }

  private async run(): Promise<GenerationResult> {
    const { model, tokenizer, options: o } = this;
    const signal = o.signal ? AbortSignal.any([o.signal, this.stopper.signal]) : this.stopper.signal;

    const { ids: promptIds, text: promptText } = this.prompt();
    if (promptIds.length === 0) {
      throw new InvalidArgumentError(
        "prompt is empty: Qwen3.5 has no BOS token, so at least one token is needed",
      );
    }
    if (promptIds.length > model.contextLength)
      throw new ContextOverflowError(promptIds.length, model.contextLength);

    const sampler = new Sampler(o.sampling);
    if (model.outputKind === "top1") sampler.assertTop1Compatible();
    const constraint = planConstraint(o);
    if (constraint && model.outputKind === "top1") throw topOneCannotBeMasked();
    const spec = o.speculative === undefined ? undefined : speculation(model, o);
    const eosTokenIds = [...tokenizer.eosTokenIds, ...(o.eosTokenIds ?? [])];
    const rules = new StopRules({
      eosTokenIds,
      stopStrings: o.stop,
      maxTokens: o.maxTokens,
    });
    const matcher = rules.matcher();
    const decoder = tokenizer.streamingDecoder();
    const startInThinking = opensThinking(promptText);
    const segmenter = new Segmenter({ startInThinking, literalAnswer: constraint?.literalAnswer });
    const grammar = constraint
      ? await startMatcher(tokenizer, constraint, eosTokenIds, o.answerPrefix)
      : undefined;
    // No mask while thinking: the constraint starts with the token after the one closing </think>.
    let masking = grammar !== undefined && !startInThinking;
    let thought = "";
    let masked: Float32Array | undefined;
    let maskMs = 0;

    const generated: number[] = [];
    const history = promptIds.slice(); // prompt + generated, for penalties
    const toolCalls: ToolCall[] = [];
    const toolCallErrors: MalformedToolCall[] = [];
    let text = "";
    let thinking = "";
    let rawText = "";
    let unattributed: number[] = [];

    const deliver = (segments: Segment[]) => {
      for (const s of segments) {
        if (s.kind === "tool_call") {
          unattributed = [];
          const parsed = s.closed
            ? parseToolCall(s.body, o.tools)
            : ({
                ok: false,
                error: { raw: s.body, message: "generation ended inside a <tool_call> block" },
              } as const);
          if (parsed.ok) {
            toolCalls.push(parsed.call);
            this.emit({ type: "tool_call", call: parsed.call });
          } else {
            toolCallErrors.push(parsed.error);
            this.emit({ type: "tool_call_error", error: parsed.error });
          }
          continue;
        }
        if (s.kind === "text") text += s.text;
        else thinking += s.text;
        this.emit({ type: s.kind, text: s.text, tokenIds: unattributed });
        unattributed = [];
      }
    };
    const feedText = (piece: string) => {
      const m = matcher.push(piece);
      rawText += m.emit;
      deliver(segmenter.push(m.emit));
      return m;
    };

    // Special tokens other than the thinking / tool-call markers (<|im_start|>, <|endoftext|> when not
    // an EOS, vision pads…) are control tokens, not text.
    const isControl = (id: number) => tokenizer.isSpecial(id) && !MARKERS.has(tokenizer.idToToken(id) ?? "");

    let detail: FinishDetail | undefined;
    let timeToFirstTokenMs = Number.NaN;
    let prefillMs = 0;
    let cachedTokens = 0;
    let decodeMs = 0;
    let decodeSteps = 0;
    let sampledTokens = 0;

    try {
      if (signal.aborted) {
        detail = { type: "abort" };
      } else {
        o.onPrefill?.(promptIds.length);
        const tp = performance.now();
        const prefilled = await prefillPrompt(model, promptIds, o, signal);
        let out = prefilled.out;
        cachedTokens = prefilled.cachedTokens;
        prefillMs = performance.now() - tp;

        // The row a token is chosen from: the logits masked by the constraint when it applies.
        const constrained = async (row: StepOutput): Promise<StepOutput> => {
          if (!masking || !grammar) return row;
          if (!("logits" in row)) throw topOneCannotBeMasked();
          const tm = performance.now();
          masked = applyTokenMask(row.logits, await grammar.mask(), masked);
          maskMs += performance.now() - tm;
          return { logits: masked };
        };
        // One chosen token through the grammar, the stop rules and the output; true: generation ends.
        const take = (id: number): boolean => {
          if (masking && grammar && !grammar.accept(id)) {
            throw new Error(`constrained decoding: the grammar refused token ${id} its own mask allowed`);
          }
          sampledTokens++;
          if (sampledTokens === 1) timeToFirstTokenMs = performance.now() - this.t0;
          if (rules.isEos(id)) {
            detail = { type: "eos", tokenId: id };
            return true;
          }
          generated.push(id);
          history.push(id);
          unattributed.push(id);
          o.onToken?.(id);
          if (!isControl(id)) {
            const piece = decoder.push(id);
            if (grammar && !masking) {
              thought += piece;
              masking = thought.includes(THINK_CLOSE);
            }
            const m = feedText(piece);
            if (m.stopped) {
              detail = { type: "stop_string", stopString: m.stopString ?? "" };
              return true;
            }
          }
          if (rules.reachedMaxTokens(sampledTokens)) {
            detail = { type: "max_tokens" };
            return true;
          }
          if (signal.aborted) {
            detail = { type: "abort" };
            return true;
          }
          return false;
        };

        // A token already chosen for the next turn: the replacement a rejected draft leaves.
        let chosen: number | undefined;
        for (;;) {
          const id = chosen ?? sampler.pick(await constrained(out), history, tokenizer.vocabSize);
          chosen = undefined;
          if (take(id)) break;
          const consumed = promptIds.length + decodeSteps;
          if (consumed >= model.contextLength) {
            detail = { type: "context_full" };
            break;
          }
          const td = performance.now();
          // Drafts that fit the context and, with their bonus token, the tokens still allowed.
          const gamma = spec
            ? Math.min(
                spec.gamma,
                model.contextLength - consumed - 1,
                (o.maxTokens ?? Infinity) - sampledTokens - 1,
              )
            : 0;
          if (gamma < 1) {
            out = await model.decode(id, { signal });
            decodeMs += performance.now() - td;
            decodeSteps++;
            continue;
          }

          // A speculative round: draft, verify [id, ...drafts] in one call, accept a prefix.
          const sm = spec!.model;
          const greedy = sampler.isGreedy;
          const mask0 = masking && grammar ? await grammar.mask() : undefined;
          const draftHistory = sampler.usesPenalties ? history.slice(-sampler.options.penaltyLastN) : [];
          const qs: Float64Array[] = [];
          const pick = (d: StepOutput, i: number): number => {
            if (!("logits" in d)) {
              if (!greedy) throw topOneDraftCannotSample();
              draftHistory.push(d.top1.id);
              return d.top1.id;
            }
            // Only the first draft sees the constraint (its mask is known now); later drafts are
            // unmasked guesses, which the rule below still checks against the masked target.
            const logits = i === 0 && mask0 ? applyTokenMask(d.logits, mask0) : d.logits;
            let x: number;
            if (greedy) x = sampler.pick({ logits }, draftHistory, tokenizer.vocabSize);
            else {
              const q = sampler.distribution(logits, draftHistory, tokenizer.vocabSize);
              qs[i] = q;
              x = sampler.drawFrom(q, argmax(q));
            }
            draftHistory.push(x);
            return x;
          };
          const drafts = (await sm.draft(id, gamma, pick, { signal })).ids;
          const rows = await sm.verify([id, ...drafts], { signal });
          if (drafts.length < 1 || drafts.length > gamma || rows.length !== drafts.length + 1) {
            throw new Error(
              `speculative: the model drafted ${drafts.length} of ${gamma} tokens and verified ${rows.length} rows of ${drafts.length + 1}`,
            );
          }
          decodeMs += performance.now() - td;
          spec!.calls++;
          spec!.drafted += drafts.length;

          let accepted = 0;
          let ended = false;
          for (let j = 0; j < drafts.length; j++) {
            const row = await constrained(rows[j]);
            if (greedy) {
              const t = sampler.pick(row, history, tokenizer.vocabSize);
              if (t !== drafts[j]) {
                chosen = t;
                break;
              }
            } else {
              if (!("logits" in row)) throw topOneDraftCannotSample();
              const p = sampler.distribution(row.logits, history, tokenizer.vocabSize);
              const r = rejectionStep(sampler, p, qs[j], drafts[j]);
              if (!r.accepted) {
                chosen = r.id;
                break;
              }
            }
            accepted++;
            if (take(drafts[j])) {
              ended = true;
              break;
            }
          }
          const ta = performance.now();
          await sm.accept(1 + accepted, { signal });
          decodeMs += performance.now() - ta;
          decodeSteps += 1 + accepted;
          spec!.accepted += accepted;
          if (ended) break;
          if (chosen === undefined) out = rows[drafts.length]; // all accepted: the bonus row
        }
      }
    } catch (err) {
      if (!(signal.aborted && isAbortError(err))) throw err;
      detail = { type: "abort" };
    } finally {
      grammar?.dispose();
    }

    if (detail?.type !== "stop_string") {
      feedText(decoder.flush());
      const rest = matcher.flush();
      rawText += rest;
      deliver(segmenter.push(rest));
    }
    deliver(segmenter.finish());

    const finishDetail = detail ?? { type: "abort" };
    let finishReason: FinishReason;
    if (finishDetail.type === "abort") finishReason = "abort";
    else if (finishDetail.type === "max_tokens" || finishDetail.type === "context_full")
      finishReason = "length";
    else finishReason = toolCalls.length > 0 ? "tool_calls" : "stop";

    const totalMs = performance.now() - this.t0;
    return {
      text,
      thinking,
      rawText,
      toolCalls,
      toolCallErrors,
      tokenIds: generated,
      finishReason,
      finishDetail,
      stats: {
        promptTokens: promptIds.length,
        cachedTokens,
        generatedTokens: sampledTokens,
        timeToFirstTokenMs,
        prefillMs,
        prefillTokensPerSecond: prefillMs > 0 ? (promptIds.length - cachedTokens) / (prefillMs / 1000) : 0,
        decodeSteps,
        decodeMs,
        decodeTokensPerSecond: decodeMs > 0 ? decodeSteps / (decodeMs / 1000) : 0,
        totalMs,
        maskMs,
        ...(spec ? { speculative: speculativeStats(spec.drafted, spec.accepted, spec.calls) } : {}),
      },
    };
  }

  /** The prompt as ids, and as text (for spotting a generation prompt that opened <think>). */
  private prompt(): { ids: number[]; text: string } {
    const { tokenizer, options: o } = this;
    if (o.messages !== undefined) {
      if (o.prompt !== undefined)
        throw new InvalidArgumentError("generate: give either `prompt` or `messages`, not both");
      // special-token text inside the messages stays text (see Tokenizer.encodeChat)
      return tokenizer.encodeChat(o.messages, {
        // `strict` steers decoding, not the prompt: the model sees the same tools either way
        tools: o.tools?.map(({ function: { strict: _, ...fn }, ...t }) => ({ ...t, function: fn })),
        enableThinking: o.enableThinking,
        extra: o.templateVariables,
      });
    }
    // a raw prompt is the caller's own text: special tokens written in it are control tokens
    if (typeof o.prompt === "string") return { ids: tokenizer.encode(o.prompt), text: o.prompt };
    if (Array.isArray(o.prompt) || o.prompt instanceof Int32Array) {
      const ids = promptIdArray(o.prompt);
      return { ids, text: tokenizer.decode(ids.slice(-64)) };
    }
    throw new InvalidArgumentError("generate: needs `prompt` (text or token ids) or `messages`");
  }
}

/**
 * Prompt ids as a plain array, each checked, in one indexed pass: a prompt can hold hundreds of
 * thousands of ids, and Array.from of a typed array takes ~6x as long (25 ms for 400,000), time in
 * which a server answers nobody else.
 */
function promptIdArray(p: readonly number[] | Int32Array): number[] {
  const ids = new Array<number>(p.length);
  for (let i = 0; i < p.length; i++) {
    const id = p[i];
    if (!Number.isInteger(id) || id < 0)
      throw new InvalidArgumentError(`generate: prompt id ${id} is not a token id`);
    ids[i] = id;
  }
  return ids;
}

/**
 * Brings the model to the end of the prompt from a fresh state: restores the longest cached prefix
 * (when there is a cache and the model can snapshot), prefills the rest, and stores snapshots at
 * the points the cache plans. Returns the output for the last prompt token.
 */
async function prefillPrompt(
  model: StepModel,
  ids: readonly number[],
  o: GenerateOptions,
  signal: AbortSignal,
): Promise<{ out: StepOutput; cachedTokens: number }> {
  const cache = o.promptCache;
  if (!cache || !canSnapshot(model)) {
    await model.reset();
    return { out: await model.prefill(Int32Array.from(ids), { signal }), cachedTokens: 0 };
  }
  const hit = cache.lookup(ids);
  if (hit) await model.restore(hit.snapshot);
  else await model.reset();
  let at = hit?.tokens ?? 0;
  for (const point of cache.plan(ids, at, o.cacheCheckpoints)) {
    await model.prefill(Int32Array.from(ids.slice(at, point)), { signal });
    cache.store(ids.slice(0, point), await model.snapshot());
    at = point;
  }
  const out = await model.prefill(Int32Array.from(ids.slice(at)), { signal });
  return { out, cachedTokens: hit?.tokens ?? 0 };
}

/**
 * Qwen3.5's thinking generation prompt ends in `<|im_start|>assistant\n<think>\n`, so the model's
 * first tokens are already thinking. True when the last turn of the prompt opened <think> and did
 * not close it.
 */
export function opensThinking(promptText: string): boolean {
  const turn = promptText.slice(Math.max(0, promptText.lastIndexOf("<|im_start|>")));
  return turn.lastIndexOf(THINK_OPEN) > turn.lastIndexOf(THINK_CLOSE);
}

/** A speculative run's model, its γ and its counters. */
interface Speculation {
  readonly model: SpeculativeStepModel;
  readonly gamma: number;
  drafted: number;
  accepted: number;
  calls: number;
}

/** Checks `speculative` / `gamma` against the model (typed errors) before any work is done. */
function speculation(model: StepModel, o: GenerateOptions): Speculation {
  if (o.speculative !== "mtp") {
    throw new InvalidArgumentError(
      `generate: speculative must be "mtp", got ${JSON.stringify(o.speculative)}`,
    );
  }
  if (!canSpeculate(model)) throw speculationUnsupported(model);
  const k = model.maxDraftTokens;
  const gamma = o.gamma ?? Math.min(2, k);
  if (!Number.isInteger(gamma) || gamma < 1 || gamma > k) {
    throw new InvalidArgumentError(
      `generate: gamma must be an integer from 1 to the model's maxDraftTokens (${k}), got ${o.gamma}`,
    );
  }
  return { model, gamma, drafted: 0, accepted: 0, calls: 0 };
}

function topOneDraftCannotSample(): SpeculativeUnsupportedError {
  return new SpeculativeUnsupportedError(
    "speculative sampling needs the draft head's logits (q, for the rejection rule), but this model's " +
      "MTP head returns only its top-1 token; decode greedily (temperature 0) or convert with a logits head",
  );
}

function topOneCannotBeMasked(): UnsupportedSamplingError {
  return new UnsupportedSamplingError(
    "constrained decoding (jsonSchema, grammar, strict or forced tool calls) masks the model's logits, " +
      "but this model returns only its top-1 token (a chain converted with --argmax); convert it " +
      "with a full logits head to constrain its output",
  );
}

/** The constraint's matcher at the start of the answer (past `answerPrefix`, if the prompt wrote one). */
async function startMatcher(
  tokenizer: Tokenizer,
  plan: ConstraintPlan,
  eosTokenIds: readonly number[],
  answerPrefix: string | undefined,
): Promise<TokenMatcher> {
  const matcher = await compileConstraint(tokenizer, plan.spec, eosTokenIds);
  if (answerPrefix && !matcher.acceptText(answerPrefix)) {
    matcher.dispose();
    throw new InvalidArgumentError(
      `answerPrefix ${JSON.stringify(answerPrefix.slice(0, 60))} is not a start the constraint allows`,
    );
  }
  return matcher;
}
