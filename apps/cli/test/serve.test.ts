/**
 * `anemll-qwen35 serve` as users start it: the built bin in a child process, stopped with a signal.
 */
import { mkdtempSync } from "node:fs";
import { request } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { type CliOptions, cli, mlxOrSkip, startCli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
let dir: string;

beforeAll(async () => {
  dir = join(mkdtempSync(join(tmpdir(), "cli-serve-")), "tiny");
  await convert({ model: FIXTURE, out: dir, ctx: 128, fuse: 1 });
}, timeLimit(120_000));

// biome-ignore lint/suspicious/noExplicitAny: response bodies are inspected field by field
const json = (r: Response): Promise<any> => r.json();

/** Starts `serve ...args`; resolves once it listens, with its URL, its output and a stop (SIGTERM). */
async function serve(args: string[], o: CliOptions = {}) {
  const p = startCli(["serve", ...args], o);
  const url = (await p.waitFor(/serving the OpenAI API at (http:\/\/[^\s]+)\/v1/))[1];
  await p.waitFor(/Ctrl-C to stop/, "stderr"); // the model lines are out
  return {
    url,
    output: p.output,
    stop: async () => {
      p.child.kill("SIGTERM");
      return p.exited;
    },
    exited: p.exited,
    child: p.child,
  };
}

describe("anemll-qwen35 serve", () => {
  it("serves a converted model under --model-name, behind --api-key, until stopped", async () => {
    const s = await serve([
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
    const url = s.url;
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

    const { code, stderr } = await s.stop();
    expect(code).toBe(0);
    // one log line per request
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+3 tok · length/);
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+2 tok \(\d+ cached\) · length/);
    expect(stderr).toMatch(/GET \/v1\/models 401 · .*Missing API key/);
    await expect(fetch(`${url}/v1/models`)).rejects.toThrow(); // no longer listening
  });

  it("serves an MLX checkpoint quantized at load with --bits", async (ctx) => {
    if (!(await mlxOrSkip(ctx))) return;
    const s = await serve([FIXTURE, "--port", "0", "--bits", "4", "--model-name", "q4"]);
    expect(s.output().stdout).toMatch(/q4 · mlx \(bfloat16, 4-bit\) · context \d+ tokens/);
    expect((await s.stop()).code).toBe(0);
  });

  it("takes --prompt-cache SIZE and --no-prompt-cache", async () => {
    for (const [flags, shown] of [
      [["--prompt-cache", "64mb"], "queue 8 · prompt cache 64 MB"],
      [["--no-prompt-cache"], "queue 8 · no prompt cache"],
    ] as const) {
      const s = await serve([dir, "--backend", "reference", "--port", "0", ...flags]);
      const { stdout } = await s.stop();
      expect(stdout).toContain(shown);
    }
    const bad = await cli("serve", dir, "--prompt-cache", "lots");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--prompt-cache must be a size/);
  });

  it("answers only its own Host names and the --cors-origin pages; ANEMLL_API_KEY holds a key per client", async () => {
    const s = await serve(
      [
        dir,
        "--backend",
        "reference",
        "--port",
        "0",
        "--allowed-host",
        "models.lan",
        "--cors-origin",
        "http://localhost:5173",
      ],
      { env: { ANEMLL_API_KEY: "alice-key, bob-key" } },
    );
    expect(s.output().stdout).toMatch(/\(2 API keys, one per client\)/);
    const { hostname, port } = new URL(s.url);
    // node:http, since fetch will not send another Host
    const ask = (headers: Record<string, string>) =>
      new Promise<{ status: number; cors?: string }>((ok, fail) => {
        const req = request({ host: hostname, port, path: "/v1/models", headers }, (res) => {
          res.resume();
          const cors = res.headers["access-control-allow-origin"];
          res.on("end", () => ok({ status: res.statusCode ?? 0, ...(cors ? { cors } : {}) }));
        });
        req.on("error", fail);
        req.end();
      });
    const bob = { authorization: "Bearer bob-key" };
    expect((await ask({ ...bob, host: `evil.example:${port}`, origin: "http://evil.example" })).status).toBe(
      403,
    );
    expect((await ask({ ...bob, origin: "http://evil.example" })).status).toBe(403);
    expect(await ask({ ...bob, origin: "http://localhost:5173" })).toEqual({
      status: 200,
      cors: "http://localhost:5173",
    });
    expect((await ask({ ...bob, host: "models.lan" })).status).toBe(200);
    expect((await ask({ authorization: "Bearer alice-key" })).status).toBe(200);
    expect((await ask({ authorization: "Bearer carol-key" })).status).toBe(401);
    expect((await s.stop()).code).toBe(0);
  });

  it("refuses to listen beyond loopback without a key, saying why (exit 1)", async () => {
    const r = await cli("serve", dir, "--backend", "reference", "--host", "0.0.0.0", "--port", "0");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /error: listening on 0\.0\.0\.0 lets other machines in, so it needs an API key \(--api-key, or ANEMLL_API_KEY\)/,
    );
    const bad = await cli("serve", dir, "--port", "0", "--cors-origin", "localhost:5173/app");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/CORS origin "localhost:5173\/app" is not an origin/);
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

  it(
    "on SIGTERM stops taking requests, finishes the one in flight, then exits 0",
    async () => {
      const s = await serve([dir, "--backend", "reference", "--port", "0"]);
      const url = s.url;
      const answer = fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 60 }),
      }).then(async (r) => ({ status: r.status, body: await json(r) }));
      // the request is running when the signal comes (on a loaded machine it takes seconds to
      // reach the model: poll until it has, within the scaled limit)
      const busy = async () => (await fetch(`${url}/health`).then(json)).models[0].busy === true;
      const until = performance.now() + timeLimit(30_000);
      while (!(await busy()) && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
      expect(await busy()).toBe(true);
      const exited = s.stop();
      const r = await answer;
      expect(r.status).toBe(200);
      expect(r.body.usage.completion_tokens).toBe(60);
      const { code, stderr } = await exited;
      expect(code).toBe(0);
      expect(stderr).toMatch(/stopping: no new requests; finishing the 1 in flight \(up to 30 s/);
      expect(stderr).toMatch(/POST \/v1\/chat\/completions 200 · tiny · \d+\+60 tok · length/);
    },
    timeLimit(120_000),
  );

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
