/**
 * Encoding request prompts without stalling the server. Byte-level BPE in JavaScript takes seconds
 * on a large or hostile prompt (a 100,000-letter word: ~2.5 s with Qwen3.5's vocabulary), and the
 * event loop also answers /health and every other model. Small prompts are encoded in place (well
 * under a millisecond); larger ones go to a worker thread holding the same tokenizer, one at a time
 * in arrival order, each with a time limit (the worker is restarted when one runs over), and a
 * bounded line of waiting prompts (429 beyond it).
 */
import { Worker } from "node:worker_threads";
import { AnemllError } from "@anemll-qwen35/core";
import {
  type ApplyChatTemplateOptions,
  type ChatMessage,
  ChatTemplateError,
  type Tokenizer,
} from "@anemll-qwen35/generate";
import { ApiError } from "./errors.js";

/** Prompts up to this many characters are encoded on the event loop. */
export const INLINE_PROMPT_CHARS = 4096;
export const DEFAULT_TOKENIZE_TIMEOUT_MS = 20_000;
export const DEFAULT_TOKENIZE_PENDING = 16;

export type PromptJob =
  | { kind: "chat"; messages: ChatMessage[]; options: ApplyChatTemplateOptions & { suffix?: string } }
  | { kind: "text"; text: string };

interface Pending {
  readonly job: PromptJob;
  readonly resolve: (ids: number[]) => void;
  readonly reject: (err: unknown) => void;
}

type Reply = { ready: true } | { ids: Int32Array } | { error: { code?: string; message: string } };

export interface PromptTokenizerOptions {
  /** Longest time one prompt may take in the worker (default 20 s); it is refused with a 400 after. */
  timeoutMs?: number;
  /** Prompts that may wait for the worker (default 16); more get 429. */
  maxPending?: number;
}

export class PromptTokenizer {
  private worker: Worker | undefined;
  /** The worker has built its tokenizer (a job's time limit starts only then). */
  private ready = false;
  private readonly line: Pending[] = [];
  private current: { pending: Pending; timer: NodeJS.Timeout } | undefined;
  private readonly timeoutMs: number;
  private readonly maxPending: number;
  private closed = false;

  constructor(
    readonly tokenizer: Tokenizer,
    o: PromptTokenizerOptions = {},
  ) {
    this.timeoutMs = o.timeoutMs ?? DEFAULT_TOKENIZE_TIMEOUT_MS;
    this.maxPending = o.maxPending ?? DEFAULT_TOKENIZE_PENDING;
  }

  /** Ids of a prompt; `chars` is its size (content characters), which decides where it is encoded. */
  encode(job: PromptJob, chars: number): Promise<number[]> {
    if (chars <= INLINE_PROMPT_CHARS) {
      try {
        return Promise.resolve(run(this.tokenizer, job));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    if (this.closed) return Promise.reject(new ApiError(503, "the server is shutting down"));
    if (this.line.length >= this.maxPending) {
      return Promise.reject(
        new ApiError(429, `${this.line.length} large prompts already wait to be tokenized; retry shortly`, {
          type: "rate_limit_error",
          code: "queue_full",
          headers: { "retry-after": "1" },
        }),
      );
    }
    return new Promise((resolve, reject) => {
      this.line.push({ job, resolve, reject });
      this.next();
    });
  }

  /** Stops the worker; prompts still waiting are refused. */
  async close(): Promise<void> {
    this.closed = true;
    const why = new ApiError(503, "the server is shutting down", { code: "server_closing" });
    for (const p of this.line.splice(0)) p.reject(why);
    if (this.current) {
      clearTimeout(this.current.timer);
      this.current.pending.reject(why);
      this.current = undefined;
    }
    await this.stopWorker();
  }

  private next(): void {
    if (this.current || this.line.length === 0) return;
    const worker = this.ensureWorker();
    if (!this.ready) return; // next() runs again when it is
    const pending = this.line.shift() as Pending;
    const timer = setTimeout(() => {
      // the worker cannot be interrupted mid-encode: replace it
      void this.stopWorker();
      this.settle((p) =>
        p.reject(
          new ApiError(
            400,
            `the prompt could not be tokenized within ${this.timeoutMs / 1000} s; send a shorter prompt`,
            { code: "prompt_too_costly" },
          ),
        ),
      );
    }, this.timeoutMs);
    this.current = { pending, timer };
    worker.postMessage(pending.job);
  }

  /** Ends the current job (`how` resolves or rejects it) and starts the next. */
  private settle(how: (p: Pending) => void): void {
    const c = this.current;
    if (!c) return;
    this.current = undefined;
    clearTimeout(c.timer);
    how(c.pending);
    this.next();
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL("./prompt-worker.js", import.meta.url), {
      workerData: this.tokenizer.definition,
      execArgv: withoutConditions(process.execArgv),
    });
    worker.unref(); // an idle tokenizer does not keep the process alive
    // a replaced worker's last words are not about the current job
    worker.on("message", (r: Reply) => {
      if (this.worker !== worker) return;
      if ("ready" in r) {
        this.ready = true;
        this.next();
        return;
      }
      this.settle((p) => ("ids" in r ? p.resolve(toArray(r.ids)) : p.reject(fromWorker(r.error))));
    });
    worker.on("error", (err) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      // a worker that failed to start fails everyone waiting for it; a job's failure, that job
      if (!this.ready) for (const p of this.line.splice(0)) p.reject(err);
      else this.settle((p) => p.reject(err));
    });
    worker.on("exit", () => {
      if (this.worker === worker) this.worker = undefined;
    });
    this.worker = worker;
    this.ready = false;
    return worker;
  }

  private async stopWorker(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.ready = false;
    if (w) await w.terminate();
  }
}

/**
 * The parent's node options less `--conditions` (e.g. `tsx --conditions=source`, which would point
 * the worker's import of @anemll-qwen35/generate at TypeScript sources it has no loader for).
 */
export function withoutConditions(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i];
    if (a === "--conditions" || a === "-C") i++;
    else if (!a.startsWith("--conditions=") && !a.startsWith("-C=")) out.push(a);
  }
  return out;
}

function run(tokenizer: Tokenizer, job: PromptJob): number[] {
  return job.kind === "chat"
    ? tokenizer.encodeChat(job.messages, job.options).ids
    : tokenizer.encode(job.text);
}

/**
 * The worker's ids as a plain array, in one indexed pass (Array.from of a typed array is ~6x slower:
 * 25 ms for 400,000 ids, on the event loop).
 */
function toArray(ids: Int32Array): number[] {
  const out = new Array<number>(ids.length);
  for (let i = 0; i < ids.length; i++) out[i] = ids[i];
  return out;
}

/** The worker's error as the class the routes expect. */
function fromWorker(e: { code?: string; message: string }): Error {
  if (e.code === "E_CHAT_TEMPLATE") return new ChatTemplateError(e.message);
  return new AnemllError(e.code ?? "E_TOKENIZE", e.message);
}
