/**
 * A generation request's turn on its model, shared by the chat and completion routes: wait in the
 * model's queue (429 when full), abort when the client leaves, open the SSE stream when asked,
 * answer errors in the OpenAI shape (as an `error` event once a stream has started), and give the
 * model back.
 */
import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import {
  type GenerateOptions,
  type Generation,
  type GenerationResult,
  generate,
} from "@anemll-qwen35/generate";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import { ApiError, modelUnavailable, RequestAbortedError, toApiError } from "../errors.js";
import type { ServedModel } from "../models.js";
import type { GenerationPlan } from "../plan.js";
import type { RequestLog } from "../request-log.js";
import { parseBody } from "../schemas.js";
import { SseWriter } from "../sse.js";
import { findModel, type RouteContext } from "./context.js";

export type TurnKind = "chat" | "completion";

/** What a route's answer needs while it holds the model. */
export interface Turn {
  readonly served: ServedModel;
  /** id, object, created and model of every response body and chunk. */
  readonly base: { id: string; object: string; created: number; model: string };
  /** Open when the request asked for a stream. */
  readonly sse: SseWriter | undefined;
  /** Stops the generation: the client left, or `cutoff` was aborted. */
  readonly signal: AbortSignal;
  /** Ends generation early on the route's own terms (e.g. parallel_tool_calls: false). */
  readonly cutoff: AbortController;
  /** True when the client has gone. */
  readonly clientGone: () => boolean;
  /** Throws the 503 when the generation was cut short by the end of the server's drain time. */
  readonly checkShutdown: () => void;
  readonly log: Partial<RequestLog>;
  /** The client's identity (its prompt-cache partition). */
  readonly client: string;
}

/**
 * Registers POST `path` as a generation route: the body checked against `schema`, its model found
 * and its plan settled before it queues (a bad request is a 400 at once), then `answer` in the
 * model's turn.
 */
export function generationRoute<S extends z.ZodType<{ model: string }>, P extends GenerationPlan>(
  app: FastifyInstance,
  ctx: RouteContext,
  route: {
    path: string;
    kind: TurnKind;
    schema: S;
    plan: (body: z.output<S>, served: ServedModel) => Promise<P>;
  },
  answer: (t: Turn, plan: P) => Promise<unknown>,
): void {
  app.post(route.path, async (req, reply) => {
    const body = parseBody(route.schema, req.body);
    const served = findModel(ctx, body.model);
    const plan = await route.plan(body, served);
    const o = { kind: route.kind, stream: plan.stream };
    return ctx.track(runTurn(ctx, req, reply, served, o, (t) => answer(t, plan)));
  });
}

/**
 * generate() for `plan` in turn `t`: the model's speculation, the plan's prompt, limits and sampling,
 * the turn's abort signal, the route's own options, and the prompt cache's partition of the request's
 * client (no client's prompts show through another's cached_tokens or timing).
 */
export function generateTurn(
  t: Turn,
  plan: GenerationPlan,
  options: Omit<GenerateOptions, "prompt" | "messages">,
): Generation {
  return generate(t.served.model, t.served.tokenizer, {
    ...t.served.speculation,
    prompt: plan.promptIds,
    maxTokens: plan.maxTokens,
    sampling: plan.sampling,
    stop: plan.stop,
    signal: t.signal,
    promptCache: t.served.promptCache?.partition(t.client),
    cacheCheckpoints: plan.cacheCheckpoints,
    ...options,
  });
}

/** OpenAI's usage object for a finished generation (cached_tokens: restored from the prompt cache). */
export function usage(r: GenerationResult) {
  const s = r.stats.speculative;
  return {
    prompt_tokens: r.stats.promptTokens,
    completion_tokens: r.stats.generatedTokens,
    total_tokens: r.stats.promptTokens + r.stats.generatedTokens,
    prompt_tokens_details: { cached_tokens: r.stats.cachedTokens },
    // speculative decoding: OpenAI's predicted-output counts for the drafts, and the rounds
    ...(s
      ? {
          completion_tokens_details: {
            accepted_prediction_tokens: s.acceptedTokens,
            rejected_prediction_tokens: s.draftTokens - s.acceptedTokens,
          },
          speculative: {
            draft_tokens: s.draftTokens,
            accepted_tokens: s.acceptedTokens,
            verify_calls: s.calls,
            acceptance_rate: s.acceptanceRate,
            tokens_per_call: s.tokensPerCall,
          },
        }
      : {}),
  };
}

/** What the request log keeps of a finished generation. */
export function logResult(t: Turn, r: GenerationResult, finishReason: string): void {
  t.log.finishReason = t.clientGone() ? "abort" : finishReason;
  t.log.promptTokens = r.stats.promptTokens;
  t.log.cachedTokens = r.stats.cachedTokens;
  t.log.completionTokens = r.stats.generatedTokens;
}

/**
 * Runs `answer` in the request's turn on `served`; returns what fastify should send (the JSON
 * answer, or the hijacked reply of a stream).
 */
export async function runTurn(
  ctx: RouteContext,
  req: FastifyRequest,
  reply: FastifyReply,
  served: ServedModel,
  o: { kind: TurnKind; stream: boolean },
  answer: (t: Turn) => Promise<unknown>,
): Promise<unknown> {
  if (ctx.closing()) throw shuttingDown();
  checkAvailable(served);
  const log = req.anemll.log;
  log.model = served.name;
  log.stream = o.stream;
  const res = reply.raw;
  // The client is gone when the response closes before it finished: stop the work for it.
  const client = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) client.abort(new RequestAbortedError("the client disconnected"));
  };
  res.on("close", onClose);

  const queuedAt = performance.now();
  let release: () => void;
  try {
    release = await served.queue.acquire(client.signal);
  } catch (err) {
    res.off("close", onClose);
    if (client.signal.aborted) {
      log.finishReason = "abort";
      ctx.emitLog(req, 499);
      return hangUp(reply); // nobody to answer
    }
    throw err;
  }
  log.queuedMs = performance.now() - queuedAt;
  try {
    checkAvailable(served); // it may have failed while this request waited
  } catch (err) {
    release();
    res.off("close", onClose);
    throw err;
  }
  const turnTime: { start: number; end?: number } = { start: performance.now() };
  req.anemll.turn = turnTime;

  const object = o.kind === "chat" ? "chat.completion" : "text_completion";
  const base = {
    id: `${o.kind === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`,
    object: o.stream ? `${object}${o.kind === "chat" ? ".chunk" : ""}` : object,
    created: Math.floor(Date.now() / 1000),
    model: served.name,
  };
  const cutoff = new AbortController();
  const sse = o.stream ? new SseWriter(res) : undefined;
  if (sse) reply.hijack();
  const turn: Turn = {
    served,
    base,
    sse,
    signal: AbortSignal.any([client.signal, cutoff.signal, ctx.shutdown]),
    cutoff,
    clientGone: () => client.signal.aborted,
    checkShutdown: () => {
      if (ctx.shutdown.aborted && !client.signal.aborted)
        throw shuttingDown("the server shut down before this request finished");
    },
    log,
    client: req.anemll.client,
  };

  try {
    const body = await answer(turn);
    if (client.signal.aborted) {
      ctx.emitLog(req, 499);
      return hangUp(reply);
    }
    if (sse) {
      ctx.emitLog(req, 200);
      return reply;
    }
    return body;
  } catch (err) {
    if (!sse) throw err; // the error handler answers
    const e = toApiError(err);
    log.error = e.message;
    if (e.status >= 500) req.log.error(err);
    if (sse.headersSent) {
      // Mid-stream: the status is out already; OpenAI clients raise on an `error` event.
      sse.send(e.body());
      sse.done();
      ctx.emitLog(req, 200);
    } else {
      sendJson(res, e.status, e.body(), e.headers);
      ctx.emitLog(req, e.status);
    }
    return reply;
  } finally {
    turnTime.end = performance.now();
    release();
    res.off("close", onClose);
  }
}

/** The 503 for a model that can no longer run (StepModel.unavailable). */
function checkAvailable(served: ServedModel): void {
  const down = served.model.unavailable;
  if (down) throw modelUnavailable(served.name, down);
}

/** 503 for requests the server will not (or did not) finish because it is stopping. */
export function shuttingDown(message = "the server is shutting down"): ApiError {
  return new ApiError(503, message, { code: "server_closing", headers: { "retry-after": "5" } });
}

/** The client left: drop the connection (it may linger half-open and hold up close()). */
function hangUp(reply: FastifyReply): FastifyReply {
  if (!reply.sent) reply.hijack();
  if (!reply.raw.writableEnded) reply.raw.destroy();
  return reply;
}

function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.destroyed || res.headersSent) return;
  res.writeHead(status, { ...headers, "content-type": "application/json; charset=utf-8" });
  res.end(JSON.stringify(body));
}
