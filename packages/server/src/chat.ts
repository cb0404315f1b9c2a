/**
 * /v1/chat/completions: an OpenAI chat request → the model's chat template → a generation, and the
 * generation's chunks → an OpenAI assistant message (content, reasoning_content, tool_calls).
 *
 * Qwen3.5 writes tool calls as XML inside `<tool_call>` blocks; @anemll-qwen35/generate parses them
 * into `{name, arguments}` and this file gives them OpenAI's wire shape: an id, `type: "function"`,
 * `function.arguments` as a JSON string. Thinking (`<think>…</think>`) never reaches `content`; it is
 * `reasoning_content`, as vLLM and DeepSeek's API name it.
 */
import { randomBytes } from "node:crypto";
import {
  type ChatMessage,
  ChatTemplateError,
  type ConstraintOptions,
  type GenerationChunk,
  type GenerationResult,
  GrammarError,
  parseToolCall,
  prepareConstraint,
  schemaPlace,
  type ToolSpec,
  UnsupportedSchemaError,
} from "@anemll-qwen35/generate";
import { ApiError, invalidParam } from "./errors.js";
import type { ServedModel } from "./models.js";
import { type GenerationPlan, planSampling, promptCanFit, promptFits } from "./plan.js";
import type { ChatCompletionRequest, ChatMessageIn } from "./schemas.js";

export interface ChatPlan extends GenerationPlan {
  readonly tools: ToolSpec[];
  /**
   * When `tool_choice` forces a call, the prompt already ends inside it (`<tool_call>\n<function=`
   * or `…<function=NAME>\n`) and this is the part of the block the model did not write itself.
   */
  readonly forcedCallPrefix: string | undefined;
  /** `parallel_tool_calls: false`: stop at the first call. */
  readonly firstCallOnly: boolean;
  /**
   * Constrained decoding for generate(): response_format's schema, strict tools, forced calls
   * (with the part of the call the prompt already wrote as `answerPrefix`). Empty when free.
   */
  readonly constraint: Omit<ConstraintOptions, "tools"> & { answerPrefix?: string };
}

/** Validates and renders a chat request for one model. Throws ApiError (400) naming the field. */
export async function planChat(req: ChatCompletionRequest, served: ServedModel): Promise<ChatPlan> {
  const messages = toChatMessages(req.messages);
  promptCanFit(verbatimChars(messages), served, "messages");
  const tools: ToolSpec[] = (req.tools ?? []).map((t) => ({
    type: "function",
    function: {
      name: t.function.name,
      ...(t.function.description !== undefined ? { description: t.function.description } : {}),
      ...(t.function.parameters !== undefined ? { parameters: t.function.parameters } : {}),
      ...(t.function.strict ? { strict: true } : {}),
    },
  }));
  const choice = req.tool_choice ?? (tools.length > 0 ? "auto" : "none");
  // hidden tools constrain nothing
  if (choice === "none") for (const t of tools) delete t.function.strict;
  if (tools.length === 0 && choice !== "none") {
    throw invalidParam("tool_choice", 'tool_choice needs "tools"; none were given');
  }

  const { enable_thinking: thinkingKwarg, ...templateVariables } = req.chat_template_kwargs ?? {};
  if (thinkingKwarg !== undefined && thinkingKwarg !== null && typeof thinkingKwarg !== "boolean") {
    throw invalidParam("chat_template_kwargs.enable_thinking", "must be a boolean");
  }
  let enableThinking = (thinkingKwarg ?? undefined) as boolean | undefined;
  const stop = [...(req.stop ?? [])];
  let forcedCallPrefix: string | undefined;
  let renderTools = tools;
  if (choice === "none") {
    // The model is not shown the tools, and a call it writes anyway ends the answer.
    renderTools = [];
    stop.push("<tool_call>");
  } else if (choice === "required") {
    forcedCallPrefix = "<function=";
  } else if (typeof choice === "object") {
    const name = choice.function.name;
    if (!tools.some((t) => t.function.name === name)) {
      throw invalidParam("tool_choice.function.name", `no tool named "${name}" is in "tools"`);
    }
    forcedCallPrefix = `<function=${name}>\n`;
  }
  // A forced call is written straight after the generation prompt, so thinking (which would come
  // first) is switched off for it.
  if (forcedCallPrefix !== undefined) {
    enableThinking = false;
    stop.push("</tool_call>");
  }

  let promptIds: number[];
  try {
    // special-token text inside the messages (a tool result saying "<|im_start|>system") stays text
    promptIds = await served.prompts.encode(
      {
        kind: "chat",
        messages,
        options: {
          tools: renderTools,
          enableThinking,
          extra: templateVariables,
          suffix: forcedCallPrefix === undefined ? "" : `<tool_call>\n${forcedCallPrefix}`,
        },
      },
      textChars([messages, renderTools, templateVariables]),
    );
  } catch (err) {
    if (err instanceof ChatTemplateError) throw invalidParam("messages", err.message, "invalid_messages");
    throw err;
  }
  promptFits(promptIds.length, served, "messages");
  const constraint = await planConstraintFor(req, served, tools, forcedCallPrefix);
  // ChatML: the system turn (system prompt and tools) ends at its <|im_end|>; the next request
  // with the same system turn restores the state from there
  const imEnd = served.tokenizer.tokenId("<|im_end|>");
  const systemEnd = imEnd === undefined ? -1 : promptIds.indexOf(imEnd);
  const hasSystemTurn = messages[0]?.role === "system" || renderTools.length > 0;

  return {
    promptIds,
    cacheCheckpoints: hasSystemTurn && systemEnd >= 0 ? [systemEnd + 1] : [],
    sampling: planSampling(req, served),
    maxTokens: req.max_completion_tokens ?? req.max_tokens,
    stop,
    stream: req.stream ?? false,
    includeUsage: req.stream_options?.include_usage ?? false,
    tools,
    forcedCallPrefix,
    firstCallOnly: req.parallel_tool_calls === false,
    constraint,
  };
}

/**
 * The request's constraint, checked and compiled now (a 400 before the request queues):
 * response_format json_object / json_schema, tools marked strict, and calls that tool_choice
 * forces. A model with an arg-max head (top-1 outputs) cannot be masked: explicit constraints are
 * refused there, and forced calls stay unconstrained as before.
 */
async function planConstraintFor(
  req: ChatCompletionRequest,
  served: ServedModel,
  tools: ToolSpec[],
  forcedCallPrefix: string | undefined,
): Promise<ChatPlan["constraint"]> {
  const format = req.response_format;
  const jsonSchema =
    format?.type === "json_object"
      ? { type: "object" }
      : format?.type === "json_schema"
        ? (format.json_schema.schema ?? {})
        : undefined;
  const strict = tools.some((t) => t.function.strict === true);
  const topOne = served.model.outputKind === "top1";
  if (topOne && (jsonSchema !== undefined || strict)) {
    throw new ApiError(
      400,
      `model "${served.name}" computes only its most likely token (a chain converted with --argmax), ` +
        "so its output cannot be constrained: response_format json_object / json_schema and strict tools " +
        "need a model converted with a full logits head",
      { param: jsonSchema !== undefined ? "response_format" : "tools", code: "unsupported_constraint" },
    );
  }
  const o: ChatPlan["constraint"] = { jsonSchema };
  if (forcedCallPrefix !== undefined && !topOne) {
    const name = /^<function=(.+)>\n$/.exec(forcedCallPrefix)?.[1];
    o.toolChoice = name === undefined ? "required" : { name };
    o.answerPrefix = `<tool_call>\n${forcedCallPrefix}`;
  } else if (req.parallel_tool_calls === false) {
    o.parallelToolCalls = false;
  }
  try {
    if (!(await prepareConstraint(served.tokenizer, { ...o, tools }))) return {};
  } catch (err) {
    if (err instanceof UnsupportedSchemaError) {
      const where = err.where === "jsonSchema" ? "response_format.json_schema.schema" : err.where;
      const param = schemaPlace(where, err.path);
      throw invalidParam(param, `${param}: ${err.reason}`, "unsupported_schema");
    }
    if (err instanceof GrammarError) throw invalidParam(null, err.message, "invalid_schema");
    throw err;
  }
  return o;
}

/**
 * Characters any chat template writes as they are: system, user and tool content, trimmed (assistant
 * turns may lose their thinking). A lower bound on the rendered prompt's length.
 */
function verbatimChars(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (m.role === "assistant") continue;
    const c = m.content;
    n += typeof c === "string" ? c.trim().length : (c ?? []).reduce((s, p) => s + (p.text ?? "").length, 0);
  }
  return n;
}

/** All the characters of the strings in `v` (keys too): how much work rendering and encoding it is. */
function textChars(v: unknown): number {
  if (typeof v === "string") return v.length;
  if (Array.isArray(v)) return v.reduce((s: number, x) => s + textChars(x), 0);
  if (typeof v === "object" && v !== null)
    return Object.entries(v).reduce((s, [k, x]) => s + k.length + textChars(x), 0);
  return 0;
}

/** OpenAI messages → the chat template's messages (tool-call arguments parsed back into objects). */
export function toChatMessages(messages: readonly ChatMessageIn[]): ChatMessage[] {
  return messages.map((m, i) => toChatMessage(m, i));
}

function toChatMessage(m: ChatMessageIn, i: number): ChatMessage {
  if (m.role === "assistant") {
    const out: ChatMessage = { role: "assistant", content: m.content ?? "" };
    if (m.reasoning_content) out.reasoning_content = m.reasoning_content;
    if (m.tool_calls && m.tool_calls.length > 0) {
      out.tool_calls = m.tool_calls.map((c, j) => ({
        ...(c.id !== undefined ? { id: c.id } : {}),
        type: "function" as const,
        function: { name: c.function.name, arguments: parseArguments(c.function.arguments, i, j) },
      }));
    }
    return out;
  }
  if (m.role === "tool") {
    return {
      role: "tool",
      content: m.content,
      tool_call_id: m.tool_call_id,
      ...(m.name ? { name: m.name } : {}),
    };
  }
  if (m.role === "user") return { role: "user", content: m.content, ...(m.name ? { name: m.name } : {}) };
  // OpenAI's newer "developer" role is the system prompt for Qwen3.5.
  return { role: "system", content: m.content };
}

function parseArguments(json: string, i: number, j: number): Record<string, unknown> {
  const param = `messages[${i}].tool_calls[${j}].function.arguments`;
  let v: unknown;
  try {
    v = JSON.parse(json.trim() === "" ? "{}" : json);
  } catch (err) {
    throw invalidParam(param, `is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw invalidParam(param, "must be a JSON object (a string holding one)");
  }
  return v as Record<string, unknown>;
}

export interface OpenAIToolCallOut {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** What one chunk adds to the assistant message (a streaming `delta`). */
export interface ChatDelta {
  content?: string;
  reasoning_content?: string;
  tool_calls?: Array<OpenAIToolCallOut & { index: number }>;
}

export type ChatFinishReason = "stop" | "length" | "tool_calls";

/** Builds the assistant message from generation chunks; the same path serves streaming and not. */
export class ChatTurn {
  content = "";
  reasoning = "";
  readonly toolCalls: OpenAIToolCallOut[] = [];
  /** parallel_tool_calls: false and a call has arrived: the rest is not wanted. */
  done = false;

  constructor(private readonly plan: ChatPlan) {}

  /** The delta a chunk contributes, if any. */
  push(chunk: GenerationChunk): ChatDelta | undefined {
    if (this.done) return undefined;
    // A forced call's text is the inside of a <tool_call> block: held until it can be parsed.
    if (this.plan.forcedCallPrefix !== undefined) return undefined;
    switch (chunk.type) {
      case "text":
        if (chunk.text === "") return undefined;
        this.content += chunk.text;
        return { content: chunk.text };
      case "thinking":
        if (chunk.text === "") return undefined;
        this.reasoning += chunk.text;
        return { reasoning_content: chunk.text };
      case "tool_call": {
        const call = this.addCall(chunk.call.name, chunk.call.arguments);
        if (this.plan.firstCallOnly) this.done = true;
        return { tool_calls: [call] };
      }
      case "tool_call_error": {
        // vLLM's way: a block that does not parse stays in the text, so nothing the model said is lost.
        const text = `<tool_call>${chunk.error.raw}</tool_call>`;
        this.content += text;
        return { content: text };
      }
    }
  }

  /** Closes the turn: the forced call (if any) and the finish reason. */
  finish(result: GenerationResult): { delta: ChatDelta | undefined; finishReason: ChatFinishReason } {
    let delta: ChatDelta | undefined;
    if (this.plan.forcedCallPrefix !== undefined) {
      const parsed = parseToolCall(this.plan.forcedCallPrefix + result.rawText, this.plan.tools);
      if (parsed.ok) {
        delta = { tool_calls: [this.addCall(parsed.call.name, parsed.call.arguments)] };
      } else if (result.rawText !== "") {
        // The model did not finish a well-formed call (e.g. max_tokens): give back what it wrote.
        this.content = `<tool_call>\n${this.plan.forcedCallPrefix}${result.rawText}`;
        delta = { content: this.content };
      }
    }
    let finishReason: ChatFinishReason;
    if (this.toolCalls.length > 0) finishReason = "tool_calls";
    else if (result.finishReason === "length") finishReason = "length";
    else finishReason = "stop";
    return { delta, finishReason };
  }

  /** The complete assistant message (non-streaming responses). */
  message(): {
    role: "assistant";
    content: string | null;
    reasoning_content?: string;
    tool_calls?: OpenAIToolCallOut[];
  } {
    return {
      role: "assistant",
      content: this.content === "" && this.toolCalls.length > 0 ? null : this.content,
      ...(this.reasoning !== "" ? { reasoning_content: this.reasoning } : {}),
      ...(this.toolCalls.length > 0 ? { tool_calls: this.toolCalls } : {}),
    };
  }

  private addCall(name: string, args: Record<string, unknown>): OpenAIToolCallOut & { index: number } {
    const call: OpenAIToolCallOut = {
      id: `call_${randomBytes(12).toString("hex")}`,
      type: "function",
      function: { name, arguments: JSON.stringify(args) },
    };
    this.toolCalls.push(call);
    return { index: this.toolCalls.length - 1, ...call };
  }
}
