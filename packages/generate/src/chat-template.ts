import { Template } from "@huggingface/jinja";
import { ChatTemplateError } from "./errors.js";

/** An OpenAI-style tool (function) specification, as chat templates expect in `tools`. */
export interface ToolSpec {
  type: "function";
  function: {
    name: string;
    description?: string;
    /** JSON Schema of the arguments object. */
    parameters?: Record<string, unknown>;
    /**
     * Constrain this tool's calls to its name and `parameters` (constrained decoding), as OpenAI's
     * strict function calling. Calls forced by `toolChoice` are constrained whatever this says.
     */
    strict?: boolean;
  };
}

/** A tool call as this package parses it from the model's output. */
export interface ToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** A tool call in the OpenAI wire shape (what chat UIs store in `tool_calls`). */
export interface OpenAIToolCall {
  id?: string;
  type?: "function";
  function: { name: string; arguments: Record<string, unknown> | string };
}

/** A piece of multi-part content (OpenAI style); templates render the `text` parts. */
export interface ContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content?: string | ContentPart[] | null;
  /** Assistant turns: the thinking text, kept apart from `content` (Qwen3.5's template re-wraps it in <think>). */
  reasoning_content?: string;
  /** Assistant turns: calls the model made, in either shape. */
  tool_calls?: Array<ToolCall | OpenAIToolCall>;
  /** Tool results: which call this answers / which tool produced it. */
  tool_call_id?: string;
  name?: string;
}

export interface ApplyChatTemplateOptions {
  /** Append the assistant header so the model answers next. Default true. */
  addGenerationPrompt?: boolean;
  /**
   * Qwen3.5's switch between thinking and direct answers. Left undefined, the template's own default
   * applies (it differs between Qwen3.5 repos), so it is passed only when set.
   */
  enableThinking?: boolean;
  tools?: ToolSpec[];
  /** Further variables for templates that read more (e.g. `preserve_thinking`). */
  extra?: Record<string, unknown>;
}

/** A parsed Jinja chat template, rendered through `@huggingface/jinja`. */
export class ChatTemplate {
  readonly source: string;
  private readonly template: Template;
  private readonly specialTokens: Record<string, string>;

  constructor(
    source: string,
    specialTokens: { bosToken?: string; eosToken?: string; padToken?: string } = {},
  ) {
    this.source = source;
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new ChatTemplateError(`chat template does not parse: ${(err as Error).message}`, { cause: err });
    }
    this.specialTokens = {};
    if (specialTokens.bosToken !== undefined) this.specialTokens.bos_token = specialTokens.bosToken;
    if (specialTokens.eosToken !== undefined) this.specialTokens.eos_token = specialTokens.eosToken;
    if (specialTokens.padToken !== undefined) this.specialTokens.pad_token = specialTokens.padToken;
  }

  render(messages: ChatMessage[], options: ApplyChatTemplateOptions = {}): string {
    if (messages.length === 0) throw new ChatTemplateError("cannot render an empty message list");
    const vars: Record<string, unknown> = {
      ...this.specialTokens,
      ...options.extra,
      messages: messages.map(toTemplateMessage),
      add_generation_prompt: options.addGenerationPrompt ?? true,
    };
    if (options.tools && options.tools.length > 0) vars.tools = options.tools;
    if (options.enableThinking !== undefined) vars.enable_thinking = options.enableThinking;
    try {
      return this.template.render(vars);
    } catch (err) {
      throw new ChatTemplateError(`chat template failed to render: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
}

/** Templates index `message.content` as a string and `tool_call.function.*`; give them exactly that. */
function toTemplateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content ?? "" };
  if (m.reasoning_content !== undefined) out.reasoning_content = m.reasoning_content;
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) =>
      "function" in c
        ? { type: "function", ...(c.id !== undefined ? { id: c.id } : {}), function: c.function }
        : { type: "function", function: { name: c.name, arguments: c.arguments } },
    );
  }
  return out;
}
