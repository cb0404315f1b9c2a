/** POST /v1/completions: a raw prompt → its continuation (text, optionally echoed). */
import { generate } from "@anemll-qwen35/generate";
import type { FastifyInstance } from "fastify";
import { planCompletion, RawTextStream } from "../completions.js";
import { completionSchema, parseBody } from "../schemas.js";
import { findModel, type RouteContext } from "./context.js";
import { cacheOptions, logResult, runTurn, usage } from "./turn.js";

export function registerCompletions(app: FastifyInstance, ctx: RouteContext): void {
  app.post("/v1/completions", async (req, reply) => {
    const body = parseBody(completionSchema, req.body);
    const served = findModel(ctx, body.model);
    const plan = await planCompletion(body, served);
    return ctx.track(
      runTurn(ctx, req, reply, served, { kind: "completion", stream: plan.stream }, async (t) => {
        const raw = new RawTextStream(served.tokenizer, plan.stop);
        const chunk = (text: string, finish: string | null = null) => ({
          ...t.base,
          choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
          ...(plan.includeUsage ? { usage: null } : {}),
        });
        const sse = t.sse;
        if (sse && plan.echo) sse.send(chunk(plan.echo));
        const result = await generate(served.model, served.tokenizer, {
          ...served.speculation,
          prompt: plan.promptIds,
          maxTokens: plan.maxTokens,
          sampling: plan.sampling,
          stop: plan.stop,
          signal: t.signal,
          ...cacheOptions(t, plan),
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
      }),
    );
  });
}
