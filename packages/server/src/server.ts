/**
 * createServer(): an OpenAI-compatible HTTP server (fastify) over one or more StepModels.
 *
 * Per request: validate the body (zod) → pick the model by `model` → render and tokenize the prompt
 * and check it fits → wait for the model's turn (FIFO, bounded; 429 when full) → generate (the model
 * is reset first: no prefix cache) → answer as JSON or as a stream of server-sent events. A client
 * that disconnects aborts its generation, which frees the model for the next request.
 */
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import type { ServerResponse } from "node:http";
import { AnemllError, InvalidArgumentError } from "@anemll-qwen35/core";
import {
  ContextOverflowError,
  type GenerationResult,
  generate,
  UnsupportedSamplingError,
} from "@anemll-qwen35/generate";
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from "fastify";
import { type ChatPlan, ChatTurn, planChat } from "./chat.js";
import { type CompletionPlan, planCompletion, RawTextStream } from "./completions.js";
import { ApiError, modelNotFound, RequestAbortedError, ServerConfigError } from "./errors.js";
import { type ModelSource, openModels, type ServedModel } from "./models.js";
import { chatCompletionSchema, completionSchema, parseBody } from "./schemas.js";
import { SseWriter } from "./sse.js";

export interface ServerOptions {
  /** The models to serve, each under its own name (the request's `model`). */
  models: readonly ModelSource[];
  /** Default 127.0.0.1: only this machine can connect. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** When set, every request but GET /health needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Requests that may wait per model while one runs (default 8); more get 429. */
  queue?: number;
  /** Largest request body in bytes (default 1 MiB); larger gets 413. */
  maxBodyBytes?: number;
  /** Called once per request when its response is complete (or the client left). */
  onRequestEnd?: (log: RequestLog) => void;
  /** fastify's logger (default off). */
  logger?: FastifyServerOptions["logger"];
}

/** One line of request log. */
export interface RequestLog {
  id: string;
  method: string;
  url: string;
  /** HTTP status sent (a stream that failed midway still shows 200). */
  status: number;
  model?: string;
  stream?: boolean;
  /** "stop" | "length" | "tool_calls", or "abort" when the client left first. */
  finishReason?: string;
  promptTokens?: number;
  completionTokens?: number;
  /** Time spent waiting for the model's turn. */
  queuedMs?: number;
  /** Time the request held the model (its turn: generation and answer). */
  runMs?: number;
  totalMs: number;
  error?: string;
}

export interface OpenAIServer extends AsyncDisposable {
  readonly app: FastifyInstance;
  readonly models: readonly ServedModel[];
  /** `http://host:port` once listening. */
  readonly url: string | undefined;
  /** Starts listening (options override those given to createServer); resolves with the base URL. */
  listen(o?: { host?: string; port?: number }): Promise<string>;
  /** Aborts running generations, refuses queued requests, stops listening, disposes opened models. */
  close(): Promise<void>;
}

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 8080;
export const DEFAULT_QUEUE = 8;
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

interface RequestState {
  started: number;
  /** When the request got its model's turn, and when it gave it back. */
  turn?: { start: number; end?: number };
  log: Partial<RequestLog>;
  logged: boolean;
}

declare module "fastify" {
  interface FastifyRequest {
    anemll: RequestState;
  }
}

/** Opens the models and builds the server (not yet listening: call `listen()`). */
export async function createServer(options: ServerOptions): Promise<OpenAIServer> {
  const queue = options.queue ?? DEFAULT_QUEUE;
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isInteger(maxBody) || maxBody < 1) {
    throw new ServerConfigError(`maxBodyBytes must be a positive integer, got ${maxBody}`);
  }
  if (options.apiKey !== undefined && options.apiKey.length === 0) {
    throw new ServerConfigError("apiKey must not be empty");
  }
  const models = await openModels(options.models, queue);
  const byName = new Map(models.map((m) => [m.name, m]));
  /** Running and queued requests, so close() can stop them and wait for them. */
  const active = new Set<AbortController>();
  const inflight = new Set<Promise<unknown>>();
  const track = <T>(p: Promise<T>): Promise<T> => {
    inflight.add(p);
    const done = () => inflight.delete(p);
    p.then(done, done);
    return p;
  };
  let closing = false;

  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: maxBody,
    // Generation requests can take minutes; the client decides when to give up.
    requestTimeout: 0,
    // close() first lets running requests end (they are aborted), then drops keep-alive sockets.
    forceCloseConnections: true,
    // Requests arriving while closing get our OpenAI-shaped 503, not fastify's own body.
    return503OnClosing: false,
    genReqId: () => randomUUID(),
  });

  const emitLog = (req: FastifyRequest, status: number) => {
    const s = req.anemll;
    if (!s || s.logged) return;
    s.logged = true;
    options.onRequestEnd?.({
      id: String(req.id),
      method: req.method,
      url: req.url,
      status,
      totalMs: performance.now() - s.started,
      ...(s.turn ? { runMs: (s.turn.end ?? performance.now()) - s.turn.start } : {}),
      ...s.log,
    });
  };

  app.addHook("onRequest", async (req) => {
    req.anemll = { started: performance.now(), log: {}, logged: false };
    // Health checks (load balancers, supervisors) need no key; they reveal no model output.
    if (options.apiKey === undefined || req.url.split("?")[0] === "/health") return;
    const header = req.headers.authorization ?? "";
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m || !sameSecret(m[1].trim(), options.apiKey)) {
      throw new ApiError(
        401,
        m
          ? "Incorrect API key provided."
          : "Missing API key: send it as `Authorization: Bearer <key>` (the server was started with --api-key).",
        { code: "invalid_api_key" },
      );
    }
  });
  app.addHook("onResponse", async (req, reply) => emitLog(req, reply.statusCode));

  app.setErrorHandler((err, req, reply) => {
    const e = toApiError(err);
    req.anemll.log.error = e.message;
    if (e.status >= 500) req.log.error(err);
    reply.code(e.status).headers(e.headers).send(e.body());
  });
  app.setNotFoundHandler((req, reply) => {
    const e = new ApiError(404, `Invalid URL (${req.method} ${req.url})`, { code: "not_found" });
    reply.code(404).send(e.body());
  });

  const findModel = (name: string): ServedModel => {
    const m = byName.get(name);
    if (!m) throw modelNotFound(name, [...byName.keys()]);
    return m;
  };

  app.get("/health", async () => ({
    status: closing ? "closing" : "ok",
    models: models.map((m) => ({
      id: m.name,
      backend: m.backend,
      context_length: m.model.contextLength,
      busy: m.queue.busy,
      waiting: m.queue.waiting,
    })),
  }));

  app.get("/v1/models", async () => ({ object: "list", data: models.map(modelObject) }));
  // A wildcard, since names may hold a slash (`Qwen/Qwen3.5-0.8B`, the default name of an hf: model).
  app.get<{ Params: { "*": string } }>("/v1/models/*", async (req) =>
    modelObject(findModel(req.params["*"])),
  );

  app.post("/v1/chat/completions", async (req, reply) => {
    const body = parseBody(chatCompletionSchema, req.body);
    const served = findModel(body.model);
    const plan = planChat(body, served);
    return track(serve(req, reply, served, plan, "chat"));
  });

  app.post("/v1/completions", async (req, reply) => {
    const body = parseBody(completionSchema, req.body);
    const served = findModel(body.model);
    const plan = planCompletion(body, served);
    return track(serve(req, reply, served, plan, "completion"));
  });

  /** The model's turn, the generation, and the answer (JSON or SSE). */
  async function serve(
    req: FastifyRequest,
    reply: FastifyReply,
    served: ServedModel,
    plan: ChatPlan | CompletionPlan,
    kind: "chat" | "completion",
  ): Promise<unknown> {
    if (closing) throw new ApiError(503, "the server is shutting down", { code: "server_closing" });
    const log = req.anemll.log;
    log.model = served.name;
    log.stream = plan.stream;
    const res = reply.raw;
    // The client is gone when the response closes before it finished: stop the work for it.
    const client = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) client.abort(new RequestAbortedError("the client disconnected"));
    };
    res.on("close", onClose);
    active.add(client);

    const queuedAt = performance.now();
    let release: () => void;
    try {
      release = await served.queue.acquire(client.signal);
    } catch (err) {
      res.off("close", onClose);
      active.delete(client);
      if (client.signal.aborted) {
        log.finishReason = "abort";
        emitLog(req, 499);
        return hangUp(reply); // nobody to answer
      }
      throw err;
    }
    log.queuedMs = performance.now() - queuedAt;
    const turn: { start: number; end?: number } = { start: performance.now() };
    req.anemll.turn = turn;

    const id =
      kind === "chat"
        ? `chatcmpl-${randomUUID().replaceAll("-", "")}`
        : `cmpl-${randomUUID().replaceAll("-", "")}`;
    const created = Math.floor(Date.now() / 1000);
    const object = kind === "chat" ? "chat.completion" : "text_completion";
    const base = {
      id,
      object: plan.stream ? `${object}${kind === "chat" ? ".chunk" : ""}` : object,
      created,
      model: served.name,
    };
    // parallel_tool_calls: false ends generation at the first call; that is not the client leaving.
    const cutoff = new AbortController();
    const signal = AbortSignal.any([client.signal, cutoff.signal]);
    const sse = plan.stream ? new SseWriter(res) : undefined;
    if (sse) reply.hijack();
    const usage = (r: GenerationResult) => ({
      prompt_tokens: r.stats.promptTokens,
      completion_tokens: r.stats.generatedTokens,
      total_tokens: r.stats.promptTokens + r.stats.generatedTokens,
    });

    try {
      let answer: unknown;
      if (kind === "chat") {
        const chat = plan as ChatPlan;
        const turn = new ChatTurn(chat);
        const chunk = (delta: object, finish: string | null = null) => ({
          ...base,
          choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
          ...(plan.includeUsage ? { usage: null } : {}),
        });
        // The role chunk opens the stream; it waits for the first output so that a generation failing
        // before any (e.g. in prefill) still gets an HTTP error status.
        let opened = false;
        const send = (delta: object, finish: string | null = null) => {
          if (!sse) return;
          if (!opened) {
            opened = true;
            sse.send(chunk({ role: "assistant", content: "" }));
          }
          sse.send(chunk(delta, finish));
        };
        const result = await generate(served.model, served.tokenizer, {
          prompt: plan.promptIds,
          tools: chat.tools,
          maxTokens: plan.maxTokens,
          sampling: plan.sampling,
          stop: plan.stop,
          signal,
          onChunk: (c) => {
            const delta = turn.push(c);
            if (delta) send(delta);
            if (turn.done) cutoff.abort();
          },
        });
        const { delta, finishReason } = turn.finish(result);
        log.finishReason = client.signal.aborted ? "abort" : finishReason;
        log.promptTokens = result.stats.promptTokens;
        log.completionTokens = result.stats.generatedTokens;
        if (sse) {
          if (delta) send(delta);
          send({}, finishReason);
          if (plan.includeUsage) sse.send({ ...base, choices: [], usage: usage(result) });
          sse.done();
        } else {
          answer = {
            ...base,
            choices: [{ index: 0, message: turn.message(), logprobs: null, finish_reason: finishReason }],
            usage: usage(result),
          };
        }
      } else {
        const completion = plan as CompletionPlan;
        const raw = new RawTextStream(served.tokenizer, plan.stop);
        const chunk = (text: string, finish: string | null = null) => ({
          ...base,
          choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
          ...(plan.includeUsage ? { usage: null } : {}),
        });
        if (sse && completion.echo) sse.send(chunk(completion.echo));
        const result = await generate(served.model, served.tokenizer, {
          prompt: plan.promptIds,
          maxTokens: plan.maxTokens,
          sampling: plan.sampling,
          stop: plan.stop,
          signal,
          onToken: sse
            ? (tokenId) => {
                const text = raw.push(tokenId);
                if (text) sse.send(chunk(text));
              }
            : undefined,
        });
        const finishReason = result.finishReason === "length" ? "length" : "stop";
        log.finishReason = client.signal.aborted ? "abort" : finishReason;
        log.promptTokens = result.stats.promptTokens;
        log.completionTokens = result.stats.generatedTokens;
        if (sse) {
          const rest = raw.flush();
          if (rest) sse.send(chunk(rest));
          sse.send(chunk("", finishReason));
          if (plan.includeUsage) sse.send({ ...base, choices: [], usage: usage(result) });
          sse.done();
        } else {
          answer = {
            ...base,
            choices: [
              {
                index: 0,
                text: (completion.echo ?? "") + result.rawText,
                logprobs: null,
                finish_reason: finishReason,
              },
            ],
            usage: usage(result),
          };
        }
      }
      if (client.signal.aborted) {
        emitLog(req, 499);
        return hangUp(reply);
      }
      if (sse) {
        emitLog(req, 200);
        return reply;
      }
      return answer;
    } catch (err) {
      if (!sse) throw err; // the error handler answers
      const e = toApiError(err);
      log.error = e.message;
      if (e.status >= 500) req.log.error(err);
      if (sse.headersSent) {
        // Mid-stream: the status is out already; OpenAI clients raise on an `error` event.
        sse.send(e.body());
        sse.done();
        emitLog(req, 200);
      } else {
        sendJson(res, e.status, e.body(), e.headers);
        emitLog(req, e.status);
      }
      return reply;
    } finally {
      turn.end = performance.now();
      release();
      res.off("close", onClose);
      active.delete(client);
    }
  }

  let url: string | undefined;
  const server: OpenAIServer = {
    app,
    models,
    get url() {
      return url;
    },
    async listen(o = {}) {
      const host = o.host ?? options.host ?? DEFAULT_HOST;
      const port = o.port ?? options.port ?? DEFAULT_PORT;
      await app.listen({ host, port });
      const addr = app.server.address();
      const actualPort = typeof addr === "object" && addr ? addr.port : port;
      url = `http://${host.includes(":") ? `[${host}]` : host}:${actualPort}`;
      return url;
    },
    async close() {
      if (closing) return;
      closing = true;
      const why = new RequestAbortedError("the server is shutting down");
      for (const m of models) m.queue.rejectWaiting(why);
      for (const c of active) c.abort(why);
      // An aborted generation ends after the model step in flight.
      await Promise.allSettled([...inflight]);
      await app.close();
      await Promise.allSettled(models.map((m) => m.dispose()));
    },
    async [Symbol.asyncDispose]() {
      await server.close();
    },
  };
  return server;
}

function modelObject(m: ServedModel) {
  return {
    id: m.name,
    object: "model",
    created: m.created,
    owned_by: "anemll-qwen35",
    backend: m.backend,
    context_length: m.model.contextLength,
  };
}

/** Compares API keys in constant time (hashing first makes the lengths equal). */
function sameSecret(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
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

/** Any error → the status and OpenAI body to answer with. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof ContextOverflowError) {
    return new ApiError(400, err.message, { param: "messages", code: "context_length_exceeded", cause: err });
  }
  if (err instanceof UnsupportedSamplingError) {
    return new ApiError(400, err.message, { param: "temperature", code: "unsupported_sampling", cause: err });
  }
  if (err instanceof InvalidArgumentError) return new ApiError(400, err.message, { cause: err });
  const e = err as { code?: unknown; statusCode?: unknown; message?: unknown };
  const status = typeof e?.statusCode === "number" ? e.statusCode : 500;
  const message = typeof e?.message === "string" ? e.message : String(err);
  switch (e?.code) {
    case "FST_ERR_CTP_INVALID_JSON_BODY":
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new ApiError(400, `We could not parse the JSON body of your request: ${message}`, {
        code: "invalid_json",
        cause: err,
      });
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ApiError(413, "The request body is larger than this server accepts (see --max-body).", {
        code: "request_too_large",
        cause: err,
      });
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ApiError(415, "Send the request body as JSON (Content-Type: application/json).", {
        code: "unsupported_media_type",
        cause: err,
      });
  }
  if (err instanceof SyntaxError && status === 400) {
    return new ApiError(400, `We could not parse the JSON body of your request: ${message}`, {
      code: "invalid_json",
      cause: err,
    });
  }
  if (status >= 400 && status < 500) return new ApiError(status, message, { cause: err });
  const code = err instanceof AnemllError ? err.code : null;
  return new ApiError(500, `The model failed: ${message}`, { code, cause: err });
}
