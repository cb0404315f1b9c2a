/**
 * The request bodies the server accepts, as zod schemas: the OpenAI fields it honours, a few vLLM
 * extensions (`top_k`, `min_p`, `repetition_penalty`, `chat_template_kwargs`, `reasoning_content`),
 * and explicit refusals for what it cannot do (n > 1, logprobs, non-text content).
 * Unknown fields are ignored, as OpenAI-compatible servers do (clients send `user`, `store`, …).
 * A failed check becomes a 400 naming the field (`messages[1].content`).
 */
import { z } from "zod";
import { ApiError, invalidParam } from "./errors.js";

const nullish = <T extends z.ZodType>(t: T) => t.nullish().transform((v) => v ?? undefined);

/** Text content: a string, or OpenAI content parts of which only `text` parts are supported. */
const textPart = z.object({ type: z.literal("text"), text: z.string() });
const anyPart = z.looseObject({ type: z.string() }).superRefine((p, ctx) => {
  if (p.type !== "text") {
    ctx.addIssue({
      code: "custom",
      path: ["type"],
      message: `content parts of type "${p.type}" are not supported (this server is text-only); send "text" parts`,
    });
  }
});
const contentParts = z
  .array(z.union([textPart, anyPart]))
  .transform((parts) => parts.map((p) => ({ type: "text" as const, text: (p as { text: string }).text })));
const content = z.union([z.string(), contentParts]);

const toolCallIn = z.object({
  id: z.string().optional(),
  type: z.literal("function").default("function"),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

const systemMessage = z.object({
  role: z.enum(["system", "developer"]),
  content,
  name: z.string().optional(),
});
const userMessage = z.object({ role: z.literal("user"), content, name: z.string().optional() });
const assistantMessage = z.object({
  role: z.literal("assistant"),
  content: content.nullish(),
  reasoning_content: z.string().nullish(),
  tool_calls: z.array(toolCallIn).nullish(),
  name: z.string().optional(),
});
const toolMessage = z.object({
  role: z.literal("tool"),
  content,
  tool_call_id: z.string(),
  name: z.string().optional(),
});

export const chatMessageSchema = z.discriminatedUnion("role", [
  systemMessage,
  userMessage,
  assistantMessage,
  toolMessage,
]);
export type ChatMessageIn = z.infer<typeof chatMessageSchema>;

/**
 * OpenAI's response_format: text, JSON mode (any object) or structured outputs (a JSON Schema;
 * which keywords are enforced is checked when the request is planned, see chat.ts).
 */
function responseFormatSchema() {
  return z.discriminatedUnion(
    "type",
    [
      z.object({ type: z.literal("text") }),
      z.object({ type: z.literal("json_object") }),
      z.object({
        type: z.literal("json_schema"),
        json_schema: z.object({
          name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, _ or -"),
          description: z.string().optional(),
          schema: z.union([z.record(z.string(), z.unknown()), z.boolean()]).optional(),
          strict: z.boolean().nullish(),
        }),
      }),
    ],
    {
      error:
        'must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {…}}',
    },
  );
}
export type ResponseFormat = z.infer<ReturnType<typeof responseFormatSchema>>;

export const toolSchema = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, "must be 1-64 letters, digits, _ . : or -"),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});
export type ToolIn = z.infer<typeof toolSchema>;

export const toolChoiceSchema = z.union(
  [
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.literal("function"), function: z.object({ name: z.string().min(1) }) }),
  ],
  { error: 'must be "none", "auto", "required" or {"type": "function", "function": {"name": NAME}}' },
);
export type ToolChoice = z.infer<typeof toolChoiceSchema>;

const stop = nullish(z.union([z.string().min(1), z.array(z.string().min(1)).max(16)])).transform((s) =>
  s === undefined ? undefined : Array.isArray(s) ? s : [s],
);

/** Fields both endpoints share: sampling, limits, stop strings, streaming. */
const common = {
  model: z.string().min(1),
  stream: nullish(z.boolean()),
  stream_options: nullish(z.object({ include_usage: nullish(z.boolean()) })),
  max_tokens: nullish(z.number().int().min(1)),
  temperature: nullish(z.number().min(0).max(2)),
  top_p: nullish(z.number().gt(0).max(1)),
  top_k: nullish(z.number().int().min(-1)),
  min_p: nullish(z.number().min(0).max(1)),
  presence_penalty: nullish(z.number().min(-2).max(2)),
  frequency_penalty: nullish(z.number().min(-2).max(2)),
  repetition_penalty: nullish(z.number().gt(0).max(10)),
  seed: nullish(
    z
      .number()
      .int()
      .min(0)
      .max(2 ** 32 - 1),
  ),
  stop,
  n: nullish(z.literal(1, { error: "only n = 1 is supported (one model state, one sequence)" })),
  user: nullish(z.string()),
};

export const chatCompletionSchema = z.object({
  ...common,
  messages: z.array(chatMessageSchema).min(1),
  max_completion_tokens: nullish(z.number().int().min(1)),
  tools: nullish(z.array(toolSchema)),
  tool_choice: nullish(toolChoiceSchema),
  parallel_tool_calls: nullish(z.boolean()),
  chat_template_kwargs: nullish(
    z.looseObject({ enable_thinking: nullish(z.boolean()) }).transform((o) => o as Record<string, unknown>),
  ),
  logprobs: nullish(z.literal(false, { error: "logprobs are not supported by this server" })),
  top_logprobs: nullish(z.literal(0, { error: "logprobs are not supported by this server" })),
  response_format: nullish(responseFormatSchema()),
});
export type ChatCompletionRequest = z.infer<typeof chatCompletionSchema>;

export const completionSchema = z.object({
  ...common,
  /**
   * A string, a token-id array, or a list of either. Lists of several prompts parse, so that the
   * planner can say plainly that one prompt per request is served.
   */
  prompt: z.union([
    z.string(),
    z.array(z.number().int().min(0)).min(1),
    z.array(z.string()).min(1),
    z.array(z.array(z.number().int().min(0)).min(1)).min(1),
  ]),
  echo: nullish(z.boolean()),
  logprobs: nullish(z.literal(0, { error: "logprobs are not supported by this server" })),
  best_of: nullish(z.literal(1, { error: "only best_of = 1 is supported" })),
  suffix: nullish(z.literal("", { error: "suffix (fill-in-the-middle) is not supported" })),
});
export type CompletionRequest = z.infer<typeof completionSchema>;

/**
 * The JSON parser of request bodies (instead of fastify's, whose refusal of a "__proto__" key reads
 * "Body is not valid JSON"): a syntax error is a 400 quoting the parser, and a key that names a
 * prototype (`__proto__`, or `prototype` inside `constructor`) anywhere is a 400 naming where.
 */
export function parseJsonBody(text: string): unknown {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new ApiError(400, `We could not parse the JSON body of your request: ${(err as Error).message}`, {
      code: "invalid_json",
    });
  }
  const at = prototypeKey(v, []);
  if (at) {
    const where = paramOf(at);
    throw invalidParam(
      where,
      `${where}: keys that name a prototype ("__proto__", "constructor"."prototype") are not accepted`,
    );
  }
  return v;
}

/** The path of the first "__proto__" key, or of a "prototype" key inside a "constructor" one. */
function prototypeKey(v: unknown, path: PropertyKey[]): PropertyKey[] | undefined {
  if (typeof v !== "object" || v === null) return undefined;
  const entries = Array.isArray(v) ? v.map((x, i) => [i, x] as const) : Object.entries(v);
  for (const [k, x] of entries) {
    if (k === "__proto__" || (k === "prototype" && path.at(-1) === "constructor")) return [...path, k];
    const inner = prototypeKey(x, [...path, k]);
    if (inner) return inner;
  }
  return undefined;
}

/** Parses a body, or throws a 400 naming the first field at fault. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (body === undefined || body === null || typeof body !== "object" || Array.isArray(body)) {
    throw invalidParam(null, "the request body must be a JSON object", "invalid_json");
  }
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = deepestIssue(r.error.issues);
  const param = paramOf(issue.path);
  const missing = issue.code === "invalid_type" && /received undefined/.test(issue.message);
  throw invalidParam(
    param || null,
    `${param || "body"}: ${missing ? "is required" : issue.message}`,
    missing ? "missing_required_parameter" : issue.code === "invalid_type" ? "invalid_type" : "invalid_value",
  );
}

type Issue = z.core.$ZodIssue;

/**
 * A union failure carries the failure of each branch; the branch that got furthest (the longest
 * path) names the field best, e.g. `messages[0].content[1].type` rather than `messages[0]`.
 */
function deepestIssue(issues: readonly Issue[], prefix: PropertyKey[] = []): Issue & { path: PropertyKey[] } {
  let best: (Issue & { path: PropertyKey[] }) | undefined;
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    let candidate: Issue & { path: PropertyKey[] } = { ...issue, path };
    if (issue.code === "invalid_union" && issue.errors.length > 0) {
      for (const branch of issue.errors) {
        const inner = deepestIssue(branch, path);
        if (inner.path.length > candidate.path.length) candidate = inner;
      }
    }
    if (!best || candidate.path.length > best.path.length) best = candidate;
  }
  return best ?? ({ code: "custom", message: "invalid request", path: prefix, input: undefined } as never);
}

/** ["messages", 1, "content"] → "messages[1].content" */
export function paramOf(path: readonly PropertyKey[]): string {
  let s = "";
  for (const p of path) {
    if (typeof p === "number") s += `[${p}]`;
    else s += s ? `.${String(p)}` : String(p);
  }
  return s;
}
