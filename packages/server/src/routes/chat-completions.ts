/** POST /v1/chat/completions: chat messages → the assistant's message (content, reasoning, tool calls). */
import type { FastifyInstance } from "fastify";
import { ChatTurn, planChat } from "../chat.js";
import { chatCompletionSchema } from "../schemas.js";
import type { RouteContext } from "./context.js";
import { generateTurn, generationRoute, logResult, usage } from "./turn.js";

export function registerChatCompletions(app: FastifyInstance, ctx: RouteContext): void {
  const route = {
    path: "/v1/chat/completions",
    kind: "chat",
    schema: chatCompletionSchema,
    plan: planChat,
  } as const;
  generationRoute(app, ctx, route, async (t, plan) => {
    const chat = new ChatTurn(plan);
    const chunk = (delta: object, finish: string | null = null) => ({
      ...t.base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(plan.includeUsage ? { usage: null } : {}),
    });
    // The role chunk opens the stream; it waits for the first output so that a generation failing
    // before any (e.g. in prefill) still gets an HTTP error status.
    let opened = false;
    const send = (delta: object, finish: string | null = null) => {
      if (!t.sse) return;
      if (!opened) {
        opened = true;
        t.sse.send(chunk({ role: "assistant", content: "" }));
      }
      t.sse.send(chunk(delta, finish));
    };
    const result = await generateTurn(t, plan, {
      tools: plan.tools,
      ...plan.constraint,
      onChunk: (c) => {
        const delta = chat.push(c);
        if (delta) send(delta);
        // parallel_tool_calls: false ends generation at the first call; that is not the client leaving
        if (chat.done) t.cutoff.abort();
      },
    });
    t.checkShutdown();
    const { delta, finishReason } = chat.finish(result);
    logResult(t, result, finishReason);
    if (!t.sse) {
      return {
        ...t.base,
        choices: [{ index: 0, message: chat.message(), logprobs: null, finish_reason: finishReason }],
        usage: usage(result),
      };
    }
    if (delta) send(delta);
    send({}, finishReason);
    if (plan.includeUsage) t.sse.send({ ...t.base, choices: [], usage: usage(result) });
    t.sse.done();
    return undefined;
  });
}
