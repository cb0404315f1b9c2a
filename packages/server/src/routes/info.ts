/** GET /health, /v1/models and /v1/models/{id}. */
import type { FastifyInstance } from "fastify";
import type { ServedModel } from "../models.js";
import { findModel, type RouteContext } from "./context.js";

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

export function registerInfoRoutes(app: FastifyInstance, ctx: RouteContext): void {
  // "degraded": a model can no longer run (its `error` says why); the others still answer
  app.get("/health", async () => ({
    status: ctx.closing() ? "closing" : ctx.models.some((m) => m.model.unavailable) ? "degraded" : "ok",
    models: ctx.models.map((m) => ({
      id: m.name,
      backend: m.backend,
      context_length: m.model.contextLength,
      busy: m.queue.busy,
      waiting: m.queue.waiting,
      available: !m.model.unavailable,
      ...(m.model.unavailable ? { error: m.model.unavailable.message } : {}),
    })),
  }));

  app.get("/v1/models", async () => ({ object: "list", data: ctx.models.map(modelObject) }));
  // A wildcard, since names may hold a slash (`Qwen/Qwen3.5-0.8B`, the default name of an hf: model).
  app.get<{ Params: { "*": string } }>("/v1/models/*", async (req) =>
    modelObject(findModel(ctx, req.params["*"])),
  );
}
