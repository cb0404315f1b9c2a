/**
 * What a new user trips on: output into pipes (EPIPE, escape codes), waiting without a word, help
 * that shows defaults as typed, bench summaries, model folders the CLI must tell apart, and a
 * checkpoint without a tokenizer.
 */
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { CLI, cli, mlxOrSkip } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
const work = scratchDir("cli-edges-");
const chain = join(work, "chain");
const none = { kind: "none" } as const;

beforeAll(async () => {
  await convert({ model: FIXTURE, out: chain, ctx: 256, fuse: 1, body: none, lmHead: none });
}, timeLimit(120_000));

describe("output into pipes", () => {
  it.each<[string, () => string[]]>([
    ["inspect", () => [chain, "--component", "sb_00"]],
    ["costplan", () => [chain, "--top", "200"]],
    [
      "convert",
      () => [FIXTURE, "-o", join(work, "piped"), "--ctx", "128", "--lut", "none", "--lmhead-lut", "none"],
    ],
  ])(
    "a reader that leaves early (%s | head) ends the command quietly with exit 0",
    async (command, args) => {
      // the built bin, its stdout a pipe whose reader is gone before the command writes (as after
      // `head` has printed its lines and quit)
      const child = spawn(process.execPath, [CLI, command, ...args()], { stdio: ["ignore", "pipe", "pipe"] });
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      child.stdout.destroy();
      const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
      expect(stderr).not.toMatch(/EPIPE|Unhandled/);
      expect(code).toBe(0);
    },
    timeLimit(60_000),
  );

  it("thinking text has no terminal escape codes when stdout is not a terminal", async () => {
    const r = await cli("run", chain, "Hi", "--think", "--max-tokens", "6", "--backend", "reference");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(0);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for the escape character
    expect(r.stdout).not.toMatch(/\x1b\[/);
  });

  it("says it is prefilling a long prompt before the first token", async () => {
    const r = await cli(
      "run",
      chain,
      "word ".repeat(80),
      "--raw",
      "--max-tokens",
      "1",
      "--backend",
      "reference",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/prefilling \d+ prompt tokens…/);
  });
});

describe("help and summaries", () => {
  it("convert --help shows the defaults as they are typed", async () => {
    const r = await cli("convert", "--help");
    // the encodings' default is the --quant policy; --lut / --lmhead-lut are shorthands with none of their own
    expect(r.stdout).toMatch(/--quant <policy>[\s\S]*?\(default: "default"\)/);
    expect(r.stdout.replace(/\s+/g, " ")).toContain("body=lut6,gdn.in_proj_a=none");
    expect(r.stdout).not.toMatch(/--lut <bits>[^\n]*\(default/);
    expect(r.stdout).toMatch(/--budget <size>[\s\S]*?\(default: 1\.5GB\)/);
    expect(r.stdout).not.toMatch(/"kind"|1500000000/);
    expect(r.stdout).toMatch(/--force/);
  });

  it("inspect --help names only components every conversion has (super-block names follow --fuse)", async () => {
    const help = (await cli("inspect", "--help")).stdout;
    expect(help).not.toMatch(/sb_\d/);
    const named = help.match(/\b(embed|lm_head)\b/g) ?? [];
    expect(new Set(named)).toEqual(new Set(["embed", "lm_head"]));
    for (const component of named) {
      const r = await cli("inspect", chain, "--component", component);
      expect(r.code, r.stderr).toBe(0);
    }
  });

  it(
    "bench prints its summary once",
    async () => {
      const out = join(work, "bench");
      const r = await cli("bench", "decode", "--scale", "smoke", "--no-mlx", "--no-charts", "-o", out);
      expect(r.code, r.stderr).toBe(0);
      const all = `${r.stdout}\n${r.stderr}`;
      expect(all.match(/^decode \(smoke\): (ok|partial|skipped)$/gm)).toHaveLength(1);
      expect(r.stdout).toMatch(/wrote .*decode-smoke-\d{4}-\d{2}-\d{2}-\d{6}\.json/);
    },
    timeLimit(120_000),
  );
});

describe("which model a folder is", () => {
  it("run --backend mlx on a converted chain says it is one", async () => {
    const r = await cli("run", chain, "Hi", "--backend", "mlx");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/this is a converted chain \(model\.json\)/);
  });

  it("a folder without model.json is an error, not a silent MLX run (empty, or a chain that lost it)", async () => {
    // an empty folder, and a chain whose model.json is gone (its packages are still there)
    const empty = mkdtempSync(join(work, "empty-"));
    const headless = join(work, "headless");
    cpSync(chain, headless, { recursive: true });
    rmSync(join(headless, "model.json"));
    for (const backend of ["auto", "reference", "mlx"]) {
      const r = await cli("run", empty, "Hi", "--backend", backend);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/neither a converted chain \(model\.json, .*\) nor a Qwen3\.5 checkpoint/);
      // the chain kept the checkpoint's config.json: it must not pass for a checkpoint
      const h = await cli("run", headless, "Hi", "--backend", backend);
      expect(h.code).toBe(1);
      expect(h.stderr).toMatch(
        /holds Core ML packages \(embed\.mlpackage, .*\) but no model\.json.*convert again/,
      );
    }
  });

  it(
    "run and chat load an MLX checkpoint at 4 or 8 bits (--bits), and say so",
    async (ctx) => {
      for (const command of ["run", "chat"]) {
        expect((await cli(command, "--help")).stdout).toMatch(/--bits <n>\s+mlx backend: quantize/);
      }
      // a converted chain has its weights and context from convert: the MLX options are said to be unused
      const onChain = await cli(
        "run",
        chain,
        "Hi",
        "--max-tokens",
        "1",
        "--backend",
        "reference",
        "--bits",
        "4",
      );
      expect(onChain.code, onChain.stderr).toBe(0);
      expect(onChain.stderr).toMatch(/--bits: mlx backend only, not used for a converted chain/);
      if (!(await mlxOrSkip(ctx))) return;
      for (const bits of ["4", "8"]) {
        const r = await cli("--json", "run", FIXTURE, "Hi", "--max-tokens", "2", "--bits", bits);
        expect(r.code, r.stderr).toBe(0);
        expect(JSON.parse(r.stdout).backend).toBe(`mlx (bfloat16, ${bits}-bit)`);
      }
      const bad = await cli("run", FIXTURE, "Hi", "--bits", "3");
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--bits must be one of 4, 8/);
    },
    timeLimit(120_000),
  );

  it(
    "a checkpoint without a tokenizer runs with --tokenizer (relative to here); a missing folder is an error",
    async (ctx) => {
      if (!(await mlxOrSkip(ctx))) return;
      // a synthetic-style checkpoint: weights and config only
      const bare = join(work, "bare");
      cpSync(FIXTURE, bare, {
        recursive: true,
        filter: (src) => !/tokenizer|chat_template|golden/.test(src),
      });
      const without = await cli("run", bare, "Hi", "--max-tokens", "2");
      expect(without.code).toBe(1);
      expect(without.stderr).toMatch(/no tokenizer in .*bare.*--tokenizer/);
      const rel = relative(process.cwd(), FIXTURE);
      const withTok = await cli("--json", "run", bare, "Hi", "--max-tokens", "2", "--tokenizer", rel);
      expect(withTok.code, withTok.stderr).toBe(0);
      expect(JSON.parse(withTok.stdout).stats.generatedTokens).toBe(2);
      const missing = await cli("run", bare, "Hi", "--tokenizer", join(work, "nope"));
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(/no tokenizer in .*nope/);
    },
    timeLimit(120_000),
  );
});
