import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { Command } from "commander";
import { beforeAll, describe, expect, it } from "vitest";
import { registerServe } from "../src/commands/serve.js";
import { makeOutput } from "../src/output.js";
import { cli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
let dir: string;

beforeAll(async () => {
  dir = join(mkdtempSync(join(tmpdir(), "cli-serve-")), "tiny");
  await convert({ model: FIXTURE, out: dir, ctx: 128, fuse: 1 });
}, 120_000);

// biome-ignore lint/suspicious/noExplicitAny: response bodies are inspected field by field
const json = (r: Response): Promise<any> => r.json();

/** Runs `serve` in-process until `stop` fires; resolves with what it printed. */
function serve(args: string[]) {
  let stdout = "";
  let stderr = "";
  const streams = {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
  };
  const stop = new AbortController();
  let onUrl: (url: string) => void = () => {};
  const listening = new Promise<string>((r) => {
    onUrl = r;
  });
  const program = new Command().exitOverride();
  registerServe(
    program,
    { streams, output: () => makeOutput(false, streams) },
    { signal: stop.signal, onListening: onUrl },
  );
  const done = program.parseAsync(["serve", ...args], { from: "user" }).then(() => ({ stdout, stderr }));
  return { listening, done, stop: () => stop.abort(), output: () => ({ stdout, stderr }) };
}

describe("anemll-qwen35 serve", () => {
  it("serves a converted model under --model-name, behind --api-key, until stopped", async () => {
    const s = serve([
      dir,
      "--backend",
      "reference",
      "--port",
      "0",
      "--model-name",
      "tiny",
      "--api-key",
      "k1",
    ]);
    const url = await Promise.race([
      s.listening,
      s.done.then(() => Promise.reject(new Error("serve exited"))),
    ]);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(s.output().stdout).toMatch(
      /serving the OpenAI API at http:\/\/127\.0\.0\.1:\d+\/v1 \(API key required\)/,
    );
    expect(s.output().stdout).toMatch(/tiny · reference \(fp32\) · context 128 tokens · queue 8/);

    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    const auth = { authorization: "Bearer k1", "content-type": "application/json" };
    const models = await fetch(`${url}/v1/models`, { headers: auth }).then(json);
    expect(models.data.map((m: { id: string }) => m.id)).toEqual(["tiny"]);
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 }),
    });
    expect(r.status).toBe(200);
    const body = await json(r);
    expect(body.usage.completion_tokens).toBe(3);
    expect(body.choices[0].finish_reason).toBe("length");

    s.stop();
    const { stderr } = await s.done;
    // one log line per request
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+3 tok · length/);
    expect(stderr).toMatch(/GET \/v1\/models 401 · .*Missing API key/);
    await expect(fetch(`${url}/v1/models`)).rejects.toThrow(); // no longer listening
  });

  it("is registered in the program and rejects bad usage with exit code 2", async () => {
    const help = await cli("serve", "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--api-key <key>/);
    expect(help.stdout).toMatch(/--model <name=path>/);

    const none = await cli("serve");
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/at least one model/);
    const bad = await cli("serve", "--model", "no-equals-sign");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--model must be NAME=PATH/);
    const two = await cli("serve", dir, dir, "--model-name", "x");
    expect(two.code).toBe(2);
    expect(two.stderr).toMatch(/--model-name names a single model/);
    const missing = await cli("serve", join(dir, "nope"), "--port", "0");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/nope: no such folder/);
  });
});
