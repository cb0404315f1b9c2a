import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { Command } from "commander";
import { beforeAll, describe, expect, it } from "vitest";
import { registerServe } from "../src/commands/serve.js";
import { makeOutput } from "../src/output.js";
import { cli, mlxOrSkip } from "./helpers.js";

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
    expect(s.output().stdout).toMatch(
      /tiny · reference \(fp32\) · context 128 tokens · queue 8 · prompt cache 1000 MB/,
    );

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
    // the same longer question twice: the second restores all but its last prompt token
    const long = JSON.stringify({
      model: "tiny",
      messages: [{ role: "user", content: "Tell me about the weather in Paris next week, please." }],
      max_tokens: 2,
    });
    await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: auth, body: long });
    const again = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: auth, body: long });
    const usage = (await json(again)).usage;
    expect(usage.prompt_tokens_details.cached_tokens).toBe(usage.prompt_tokens - 1);

    s.stop();
    const { stderr } = await s.done;
    // one log line per request
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+3 tok · length/);
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+2 tok \(\d+ cached\) · length/);
    expect(stderr).toMatch(/GET \/v1\/models 401 · .*Missing API key/);
    await expect(fetch(`${url}/v1/models`)).rejects.toThrow(); // no longer listening
  });

  it("serves an MLX checkpoint quantized at load with --bits", async (ctx) => {
    if (!(await mlxOrSkip(ctx))) return;
    const s = serve([FIXTURE, "--port", "0", "--bits", "4", "--model-name", "q4"]);
    await Promise.race([s.listening, s.done.then(() => Promise.reject(new Error("serve exited")))]);
    expect(s.output().stdout).toMatch(/q4 · mlx \(bfloat16, 4-bit\) · context \d+ tokens/);
    s.stop();
    await s.done;
  }, 60_000);

  it("takes --prompt-cache SIZE and --no-prompt-cache", async () => {
    for (const [flags, shown] of [
      [["--prompt-cache", "64mb"], "queue 8 · prompt cache 64 MB"],
      [["--no-prompt-cache"], "queue 8 · no prompt cache"],
    ] as const) {
      const s = serve([dir, "--backend", "reference", "--port", "0", ...flags]);
      await Promise.race([s.listening, s.done.then(() => Promise.reject(new Error("serve exited")))]);
      s.stop();
      const { stdout } = await s.done;
      expect(stdout).toContain(shown);
    }
    const bad = await cli("serve", dir, "--prompt-cache", "lots");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--prompt-cache must be a size/);
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

  it("on SIGTERM stops taking requests, finishes the one in flight, then exits 0", async () => {
    const child = spawn(
      process.execPath,
      [resolve(__dirname, "../dist/cli.js"), "serve", dir, "--backend", "reference", "--port", "0"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    const url = await new Promise<string>((ok, fail) => {
      const t = setInterval(() => {
        const m = /serving the OpenAI API at (http:\/\/[\d.:]+)\/v1/.exec(stdout);
        if (m) {
          clearInterval(t);
          ok(m[1]);
        }
      }, 20);
      exited.then(() => fail(new Error(`serve exited: ${stderr}`)));
    });
    const answer = fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 60 }),
    }).then(async (r) => ({ status: r.status, body: await json(r) }));
    // the request is running when the signal comes
    const busy = async () => (await fetch(`${url}/health`).then(json)).models[0].busy === true;
    // (up to 30 s: on a loaded machine the request takes seconds to reach the model)
    for (let i = 0; i < 3000 && !(await busy()); i++) await new Promise((r) => setTimeout(r, 10));
    expect(await busy()).toBe(true);
    child.kill("SIGTERM");
    const r = await answer;
    expect(r.status).toBe(200);
    expect(r.body.usage.completion_tokens).toBe(60);
    expect(await exited).toBe(0);
    expect(stderr).toMatch(/stopping: no new requests; finishing the 1 in flight \(up to 30 s/);
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+60 tok · length/);
  }, 120_000);

  it("says plainly when the port is in use (exit 1, no stack trace)", async () => {
    const taken = createNetServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    const port = (taken.address() as { port: number }).port;
    try {
      const r = await cli("serve", dir, "--backend", "reference", "--port", String(port));
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`error: port ${port} on 127.0.0.1 is already in use`));
      expect(r.stderr).not.toMatch(/\n\s+at /);
    } finally {
      taken.close();
    }
  });
});
