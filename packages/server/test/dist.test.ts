/**
 * The built server, as the npm package ships it: dist/index.js (not the sources) with a prompt long
 * enough to be tokenized in the worker thread, so a runtime file missing from the build fails here.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { afterAll, beforeAll, expect, it } from "vitest";
import { INLINE_PROMPT_CHARS } from "../src/prompt-tokenizer.js";
import { FIXTURE, ScriptedModel } from "./helpers.js";

const dist = join(import.meta.dirname, "..", "dist", "index.js");
type Server = { listen(): Promise<string>; close(): Promise<void> };
let server: Server;
let url: string;
let model: ScriptedModel;

beforeAll(async () => {
  if (!existsSync(dist)) throw new Error(`${dist} is missing: build the server first (pnpm run build)`);
  const built = (await import(dist)) as typeof import("../src/index.js");
  const tokenizer = await loadTokenizer(FIXTURE);
  model = new ScriptedModel(tokenizer, () => "ok");
  server = await built.createServer({ models: [{ name: "m", model, tokenizer }], port: 0 });
  url = await server.listen();
});
afterAll(() => server?.close());

it("the built server tokenizes a long prompt in its worker (dist/prompt-worker.js)", async () => {
  const content = "hello world ".repeat(400);
  expect(content.length).toBeGreaterThan(INLINE_PROMPT_CHARS);
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content }], max_tokens: 4 }),
  });
  const body = (await r.json()) as { usage: { prompt_tokens: number } };
  expect(r.status, JSON.stringify(body)).toBe(200);
  expect(body.usage.prompt_tokens).toBeGreaterThan(400);
  expect(model.prompts.at(-1)).toContain("hello world hello world");
});
