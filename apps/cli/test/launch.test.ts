/**
 * `launch -- serve`: a model split across two ranks on 127.0.0.1 (MLX's ring backend, CPU) next to a
 * model rank 0 runs alone. A rank killed mid-generation ends that generation with an error, the split
 * model then answers 503 while the other keeps answering, and Ctrl-C still stops everything.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterEach, describe, expect, it } from "vitest";
import { CLI, cli, mlxOrSkip } from "./helpers.js";

const FIXTURES = resolve(import.meta.dirname, "../../../fixtures");

// biome-ignore lint/suspicious/noExplicitAny: response bodies are inspected field by field
type Json = any;

/** A port p with p and p + 1 free on 127.0.0.1 (the ring's two ranks). */
async function freePortPair(): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((ok) => {
      const s = createServer().once("error", () => ok(false));
      s.listen({ host: "127.0.0.1", port }, () => s.close(() => ok(true)));
    });
  for (;;) {
    const p = 20_000 + Math.floor(Math.random() * 30_000);
    if ((await free(p)) && (await free(p + 1))) return p;
  }
}

let launcher: ChildProcess | undefined;
afterEach(() => {
  if (launcher?.exitCode === null) launcher.kill("SIGKILL");
});

const post = (url: string, body: unknown) =>
  fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

/**
 * Starts `launch -n 2 -- serve <models> --dtype float32` on 127.0.0.1 and waits until `ready` holds
 * for what it printed so far; `out` keeps collecting after that.
 */
async function launchServe(models: string[], ready: (stdout: string, stderr: string) => boolean) {
  const port = await freePortPair();
  const child = spawn(
    process.execPath,
    [
      CLI,
      "launch",
      "--hosts",
      "127.0.0.1",
      "-n",
      "2",
      "--starting-port",
      String(port),
      "--",
      "serve",
      ...models,
      "--dtype",
      "float32",
      "--port",
      "0",
      // loading the ranks takes a while on a loaded machine
      "--join-timeout",
      String(timeLimit(60_000) / 1000),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  launcher = child;
  const out = { stdout: "", stderr: "" };
  child.stdout!.on("data", (d) => (out.stdout += d));
  child.stderr!.on("data", (d) => (out.stderr += d));
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  await new Promise<void>((ok, fail) => {
    const timer = setInterval(() => {
      if (!ready(out.stdout, out.stderr)) return;
      clearInterval(timer);
      ok();
    }, 20);
    exited.then(() => {
      clearInterval(timer);
      fail(new Error(`launch exited: ${out.stderr}`));
    });
  });
  return { child, out, exited };
}

describe("anemll-qwen35 launch -- serve", () => {
  it(
    "serves a model split across 2 ranks; a rank killed mid-generation: error, then 503 for it, the other model still answers",
    async (t) => {
      if (!(await mlxOrSkip(t))) return;
      const big = `${FIXTURES}/tiny-moe`;
      const prompt = { prompt: "hello", temperature: 0 };
      const single = await cli(
        "--json",
        "run",
        big,
        "--raw",
        "--dtype",
        "float32",
        "--temperature",
        "0",
        "--max-tokens",
        "12",
        "hello",
      );
      expect(single.code, single.stderr).toBe(0);

      const urlLine = /serving the OpenAI API at (http:\/\/[\d.:]+)\/v1/;
      const { child, out, exited } = await launchServe(
        ["--model", `big=mlx:${big}`, "--model", `small=mlx:${FIXTURES}/tiny-gqa`, "--split", "big"],
        // the model lines follow the URL, maybe in a later chunk
        (stdout, stderr) =>
          urlLine.test(stdout) && /\n {2}small · /.test(stdout) && /\[rank 1\] rank 1 \(pid/.test(stderr),
      );
      const url = urlLine.exec(out.stdout)![1];
      expect(out.stdout).toMatch(/big · mlx \(float32, 2 ranks: layers 0-3 \| 4-7\)/);
      const rank1 = Number(/\[rank 1\] rank 1 \(pid (\d+)\): layers 4-7 of big loaded/.exec(out.stderr)?.[1]);
      expect(rank1).toBeGreaterThan(0);

      // split across the ranks, the same greedy text as one process
      const first = await post(url, { model: "big", ...prompt, max_tokens: 12 }).then(
        (r) => r.json() as Json,
      );
      expect(first.choices[0].text).toBe(JSON.parse(single.stdout).text);

      // a long streamed generation; rank 1 is killed after a few chunks
      // long enough that the server cannot finish it before this client reads five chunks, however busy
      const res = await post(url, { model: "big", ...prompt, max_tokens: 1500, stream: true });
      expect(res.status).toBe(200);
      const decoder = new TextDecoder();
      let body = "";
      let killed = false;
      for await (const part of res.body!) {
        body += decoder.decode(part, { stream: true });
        // one read may carry many events (a busy client reads late): at least five, not exactly
        const chunks = body.split("\n\n").filter((e) => e.startsWith("data: {")).length;
        if (!killed && chunks >= 5) {
          killed = true;
          process.kill(rank1, "SIGKILL");
        }
      }
      const events = body
        .split("\n\n")
        .filter((e) => e.startsWith("data: {"))
        .map((e) => JSON.parse(e.slice(6)));
      const error = events.find((e) => e.error)?.error;
      expect(error, body).toMatchObject({ type: "server_error", code: "model_unavailable" });
      expect(error.message).toMatch(/runs on 2 ranks .* lost a rank .*Restart the launch/);
      expect(events.filter((e) => e.choices).length).toBeLessThan(1500);

      const after = await post(url, { model: "big", ...prompt, max_tokens: 4 });
      expect(after.status).toBe(503);
      expect(((await after.json()) as Json).error.code).toBe("model_unavailable");
      const other = await post(url, { model: "small", ...prompt, max_tokens: 4 });
      expect(other.status).toBe(200);
      const health = (await fetch(`${url}/health`).then((r) => r.json())) as Json;
      expect(health.status).toBe("degraded");
      expect(out.stderr).toMatch(
        /\[launch\] rank 1 \(127\.0\.0\.1\) was killed \(SIGKILL\): the ring is broken/,
      );

      child.kill("SIGINT");
      expect(await exited).toBe(0);
    },
    timeLimit(120_000),
  );

  it(
    "ranks stop when the launcher is killed with SIGKILL (they read the end of its pipe)",
    async (t) => {
      if (!(await mlxOrSkip(t))) return;
      const { child, exited } = await launchServe(
        ["--model", `big=mlx:${FIXTURES}/tiny-moe`, "--split", "big"],
        (stdout, stderr) =>
          /serving the OpenAI API at/.test(stdout) && /\[rank 1\] rank 1 \(pid/.test(stderr),
      );
      const ranks = execFileSync("pgrep", ["-P", String(child.pid)], { encoding: "utf8" })
        .split("\n")
        .filter(Boolean)
        .map(Number);
      expect(ranks).toHaveLength(2);
      child.kill("SIGKILL");
      await exited;
      const alive = (pid: number) => {
        try {
          process.kill(pid, 0);
        } catch {
          return false;
        }
        // a zombie waiting for its reaper has ended (Linux says so in /proc; elsewhere it is reaped)
        const stat = `/proc/${pid}/stat`;
        return !(existsSync(stat) && /^\S+ \(.*\) Z/.test(readFileSync(stat, "utf8")));
      };
      const deadline = Date.now() + timeLimit(60_000);
      while (ranks.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const left = ranks.filter(alive);
      for (const pid of left) process.kill(pid, "SIGKILL");
      expect(left, "ranks still running after their launcher was killed").toEqual([]);
    },
    timeLimit(120_000),
  );

  it("refuses what it cannot start, saying why", async () => {
    const none = await cli("launch", "--hosts", "missing.json", "--", "serve");
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no such hostfile: missing\.json/);
    const notServe = await cli("launch", "--hosts", "127.0.0.1", "--", "run", "x", "hi");
    expect(notServe.code).toBe(2);
    expect(notServe.stderr).toMatch(/launch starts `serve` on every rank .* not `run`/);
    // a wildcard would make the ring listen on every interface; -n is bounded
    const wildcard = await cli("launch", "--hosts", "0.0.0.0", "-n", "2", "--", "serve");
    expect(wildcard.code).toBe(1);
    expect(wildcard.stderr).toMatch(
      /0\.0\.0\.0 means every interface, so the ring would listen on all of them.*--allow-wildcard/,
    );
    const allowed = await cli("launch", "--hosts", "0.0.0.0", "--allow-wildcard", "--", "run", "x");
    expect(allowed.stderr).toMatch(/launch starts `serve` on every rank/); // past the address check
    const many = await cli("launch", "--hosts", "127.0.0.1", "-n", "17", "--", "serve");
    expect(many.code).toBe(2);
    expect(many.stderr).toMatch(/-n must be an integer from 1 to 16, got "17"/);
    const split = await cli("serve", "--model", `big=mlx:${FIXTURES}/tiny-moe`, "--split", "big");
    expect(split.code).toBe(2);
    expect(split.stderr).toMatch(/--split and --split-layers need the ranks `anemll-qwen35 launch/);
  });
});
