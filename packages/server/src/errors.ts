/**
 * Errors the server answers with, in the OpenAI wire shape:
 * `{ "error": { "message", "type", "param", "code" } }` — the shape every OpenAI client parses
 * (openai-python / openai-node raise `BadRequestError`, `NotFoundError`, `RateLimitError`… from it).
 */
import { AnemllError } from "@anemll-qwen35/core";

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

/** 404 for a `model` the server does not serve. */
export function modelNotFound(model: string, served: readonly string[]): ApiError {
  return new ApiError(
    404,
    `The model \`${model}\` does not exist on this server; it serves: ${served.join(", ")}`,
    { param: "model", code: "model_not_found" },
  );
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
