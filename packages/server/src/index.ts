/**
 * @anemll-qwen35/server: createServer() — an OpenAI-compatible HTTP server (chat completions,
 * completions, models, health) over one or more models, each with its own queue and prompt cache.
 */

// The server
export {
  createServer,
  DEFAULT_DRAIN_MS,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_PORT,
  DEFAULT_QUEUE,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type OpenAIServer,
  type ServerOptions,
} from "./server.js";
export type { RequestLog } from "./request-log.js";
export type { PromptTokenizerOptions } from "./prompt-tokenizer.js";

// The models it serves: ready (a StepModel and its tokenizer) or a path loadModel opens
export {
  DEFAULT_PROMPT_CACHE_BYTES,
  defaultName,
  type ModelSource,
  type PathModelSource,
  type PromptCacheSettings,
  type ReadyModelSource,
  type ServedModel,
} from "./models.js";

// Errors: bad options, and a port that cannot be listened on
export { ServerConfigError, ServerListenError } from "./errors.js";
