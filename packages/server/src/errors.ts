/**
 * Errors the server answers with, in the OpenAI wire shape:
 * `{ "error": { "message", "type", "param", "code" } }` — the shape every OpenAI client parses
 * (openai-python / openai-node raise `BadRequestError`, `NotFoundError`, `RateLimitError`… from it).
 */
import { AnemllError, InvalidArgumentError } from "@anemll-qwen35/core";
import {
  ContextOverflowError,
  ModelUnavailableError,
  UnsupportedSamplingError,
} from "@anemll-qwen35/generate";

/** The `type` field of an OpenAI error body. */
export type ApiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "rate_limit_error"
  | "server_error";

export interface ApiErrorBody {
  error: { message: string; type: ApiErrorType; param: string | null; code: string | null };
}

/** An error with an HTTP status and an OpenAI error body. */
export class ApiError extends AnemllError {
  readonly status: number;
  readonly type: ApiErrorType;
  /** The request field at fault (`messages[2].content`, `temperature`…), or null. */
  readonly param: string | null;
  /** OpenAI's machine-readable `code` (`model_not_found`, `context_length_exceeded`…), or null. */
  readonly apiCode: string | null;
  /** Extra response headers (`Retry-After` on 429). */
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    message: string,
    o: {
      type?: ApiErrorType;
      param?: string | null;
      code?: string | null;
      headers?: Record<string, string>;
      cause?: unknown;
    } = {},
  ) {
    super(`E_HTTP_${status}`, message, { cause: o.cause });
    this.status = status;
    this.type = o.type ?? (status >= 500 ? "server_error" : "invalid_request_error");
    this.param = o.param ?? null;
    this.apiCode = o.code ?? null;
    this.headers = o.headers ?? {};
  }

  body(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.apiCode } };
  }
}

/** 400 naming the request field that is wrong. */
export function invalidParam(param: string | null, message: string, code: string | null = "invalid_value") {
  return new ApiError(400, message, { param, code });
}

/** A value from the request, fit for one log line: control characters escaped, at most 200 characters. */
export function logSafe(s: string, max = 200): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: escaping control characters is the point
  const flat = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) =>
    c === "\n" ? "\\n" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  return flat.length > max ? `${flat.slice(0, max)}… (${flat.length} characters)` : flat;
}

/** 404 for a `model` the server does not serve. */
export function modelNotFound(model: string, served: readonly string[]): ApiError {
  return new ApiError(
    404,
    `The model \`${logSafe(model, 100)}\` does not exist on this server; it serves: ${served.join(", ")}`,
    { param: "model", code: "model_not_found" },
  );
}

/**
 * 503 for a model that can no longer run (a rank of a model split across machines was lost); the
 * server keeps serving its other models.
 */
export function modelUnavailable(model: string, why: ModelUnavailableError): ApiError {
  return new ApiError(503, `model "${model}" is unavailable: ${why.message}`, {
    code: "model_unavailable",
    cause: why,
  });
}

/** 429 when a model's queue is full; `Retry-After` says when to try again. */
export class QueueFullError extends ApiError {
  constructor(model: string, waiting: number, retryAfterSeconds: number) {
    super(
      429,
      `model "${model}" is busy: ${waiting} request(s) already wait for it (the queue is full); ` +
        `retry after ${retryAfterSeconds} s`,
      {
        type: "rate_limit_error",
        code: "queue_full",
        headers: { "retry-after": String(retryAfterSeconds) },
      },
    );
  }
}

/** The request was cancelled (client gone, or the server is closing) while it waited for its model. */
export class RequestAbortedError extends AnemllError {
  constructor(why: string) {
    super("E_REQUEST_ABORTED", why);
    this.name = "AbortError";
  }
}

/** Server options that make no sense (no models, duplicate names, bad queue size…). */
export class ServerConfigError extends AnemllError {
  constructor(message: string) {
    super("E_SERVER_CONFIG", message);
  }
}

/** listen() failed: the port is in use, or not ours to take. */
export class ServerListenError extends AnemllError {
  constructor(host: string, port: number, cause: unknown) {
    const code = (cause as { code?: string })?.code;
    const why =
      code === "EADDRINUSE"
        ? `port ${port} on ${host} is already in use (another server?); choose another with --port (0 picks a free one)`
        : code === "EACCES"
          ? `no permission to listen on port ${port} of ${host}; ports below 1024 need privileges, choose a higher --port`
          : code === "EADDRNOTAVAIL" || code === "ENOTFOUND"
            ? `${host} is not an address of this machine; check --host`
            : `could not listen on ${host}:${port}: ${(cause as Error)?.message ?? String(cause)}`;
    super("E_SERVER_LISTEN", why, { cause });
  }
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
  if (err instanceof ModelUnavailableError) {
    return new ApiError(503, err.message, { code: "model_unavailable", cause: err });
  }
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
