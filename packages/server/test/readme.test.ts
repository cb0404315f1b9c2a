/**
 * The README's account of the server under load and at shutdown — the worker that tokenizes large
 * prompts, the request timeout, the drain — states the limits the code enforces.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { logSafe } from "../src/errors.js";
import {
  DEFAULT_TOKENIZE_PENDING,
  DEFAULT_TOKENIZE_TIMEOUT_MS,
  INLINE_PROMPT_CHARS,
} from "../src/prompt-tokenizer.js";
import { DEFAULT_DRAIN_MS, DEFAULT_QUEUE, DEFAULT_REQUEST_TIMEOUT_MS } from "../src/server.js";

// one paragraph per line, whitespace as single spaces
const readme = readFileSync(resolve(__dirname, "../README.md"), "utf8").replace(/\s+/g, " ");
const seconds = (ms: number) => `${ms / 1000} s`;
/** Fails naming the sentence, not printing the whole README. */
const says = (text: string) => expect(readme.includes(text), `README says "${text}"`).toBe(true);

describe("server README", () => {
  it("describes the prompt worker with its real limits", () => {
    says(
      `Prompts over ${INLINE_PROMPT_CHARS.toLocaleString("en-US")} characters are tokenized in a worker thread`,
    );
    says(`at most ${DEFAULT_TOKENIZE_PENDING} waiting, then 429`);
    says(`each within ${seconds(DEFAULT_TOKENIZE_TIMEOUT_MS)}`);
    says(`longer than ${seconds(DEFAULT_TOKENIZE_TIMEOUT_MS)} to tokenize`);
    says(`\`{timeoutMs: ${DEFAULT_TOKENIZE_TIMEOUT_MS}, maxPending: ${DEFAULT_TOKENIZE_PENDING}}\``);
    expect(readme).toMatch(/refused before it is tokenized/);
  });

  it("gives the request timeout, the log truncation and the queue as the code has them", () => {
    says(`${seconds(DEFAULT_REQUEST_TIMEOUT_MS)} (\`requestTimeoutMs\`) to send its request`);
    expect(readme).toMatch(/gets 408/);
    const cut = logSafe("x".repeat(1000));
    says(`cut to ${cut.indexOf("…")} characters`);
    says(`At most \`queue\` (default ${DEFAULT_QUEUE}) wait`);
  });

  it("describes the drain: stop accepting, 503 for the queue, a bounded wait, a second signal", () => {
    says(`lets the running ones finish for up to \`drainMs\` (default ${seconds(DEFAULT_DRAIN_MS)})`);
    expect(readme).toMatch(
      /stops accepting connections, answers queued requests and new ones .* with 503 \(`server_closing`/,
    );
    says(`for up to \`--drain\` seconds (default ${DEFAULT_DRAIN_MS / 1000})`);
    expect(readme).toMatch(/a second signal stops at once/);
  });

  it("names the refusals the access checks answer with", () => {
    const access = readFileSync(resolve(__dirname, "../src/access.ts"), "utf8");
    for (const code of access.match(/code: "[a-z_]+"/g) ?? []) says(`\`${code.slice(7, -1)}\``);
    expect(access).toMatch(/code: "host_not_allowed"/);
    says("**Listening beyond loopback (`--host 0.0.0.0`, a LAN address) requires a key**");
  });
});
