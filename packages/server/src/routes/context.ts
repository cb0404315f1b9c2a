/** What the routes share: the served models, the request bookkeeping and the request log. */
import type { FastifyRequest } from "fastify";
import { modelNotFound } from "../errors.js";
import type { ServedModel } from "../models.js";
import type { RequestLog } from "../request-log.js";

/** Per-request bookkeeping, on `req.anemll`. */
export interface RequestState {
  started: number;
  /** When the request got its model's turn, and when it gave it back. */
  turn?: { start: number; end?: number };
  log: Partial<RequestLog>;
  logged: boolean;
  /** Who sent it: its API key's partition of the prompt cache ("" without keys; see access.ts). */
  client: string;
}

declare module "fastify" {
  interface FastifyRequest {
    anemll: RequestState;
  }
}

export interface RouteContext {
  readonly models: readonly ServedModel[];
  /** True once close() began. */
  readonly closing: () => boolean;
  /** Fires when close() stops waiting for the requests in flight (its drain time is over). */
  readonly shutdown: AbortSignal;
  /** Registers a request's work so close() can wait for it. */
  track<T>(p: Promise<T>): Promise<T>;
  /** Sends the request's log line (once). */
  emitLog(req: FastifyRequest, status: number): void;
}

/** The served model a request names, or the OpenAI 404. */
export function findModel(ctx: RouteContext, name: string): ServedModel {
  const m = ctx.models.find((x) => x.name === name);
  if (!m)
    throw modelNotFound(
      name,
      ctx.models.map((x) => x.name),
    );
  return m;
}
