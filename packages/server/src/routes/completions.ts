/** POST /v1/completions: a raw prompt → its continuation (text, optionally echoed). */
import type { FastifyInstance } from "fastify";
import { planCompletion, RawTextStream } from "../completions.js";
import { completionSchema } from "../schemas.js";
import type { RouteContext } from "./context.js";
import { generateTurn, generationRoute, logResult, usage } from "./turn.js";

export function registerCompletions(app: FastifyInstance, ctx: RouteContext): void {
  const route = {
    path: "/v1/completions",
    kind: "completion",
    schema: completionSchema,
    plan: planCompletion,
  } as const;
  generationRoute(app, ctx, route, async (t, plan) => {
    const raw = new RawTextStream(t.served.tokenizer, plan.stop);
    const chunk = (text: string, finish: string | null = null) => ({
      ...t.base,
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
      ...(plan.includeUsage ? { usage: null } : {}),
    });
    const sse = t.sse;
    if (sse && plan.echo) sse.send(chunk(plan.echo));
    const result = await generateTurn(t, plan, {
      onToken: sse
        ? (tokenId) => {
            const text = raw.push(tokenId);
            if (text) sse.send(chunk(text));
          }
        : undefined,
    });
    t.checkShutdown();
    const finishReason = result.finishReason === "length" ? "length" : "stop";
    logResult(t, result, finishReason);
    if (!sse) {
      return {
        ...t.base,
        choices: [
          {
            index: 0,
            text: (plan.echo ?? "") + result.rawText,
            logprobs: null,
            finish_reason: finishReason,
          },
        ],
        usage: usage(result),
      };
    }
    const rest = raw.flush();
    if (rest) sse.send(chunk(rest));
    sse.send(chunk("", finishReason));
    if (plan.includeUsage) sse.send({ ...t.base, choices: [], usage: usage(result) });
    sse.done();
    return undefined;
  });
}
