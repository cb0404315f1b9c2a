/**
 * /v1/completions: a prompt (text or token ids) continued as is — no chat template, no thinking or
 * tool-call parsing. The answer is the raw text the model wrote, markers included.
 */
import {
  StopStringMatcher,
  type StreamingDecoder,
  THINK_CLOSE,
  THINK_OPEN,
  TOOL_CALL_CLOSE,
  TOOL_CALL_OPEN,
  type Tokenizer,
} from "@anemll-qwen35/generate";
import { invalidParam } from "./errors.js";
import type { ServedModel } from "./models.js";
import { type GenerationPlan, planSampling, promptCanFit, promptFits } from "./plan.js";
import type { CompletionRequest } from "./schemas.js";

export interface CompletionPlan extends GenerationPlan {
  /** `echo`: the prompt text, sent before the completion. */
  readonly echo: string | undefined;
}

/** OpenAI's default for /v1/completions when `max_tokens` is left out. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;

export async function planCompletion(req: CompletionRequest, served: ServedModel): Promise<CompletionPlan> {
  const { tokenizer } = served;
  let prompt: string | number[];
  if (typeof req.prompt === "string" || typeof req.prompt[0] === "number")
    prompt = req.prompt as string | number[];
  else if (req.prompt.length === 1) prompt = req.prompt[0] as string | number[];
  else {
    throw invalidParam(
      "prompt",
      `${req.prompt.length} prompts were sent; this server completes one prompt per request (n = 1)`,
    );
  }
  let promptIds: number[];
  if (typeof prompt === "string") {
    promptCanFit(prompt.length, served, "prompt");
    promptIds = await served.prompts.encode({ kind: "text", text: prompt }, prompt.length);
  } else {
    promptIds = prompt as number[];
    const bad = promptIds.findIndex((id) => id >= tokenizer.vocabSize);
    if (bad >= 0) {
      throw invalidParam(
        `prompt[${bad}]`,
        `token id ${promptIds[bad]} is outside the vocabulary (0..${tokenizer.vocabSize - 1})`,
      );
    }
  }
  promptFits(promptIds.length, served, "prompt");
  return {
    promptIds,
    sampling: planSampling(req, served),
    maxTokens: req.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS,
    stop: req.stop ?? [],
    stream: req.stream ?? false,
    includeUsage: req.stream_options?.include_usage ?? false,
    echo: req.echo ? (typeof prompt === "string" ? prompt : tokenizer.decode(promptIds)) : undefined,
  };
}

const MARKERS = new Set([THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE]);

/**
 * The generation's `rawText`, token by token, for streaming: the same steps generate() takes
 * (control tokens skipped, UTF-8-safe decoding, stop strings held back until they cannot match), so
 * the streamed pieces join to exactly the non-streaming text.
 */
export class RawTextStream {
  private readonly decoder: StreamingDecoder;
  private readonly matcher: StopStringMatcher;
  private stopped = false;

  constructor(
    private readonly tokenizer: Tokenizer,
    stop: readonly string[],
  ) {
    this.decoder = tokenizer.streamingDecoder();
    this.matcher = new StopStringMatcher(stop);
  }

  /** Text released by this token ("" while held back). */
  push(id: number): string {
    if (this.stopped) return "";
    const t = this.tokenizer;
    // <|im_start|> and friends are control tokens, not text (the markers above are text).
    if (t.isSpecial(id) && !MARKERS.has(t.idToToken(id) ?? "")) return "";
    const m = this.matcher.push(this.decoder.push(id));
    if (m.stopped) this.stopped = true;
    return m.emit;
  }

  /** What is left once generation ends. */
  flush(): string {
    if (this.stopped) return "";
    const m = this.matcher.push(this.decoder.flush());
    return m.stopped ? m.emit : m.emit + this.matcher.flush();
  }
}
