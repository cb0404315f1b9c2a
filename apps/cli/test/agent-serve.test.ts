/**
 * The default conversion holds an agent conversation (issue 25): `convert` with no options on
 * fixtures/tiny-trained (ctx 2048 in buckets 256 / 1,024 / 2,048), then `serve` (the built bin,
 * reference backend) answers a scripted tool-calling conversation — a system prompt, 8 tool
 * schemas, then turns that each add a tool call and a tool result — past 1,800 prompt tokens
 * without an error (measured: 1,653 → 2,002 prompt tokens over 4 turns), each later turn restoring
 * the cached prefix and prefilling only its new tokens.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { cli, startCli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-trained");
let dir: string;

beforeAll(async () => {
  dir = join(mkdtempSync(join(tmpdir(), "cli-agent-")), "tiny-trained");
  const r = await cli("convert", FIXTURE, "-o", dir, "--workers", "1");
  expect(r.code, r.stderr).toBe(0);
}, timeLimit(300_000));

const words = readFileSync(join(FIXTURE, "heldout.txt"), "utf8").split(/\s+/).filter(Boolean);
/** `n` words of the fixture's held-out text from word `from` on (text the tokenizer knows). */
const text = (n: number, from: number) =>
  Array.from({ length: n }, (_, i) => words[(from + i) % words.length]).join(" ");

const tools = Array.from({ length: 8 }, (_, i) => ({
  type: "function",
  function: {
    name: `tool_${i}`,
    description: text(5, i * 40),
    parameters: {
      type: "object",
      properties: { query: { type: "string", description: text(3, i * 13) }, limit: { type: "integer" } },
      required: ["query"],
    },
  },
}));

describe("the default conversion serves an agent conversation", () => {
  it(
    "system prompt + 8 tools + tool results past 1,800 tokens: every turn 200, later turns from the prompt cache",
    async () => {
      const manifest = JSON.parse(readFileSync(join(dir, "model.json"), "utf8"));
      expect(manifest.buckets).toEqual([256, 1024, 2048]);
      const p = startCli(["serve", dir, "--backend", "reference", "--port", "0"]);
      const url = (await p.waitFor(/serving the OpenAI API at (http:\/\/[^\s]+)\/v1/))[1];
      await p.waitFor(/Ctrl-C to stop/, "stderr");
      expect(p.output().stdout).toMatch(/context 2048 tokens/);
      const messages: Record<string, unknown>[] = [
        { role: "system", content: text(80, 5) },
        { role: "user", content: text(20, 900) },
      ];
      const usages: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } }[] = [];
      for (let turn = 0; turn < 4; turn++) {
        const r = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny-trained", messages, tools, max_tokens: 2, temperature: 0 }),
        });
        // biome-ignore lint/suspicious/noExplicitAny: the response body is inspected field by field
        const body: any = await r.json();
        expect(r.status, JSON.stringify(body)).toBe(200);
        usages.push(body.usage);
        // the agent calls a tool and gets ~100 tokens back
        messages.push({
          role: "assistant",
          content: "",
          tool_calls: [
            {
              id: `call_${turn}`,
              type: "function",
              function: { name: `tool_${turn % 8}`, arguments: JSON.stringify({ query: text(4, turn * 3) }) },
            },
          ],
        });
        messages.push({ role: "tool", tool_call_id: `call_${turn}`, content: text(40, 1200 + turn * 300) });
      }
      const last = usages.at(-1)!;
      expect(last.prompt_tokens).toBeGreaterThan(1800);
      expect(last.prompt_tokens).toBeLessThan(2048);
      for (const u of usages.slice(1)) expect(u.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
      p.child.kill("SIGTERM");
      expect((await p.exited).code).toBe(0);
    },
    timeLimit(600_000),
  );
});
