/**
 * One line of request log: server.ts and the routes fill it in as the request goes, and
 * `ServerOptions.onRequestEnd` receives it when the response is complete.
 */
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
  /** Prompt tokens restored from the prompt cache (not prefilled). */
  cachedTokens?: number;
  completionTokens?: number;
  /** Time spent waiting for the model's turn. */
  queuedMs?: number;
  /** Time the request held the model (its turn: generation and answer). */
  runMs?: number;
  totalMs: number;
  error?: string;
}
