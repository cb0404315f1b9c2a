/**
 * Server-sent events as OpenAI streams them: `data: {json}\n\n` per chunk, `data: [DONE]\n\n` last.
 * Headers go out with the first event, so a request that fails before producing anything still gets
 * a proper HTTP error status instead of a stream holding an error.
 */
import type { ServerResponse } from "node:http";

export class SseWriter {
  private started = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly extraHeaders: Record<string, string> = {},
  ) {}

  /** True once the status line and headers are out (an error can then only travel in the stream). */
  get headersSent(): boolean {
    return this.started;
  }

  /** The client is gone (the socket closed or the response ended). */
  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  send(data: unknown): void {
    this.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  /** `data: [DONE]` and the end of the response. */
  done(): void {
    this.write("data: [DONE]\n\n");
    if (!this.closed) this.res.end();
  }

  private write(s: string): void {
    if (this.closed) return;
    if (!this.started) {
      this.started = true;
      this.res.writeHead(200, {
        ...this.extraHeaders,
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        connection: "keep-alive",
        // reverse proxies (nginx) would otherwise buffer the stream
        "x-accel-buffering": "no",
      });
    }
    // Chunks are small and tokens come at most every few ms, so Node's own buffering stands in for
    // backpressure: a stalled reader holds at most one response's worth of text in memory.
    this.res.write(s);
  }
}
