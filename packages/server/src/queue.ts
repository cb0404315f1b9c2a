/**
 * One model, one request at a time: a model holds one sequence state (KV caches, GatedDeltaNet
 * states), so requests for it take turns, first come first served. The wait line is bounded; a
 * request that finds it full is refused at once (the server answers 429) rather than piling up.
 */
import { QueueFullError, RequestAbortedError } from "./errors.js";

interface Waiter {
  grant: (release: () => void) => void;
  fail: (err: unknown) => void;
}

export class ModelQueue {
  private running = false;
  private readonly waiters: Waiter[] = [];
  /** Moving average of how long a turn holds the model, for Retry-After. */
  private avgHoldMs = 1000;

  /**
   * @param model the model's name (for messages)
   * @param capacity how many requests may wait while one runs (0: none may wait)
   */
  constructor(
    readonly model: string,
    readonly capacity: number,
  ) {}

  /** A request holds the model now. */
  get busy(): boolean {
    return this.running;
  }

  /** Requests waiting for their turn. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** Seconds until a new request could likely start: the whole line ahead, at the average turn length. */
  retryAfterSeconds(): number {
    const turns = this.waiters.length + (this.running ? 1 : 0);
    return Math.min(600, Math.max(1, Math.ceil((turns * this.avgHoldMs) / 1000)));
  }

  /**
   * Waits for the model's turn. Resolves with `release`, which the holder must call exactly once.
   * Throws `QueueFullError` at once when `capacity` requests already wait, and `RequestAbortedError`
   * if `signal` fires while waiting (the request leaves the line).
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new RequestAbortedError("request cancelled before its turn"));
    if (!this.running) {
      this.running = true;
      return Promise.resolve(this.releaser());
    }
    if (this.waiters.length >= this.capacity) {
      return Promise.reject(new QueueFullError(this.model, this.waiters.length, this.retryAfterSeconds()));
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new RequestAbortedError("request cancelled while waiting for its turn"));
      };
      const waiter: Waiter = {
        grant: (release) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(release);
        },
        fail: (err) => {
          signal?.removeEventListener("abort", onAbort);
          reject(err);
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Refuses everyone still waiting (server shutdown). The running request finishes on its own. */
  rejectWaiting(err: unknown): void {
    for (const w of this.waiters.splice(0)) w.fail(err);
  }

  private releaser(): () => void {
    const started = performance.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.avgHoldMs = 0.8 * this.avgHoldMs + 0.2 * (performance.now() - started);
      const next = this.waiters.shift();
      if (next) next.grant(this.releaser());
      else this.running = false;
    };
  }
}
