/**
 * Load benchmark: N concurrent OpenAI clients send a bounded number of chat requests (half streamed)
 * to a server on loopback that serves the tiny fixture model (converted here, reference backend).
 * Reports throughput, latency percentiles and a tally proving every request ended either with a
 * complete response or with a clean OpenAI-shaped error (429 included) — none lost.
 *
 *   pnpm --filter @anemll-qwen35/server bench -- [--clients 8] [--requests 64] [--queue 8]
 *     [--max-tokens 16] [--time-limit 300] [--out bench/results/load.json]
 */

import { setMaxListeners } from "node:events";
import { mkdirSync, mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { convert } from "@anemll-qwen35/converter";
import OpenAI from "openai";
import { createServer, type RequestLog } from "../src/index.js";

const here = dirname(new URL(import.meta.url).pathname);
const { values: args } = parseArgs({
  options: {
    clients: { type: "string", default: "8" },
    requests: { type: "string", default: "64" },
    queue: { type: "string", default: "8" },
    "max-tokens": { type: "string", default: "16" },
    "time-limit": { type: "string", default: "300" },
    out: { type: "string", default: join(here, "results", "load.json") },
  },
});
const clients = Number(args.clients);
const total = Number(args.requests);
const queue = Number(args.queue);
const maxTokens = Number(args["max-tokens"]);
const timeLimitS = Number(args["time-limit"]);

type Outcome =
  | { kind: "complete"; stream: boolean; latencyMs: number; ttftMs?: number; tokens: number; finish: string }
  | { kind: "clean_error"; status: number; type: string; code: string | null; retryAfter: string | null }
  | { kind: "timed_out" }
  | { kind: "lost"; why: string };

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function main(): Promise<void> {
  const fixture = resolve(here, "../../../fixtures/tiny-tied");
  const dir = join(mkdtempSync(join(tmpdir(), "server-bench-")), "tiny");
  const tc = performance.now();
  await convert({ model: fixture, out: dir, ctx: 128, fuse: 1 });
  console.log(`converted the fixture in ${((performance.now() - tc) / 1000).toFixed(1)} s → ${dir}`);

  const serverLogs: RequestLog[] = [];
  const server = await createServer({
    models: [{ name: "tiny", path: dir, backend: "reference" }],
    port: 0,
    queue,
    onRequestEnd: (l) => serverLogs.push(l),
  });
  const url = await server.listen();
  const client = new OpenAI({
    baseURL: `${url}/v1`,
    apiKey: "bench",
    maxRetries: 0,
    timeout: timeLimitS * 1000,
  });
  // One warm-up request so the first timed one does not pay the interpreter's start-up.
  await client.chat.completions.create({
    model: "tiny",
    messages: [{ role: "user", content: "warm up" }],
    max_tokens: 2,
  });
  const warmupLogs = serverLogs.length;

  const deadline = AbortSignal.timeout(timeLimitS * 1000);
  setMaxListeners(total + clients, deadline); // every request listens to it
  const outcomes: Outcome[] = [];
  let next = 0;

  async function one(i: number): Promise<Outcome> {
    const stream = i % 2 === 0;
    const body = {
      model: "tiny",
      messages: [
        { role: "user" as const, content: `Request ${i}: say something about the number ${i * 7}.` },
      ],
      max_tokens: maxTokens,
      temperature: 0,
    };
    const t0 = performance.now();
    try {
      if (!stream) {
        const r = await client.chat.completions.create(body, { signal: deadline });
        const finish = r.choices[0]?.finish_reason;
        if (!finish || !r.usage) return { kind: "lost", why: "response without finish_reason or usage" };
        return {
          kind: "complete",
          stream,
          latencyMs: performance.now() - t0,
          tokens: r.usage.completion_tokens,
          finish,
        };
      }
      const s = await client.chat.completions.create(
        { ...body, stream: true, stream_options: { include_usage: true } },
        { signal: deadline },
      );
      let ttftMs: number | undefined;
      let finish: string | undefined;
      let tokens: number | undefined;
      for await (const c of s) {
        if (ttftMs === undefined && c.choices[0]?.delta.content) ttftMs = performance.now() - t0;
        finish ??= c.choices[0]?.finish_reason ?? undefined;
        if (c.usage) tokens = c.usage.completion_tokens;
      }
      if (!finish || tokens === undefined)
        return { kind: "lost", why: "stream ended without finish_reason or usage" };
      return { kind: "complete", stream, latencyMs: performance.now() - t0, ttftMs, tokens, finish };
    } catch (err) {
      if (deadline.aborted) return { kind: "timed_out" };
      if (err instanceof OpenAI.APIError && typeof err.status === "number") {
        const e = err.error as { type?: string; code?: string | null } | undefined;
        if (e && typeof e.type === "string") {
          return {
            kind: "clean_error",
            status: err.status,
            type: e.type,
            code: e.code ?? null,
            retryAfter: err.headers?.get("retry-after") ?? null,
          };
        }
      }
      return { kind: "lost", why: String((err as Error)?.message ?? err) };
    }
  }

  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        outcomes.push(await one(i));
      }
    }),
  );
  const wallS = (performance.now() - started) / 1000;
  // The server logs a request when its response ends; give the last ones a moment.
  for (let w = 0; w < 100 && serverLogs.length - warmupLogs < total; w++)
    await new Promise((r) => setTimeout(r, 10));
  await server.close();

  const complete = outcomes.filter((o) => o.kind === "complete");
  const clean = outcomes.filter((o) => o.kind === "clean_error");
  const timedOut = outcomes.filter((o) => o.kind === "timed_out");
  const lost = outcomes.filter((o) => o.kind === "lost");
  const latencies = complete.map((o) => o.latencyMs).sort((a, b) => a - b);
  const ttfts = complete.flatMap((o) => (o.ttftMs === undefined ? [] : [o.ttftMs])).sort((a, b) => a - b);
  const tokens = complete.reduce((n, o) => n + o.tokens, 0);
  const timed = serverLogs.slice(warmupLogs);
  const serverSeen = timed.length;
  // How much of the wall time the model was working (a request holds it from its turn to its end):
  // near 1 means the server kept the one model state busy and added little of its own.
  const busyMs = timed.reduce((n, l) => n + (l.runMs ?? 0), 0);

  const result = {
    benchmark: "server-load",
    date: new Date().toISOString(),
    machine: {
      cpus: cpus().length,
      cpu: cpus()[0]?.model,
      node: process.version,
      platform: process.platform,
    },
    model: { fixture: "fixtures/tiny-tied", ctx: 128, fuse: 1, backend: "reference (fp32)" },
    config: { clients, requests: total, queue, maxTokens, timeLimitS, streamed: "every other request" },
    wallSeconds: wallS,
    throughput: {
      requestsPerSecond: complete.length / wallS,
      completionTokensPerSecond: tokens / wallS,
    },
    latencyMs: {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.at(-1) ?? null,
    },
    timeToFirstTokenMs: { p50: percentile(ttfts, 50), p99: percentile(ttfts, 99) },
    /** Server-side time a request held the model (its turn), i.e. latency without the queue. */
    serviceMs: {
      p50: percentile(
        timed
          .flatMap((l) => (l.runMs === undefined || l.status !== 200 ? [] : [l.runMs]))
          .sort((a, b) => a - b),
        50,
      ),
    },
    tally: {
      sent: outcomes.length,
      complete: complete.length,
      cleanErrors: clean.length,
      cleanErrorsByStatus: Object.fromEntries(
        [...new Set(clean.map((c) => c.status))].map((s) => [s, clean.filter((c) => c.status === s).length]),
      ),
      retryAfterOn429: clean.filter((c) => c.status === 429).every((c) => c.retryAfter !== null),
      timedOut: timedOut.length,
      lost: lost.length,
      lostReasons: lost.map((l) => l.why),
      serverLogged: serverSeen,
    },
    completionTokens: tokens,
    modelBusyFraction: busyMs / 1000 / wallS,
    finishReasons: Object.fromEntries(
      [...new Set(complete.map((c) => c.finish))].map((f) => [
        f,
        complete.filter((c) => c.finish === f).length,
      ]),
    ),
  };

  const t = result.tally;
  console.log(
    `${clients} clients · ${total} requests · queue ${queue} · max_tokens ${maxTokens} · ${wallS.toFixed(1)} s\n` +
      `throughput  ${result.throughput.requestsPerSecond.toFixed(2)} req/s · ` +
      `${result.throughput.completionTokensPerSecond.toFixed(1)} completion tok/s\n` +
      `latency     p50 ${result.latencyMs.p50.toFixed(0)} ms · p99 ${result.latencyMs.p99.toFixed(0)} ms · ` +
      `ttft p50 ${result.timeToFirstTokenMs.p50.toFixed(0)} ms (streamed) · service p50 ${result.serviceMs.p50.toFixed(0)} ms · model busy ${(100 * result.modelBusyFraction).toFixed(0)}% of the time\n` +
      `tally       sent ${t.sent} = complete ${t.complete} + clean errors ${t.cleanErrors} ` +
      `${JSON.stringify(t.cleanErrorsByStatus)} + timed out ${t.timedOut} + lost ${t.lost} · server logged ${t.serverLogged}`,
  );

  mkdirSync(dirname(args.out), { recursive: true });
  const tmp = `${args.out}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(result, null, 2)}\n`);
  renameSync(tmp, args.out);
  console.log(`wrote ${args.out}`);

  const ok =
    t.sent === total &&
    t.lost === 0 &&
    t.complete + t.cleanErrors + t.timedOut === t.sent &&
    t.serverLogged === total;
  if (!ok) {
    console.error("FAIL: some requests were lost or the tally does not add up");
    process.exitCode = 1;
  } else if (!t.retryAfterOn429) {
    console.error("FAIL: a 429 came without Retry-After");
    process.exitCode = 1;
  } else {
    console.log("ok: every request ended with a complete response or a clean error");
  }
}

await main();
