/**
 * Big-prompt attack: while N clients each send one huge chat prompt (default 800 KB of words) to a
 * model with a long context, /health is polled every 20 ms and a small chat goes to a second model.
 * Reports how long /health and the other model waited, and the event loop's longest stall: the
 * loop must stay free while the big prompts are tokenized, checked and handed to the model. The
 * models answer at once and can snapshot their state, so what is measured is the server's own work
 * around a model (prompt copies, the prompt cache), as with a real one; `--ctx` below the prompts'
 * length measures the refusal path instead.
 *
 *   pnpm --filter @anemll-qwen35/server exec tsx --conditions=source bench/big-prompts.ts --
 *     [--attackers 4] [--kb 800] [--ctx 1048576] [--server ../src/index.ts] [--label after] [--out FILE]
 *
 * `--server` points at another copy of the server's src/index.ts (e.g. an older commit's, copied
 * under this package so that its imports resolve) to measure before and after in the same way.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { monitorEventLoopDelay, performance as perf } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { EosModel } from "../test/helpers.js";

const here = dirname(new URL(import.meta.url).pathname);
const { values: args } = parseArgs({
  options: {
    attackers: { type: "string", default: "4" },
    kb: { type: "string", default: "800" },
    ctx: { type: "string", default: String(1 << 20) },
    server: { type: "string", default: join(here, "../src/index.ts") },
    label: { type: "string", default: "after" },
    out: { type: "string" },
  },
});

const percentile = (sorted: number[], p: number) =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];

async function main(): Promise<void> {
  const attackers = Number(args.attackers);
  const kb = Number(args.kb);
  const { createServer } = (await import(resolve(args.server))) as typeof import("../src/index.js");
  const tokenizer = await loadTokenizer(resolve(here, "../../../fixtures/tokenizer"));
  const server = await createServer({
    models: [
      // long enough for the prompts (the fixture's 1,000-id vocabulary makes short tokens)
      { name: "long", model: new EosModel(Number(args.ctx), tokenizer, { snapshots: true }), tokenizer },
      { name: "other", model: new EosModel(4096, tokenizer, { snapshots: true }), tokenizer },
    ],
    port: 0,
    maxBodyBytes: (kb + 64) * 1024,
  });
  const url = await server.listen();
  const words = "the quick brown fox jumps over the lazy dog while seven zebras quietly graze ";
  const content = words.repeat(Math.ceil((kb * 1024) / words.length)).slice(0, kb * 1024);
  const chat = (model: string, text: string) =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: "user", content: text }] }),
    });

  const loop = monitorEventLoopDelay({ resolution: 5 });
  const health: number[] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const t = performance.now();
      await fetch(`${url}/health`).then((r) => r.text());
      health.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  await new Promise((r) => setTimeout(r, 200)); // a baseline before the attack
  loop.enable();
  const elu = perf.eventLoopUtilization();
  const started = performance.now();
  const attacks = Array.from({ length: attackers }, async () => {
    const t = performance.now();
    const r = await chat("long", content);
    const body = (await r.json()) as { usage?: { prompt_tokens: number } };
    return { status: r.status, ms: performance.now() - t, tokens: body.usage?.prompt_tokens };
  });
  await new Promise((r) => setTimeout(r, 100));
  const t0 = performance.now();
  const small = await chat("other", "hi");
  await small.text();
  const otherMs = performance.now() - t0;
  const results = await Promise.all(attacks);
  const attackMs = performance.now() - started;
  loop.disable();
  const busy = perf.eventLoopUtilization(elu);
  polling = false;
  await poller;
  await server.close();

  const sorted = [...health].sort((a, b) => a - b);
  const report = {
    label: args.label,
    date: new Date().toISOString(),
    node: process.version,
    loadavg: loadavg(),
    attackers,
    promptKB: kb,
    contextLength: Number(args.ctx),
    promptTokens: results.map((r) => r.tokens),
    attackSeconds: attackMs / 1000,
    attackStatuses: results.map((r) => r.status),
    attackSecondsEach: results.map((r) => r.ms / 1000),
    health: {
      polls: health.length,
      medianMs: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      maxMs: sorted.at(-1),
    },
    otherModelChatMs: otherMs,
    // during the attack: the longest time the event loop could not run anything, and how long in
    // all it was busy (the server's own work on the main thread, and the bench's polling)
    eventLoopMaxStallMs: loop.max / 1e6,
    eventLoopBusyMs: busy.active,
  };
  console.log(JSON.stringify(report, null, 2));
  if (args.out) {
    mkdirSync(dirname(resolve(args.out)), { recursive: true });
    writeFileSync(resolve(args.out), `${JSON.stringify(report, null, 2)}\n`);
  }
}

await main();
