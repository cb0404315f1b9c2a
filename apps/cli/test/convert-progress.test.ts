/**
 * `convert` on long work: plain progress lines when stderr is not a terminal, and Ctrl-C — a real
 * process sent SIGINT mid-package — exits quickly with a hint and keeps the finished weights,
 * which the resumed run reuses instead of recomputing.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { writeSyntheticCheckpoint } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, cli } from "./helpers.js";

const REPO = resolve(__dirname, "../../..");
const FIXTURE = join(REPO, "fixtures/tiny-tied");
const work = mkdtempSync(join(tmpdir(), "cli-convert-"));
const ckpt = join(work, "wide");
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(async () => {
  // the tiny model, widened so that its one package takes a few seconds of k-means
  const config = JSON.parse(readFileSync(join(FIXTURE, "config.json"), "utf8"));
  config.text_config = {
    ...config.text_config,
    hidden_size: 512,
    intermediate_size: 2048,
    linear_num_key_heads: 4,
    linear_num_value_heads: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 128,
    num_hidden_layers: 4,
    layer_types: config.text_config.layer_types.slice(0, 4),
  };
  await writeSyntheticCheckpoint({ config, out: ckpt, vision: false, mtp: false });
}, timeLimit(120_000));

function run(args: string[]): Promise<{
  code: number | null;
  stdout: string;
  stderr: string;
  exited: number;
}> & {
  child: ReturnType<typeof spawn>;
} {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d) => (stdout += d));
  child.stderr?.on("data", (d) => (stderr += d));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string; exited: number }>((ok) =>
    child.on("close", (code) => ok({ code, stdout, stderr, exited: performance.now() })),
  );
  return Object.assign(done, { child });
}

describe("convert progress and interruption", () => {
  it("prints plain progress lines when stderr is not a terminal", async () => {
    const r = await cli(
      "convert",
      FIXTURE,
      "-o",
      join(work, "plain"),
      "--ctx",
      "128",
      "--lmhead-rows",
      "512",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^convert: 0% embed · \d+ s$/m);
    expect(r.stderr).toMatch(/^convert: \d+% sb_00-01/m);
    expect(r.stderr).toMatch(/^convert: 100% finish · \d+ s$/m);
  });

  it(
    "stops on Ctrl-C with a hint, keeps finished weights, and --resume reuses them",
    async () => {
      const out = join(work, "out");
      const log = join(work, "convert.log");
      const args = [ckpt, "-o", out, "--ctx", "128", "--lmhead-rows", "1024", "--log", log];
      const first = run(["convert", ...args]);
      // interrupt once the package of super-blocks has finished a few k-means (LUT) weights, the
      // ones an interrupted conversion keeps ("sb_00-01: <name> lut4,g8 [...] ...")
      const sbLines = () =>
        existsSync(log)
          ? readFileSync(log, "utf8")
              .split("\n")
              .filter((l) => /^sb_\S+: \S+ lut/.test(l))
          : [];
      while (sbLines().length < 3) {
        if (first.child.exitCode !== null)
          throw new Error("the conversion finished before it could be interrupted");
        await new Promise((ok) => setTimeout(ok, 20));
      }
      const sent = performance.now();
      first.child.kill("SIGINT");
      const r = await first;
      expect(r.code, r.stderr).toBe(130);
      expect(r.exited - sent).toBeLessThan(timeLimit(5000));
      expect(r.stderr).toMatch(/conversion interrupted; .* finished weight\(s\) .* --resume to continue/);
      expect(r.stderr).not.toMatch(/^\s+at /m); // no stack trace
      expect(existsSync(out)).toBe(false);
      const finished = sbLines().length;

      const again = await run(["--json", "convert", ...args, "--resume"]);
      expect(again.code, again.stderr).toBe(0);
      const doc = JSON.parse(again.stdout);
      expect(doc.skipped).toEqual(["embed"]);
      // every weight finished before Ctrl-C is reused, none is computed twice
      expect(doc.reusedWeights).toHaveLength(finished);
      expect(
        readFileSync(log, "utf8")
          .split("\n")
          .filter((l) => l.endsWith("(reused)")),
      ).toHaveLength(finished);
    },
    timeLimit(120_000),
  );
});
