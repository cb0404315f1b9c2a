/**
 * createServer(): an OpenAI-compatible HTTP server (fastify) over one or more StepModels.
 *
 * Per request: validate the body (zod) → pick the model by `model` → render and tokenize the prompt
 * and check it fits → wait for the model's turn (FIFO, bounded; 429 when full) → generate (from the
 * longest cached prefix of the prompt, see ServerOptions.promptCache) → answer as JSON or as a stream of server-sent events. A client
 * that disconnects aborts its generation, which frees the model for the next request.
 * This file holds the server's life (errors, request log, listen, close); who may call it (Host,
 * Origin, API keys) is access.ts; the routes are in routes/ (info, chat-completions, completions,
 * and the model turn they share).
 */
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance, type FastifyRequest, type FastifyServerOptions } from "fastify";
import { checkApiKeys, isLoopbackHost, registerAccess } from "./access.js";
import {
  ApiError,
  logSafe,
  RequestAbortedError,
  ServerConfigError,
  ServerListenError,
  toApiError,
} from "./errors.js";
import { type ModelSource, openModels, type PromptCacheSettings, type ServedModel } from "./models.js";
import type { PromptTokenizerOptions } from "./prompt-tokenizer.js";
import type { RequestLog } from "./request-log.js";
import { registerChatCompletions } from "./routes/chat-completions.js";
import { registerCompletions } from "./routes/completions.js";
import type { RouteContext } from "./routes/context.js";
import { registerInfoRoutes } from "./routes/info.js";
import { shuttingDown } from "./routes/turn.js";
import { parseJsonBody } from "./schemas.js";

export interface ServerOptions {
  /** The models to serve, each under its own name (the request's `model`). */
  models: readonly ModelSource[];
  /**
   * Default 127.0.0.1: only this machine can connect. Any address beyond loopback needs `apiKey`
   * (listen() refuses otherwise).
   */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /**
   * When set, every request but GET /health needs `Authorization: Bearer <key>`. Several keys are
   * several clients, each with its own partition of the prompt cache (see README, Prompt cache).
   */
  apiKey?: string | readonly string[];
  /**
   * Host names the server answers besides the loopback ones (`"*"`: any). Default: none when
   * listening on loopback (a web page reaching it through DNS rebinding is refused, 403); any when
   * listening beyond it.
   */
  allowedHosts?: readonly string[];
  /** Origins whose web pages may call the server, with CORS (`"*"`: any). Default none: 403. */
  corsOrigins?: readonly string[];
  /** Requests that may wait per model while one runs (default 8); more get 429. */
  queue?: number;
  /** Largest request body in bytes (default 1 MiB); larger gets 413. */
  maxBodyBytes?: number;
  /**
   * Longest time a client may take to send its request, headers and body (default 30 s; a slower
   * one gets 408 and is disconnected). Generation time does not count.
   */
  requestTimeoutMs?: number;
  /** How long close() lets the requests in flight finish before it cuts them off (default 30 s). */
  drainMs?: number;
  /**
   * Each model's prompt cache: snapshots of its state by prompt prefix, so that requests sharing a
   * system prompt and tools skip that prefill. Default on, 1 GB per model (`maxBytes`); `false`
   * turns it off. Models that cannot snapshot their state run without one.
   */
  promptCache?: PromptCacheSettings;
  /** Where and how long large prompts are tokenized (see PromptTokenizer). */
  tokenize?: PromptTokenizerOptions;
  /** Called once per request when its response is complete (or the client left). */
  onRequestEnd?: (log: RequestLog) => void;
  /** fastify's logger (default off). */
  logger?: FastifyServerOptions["logger"];
}

export interface OpenAIServer extends AsyncDisposable {
  readonly app: FastifyInstance;
  readonly models: readonly ServedModel[];
  /** `http://host:port` once listening. */
  readonly url: string | undefined;
  /** Requests being answered or waiting for their turn. */
  readonly inFlight: number;
  /**
   * Starts listening (options override those given to createServer); resolves with the base URL.
   * An address beyond loopback without an API key is refused (ServerConfigError).
   */
  listen(o?: { host?: string; port?: number }): Promise<string>;
  /**
   * Stops the server: no new connections, new requests and queued ones get 503, the running ones
   * finish (up to `drainMs`, default the server's; then they are cut off with a 503 or an error
   * event), then the models opened are disposed. A second call with a shorter `drainMs` hurries
   * a close in progress.
   */
  close(o?: { drainMs?: number }): Promise<void>;
}

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 8080;
export const DEFAULT_QUEUE = 8;
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
export const DEFAULT_DRAIN_MS = 30_000;

/** Opens the models and builds the server (not yet listening: call `listen()`). */
export async function createServer(options: ServerOptions): Promise<OpenAIServer> {
  const queue = options.queue ?? DEFAULT_QUEUE;
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isInteger(maxBody) || maxBody < 1) {
    throw new ServerConfigError(`maxBodyBytes must be a positive integer, got ${maxBody}`);
  }
  const apiKeys =
    options.apiKey === undefined
      ? []
      : typeof options.apiKey === "string"
        ? [options.apiKey]
        : [...options.apiKey];
  checkApiKeys(apiKeys);
  // before the models load: refuse at once a bind that would need a key
  const needsKey = (host: string) => {
    if (apiKeys.length === 0 && !isLoopbackHost(host)) {
      throw new ServerConfigError(
        `listening on ${host} lets other machines in, so it needs an API key (--api-key, or ANEMLL_API_KEY); ` +
          "without one, listen on 127.0.0.1 (this machine only)",
      );
    }
  };
  needsKey(options.host ?? DEFAULT_HOST);
  const requestTimeout = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  if (!Number.isInteger(requestTimeout) || requestTimeout < 1) {
    throw new ServerConfigError(`requestTimeoutMs must be a positive integer, got ${requestTimeout}`);
  }
  const models = await openModels(options.models, queue, options.tokenize, options.promptCache);
  /** The requests' work, so close() can wait for it. */
  const inflight = new Set<Promise<unknown>>();
  const track = <T>(p: Promise<T>): Promise<T> => {
    inflight.add(p);
    const done = () => inflight.delete(p);
    p.then(done, done);
    return p;
  };
  let closing = false;
  const shutdown = new AbortController();

  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: maxBody,
    // Receiving the request (headers and body) is bounded: a client trickling a byte every few
    // seconds is cut off with 408. Generating the answer may take minutes and is not counted.
    requestTimeout,
    // checks for overdue requests at least every second (Node's default: 30 s)
    http: { connectionsCheckingInterval: Math.min(1000, requestTimeout), headersTimeout: requestTimeout },
    // close() first lets running requests end (they are aborted), then drops keep-alive sockets.
    forceCloseConnections: true,
    // Requests arriving while closing get our OpenAI-shaped 503, not fastify's own body.
    return503OnClosing: false,
    genReqId: () => randomUUID(),
  });

  // our JSON parser: clear 400s for syntax errors and prototype keys (see parseJsonBody)
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  const emitLog = (req: FastifyRequest, status: number) => {
    const s = req.anemll;
    if (!s || s.logged) return;
    s.logged = true;
    options.onRequestEnd?.({
      id: String(req.id),
      method: req.method,
      url: logSafe(req.url),
      status,
      totalMs: performance.now() - s.started,
      ...(s.turn ? { runMs: (s.turn.end ?? performance.now()) - s.turn.start } : {}),
      ...s.log,
      ...(s.log.error !== undefined ? { error: logSafe(s.log.error) } : {}),
    });
  };

  let boundHost = options.host ?? DEFAULT_HOST;
  app.addHook("onRequest", async (req) => {
    req.anemll = { started: performance.now(), log: {}, logged: false, client: "" };
  });
  registerAccess(
    app,
    { apiKeys, allowedHosts: options.allowedHosts, corsOrigins: options.corsOrigins },
    () => boundHost,
  );
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

  const ctx: RouteContext = { models, closing: () => closing, shutdown: shutdown.signal, track, emitLog };
  registerInfoRoutes(app, ctx);
  registerChatCompletions(app, ctx);
  registerCompletions(app, ctx);

  let url: string | undefined;
  let closed: Promise<void> | undefined;
  const server: OpenAIServer = {
    app,
    models,
    get url() {
      return url;
    },
    get inFlight() {
      return inflight.size;
    },
    async listen(o = {}) {
      const host = o.host ?? options.host ?? DEFAULT_HOST;
      const port = o.port ?? options.port ?? DEFAULT_PORT;
      needsKey(host);
      boundHost = host;
      try {
        await app.listen({ host, port });
      } catch (err) {
        throw new ServerListenError(host, port, err);
      }
      const addr = app.server.address();
      const actualPort = typeof addr === "object" && addr ? addr.port : port;
      url = `http://${host.includes(":") ? `[${host}]` : host}:${actualPort}`;
      return url;
    },
    close(o = {}) {
      const drainMs = o.drainMs ?? options.drainMs ?? DEFAULT_DRAIN_MS;
      // the earliest deadline of all close() calls wins
      // an AbortError: generation ends as aborted, and the turn answers 503 (checkShutdown)
      const cut = () => shutdown.abort(new RequestAbortedError("the server is shutting down"));
      if (drainMs <= 0) cut();
      else setTimeout(cut, drainMs).unref();
      closed ??= (async () => {
        closing = true;
        // no new connections; requests on open ones get 503 (closing), and so do the queued ones
        if (app.server.listening) app.server.close();
        for (const m of models) m.queue.rejectWaiting(shuttingDown());
        // the running ones finish, or are cut off at the deadline after the model step in flight
        await Promise.allSettled([...inflight]);
        await app.close();
        await Promise.allSettled(models.map((m) => m.dispose()));
      })();
      return closed;
    },
    async [Symbol.asyncDispose]() {
      await server.close();
    },
  };
  return server;
}
