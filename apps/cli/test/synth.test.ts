/**
 * `synth`: a small checkpoint written through the built CLI (the tiny fixture's config) reads back
 * with Qwen35Checkpoint, with the shapes Hugging Face wrote for that config; what it says before
 * writing; progress lines; and the folder rules (new, empty or the identical checkpoint, else
 * --force).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Qwen35Checkpoint, SafetensorsCheckpoint } from "@anemll-qwen35/ir/checkpoint";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

const REPO = resolve(__dirname, "../../..");
const CLI = join(REPO, "apps/cli/dist/cli.js");
const FIXTURE = join(REPO, "fixtures/tiny-tied");
const work = scratchDir("cli-synth-");

const tiny = ["--config", join(FIXTURE, "config.json"), "--tokenizer", FIXTURE];

describe("anemll-qwen35 synth", () => {
  it("writes a small checkpoint that reads back with the shapes HF wrote for its config", async () => {
    const out = join(work, "tiny");
    const r = spawnSync(process.execPath, [CLI, "synth", ...tiny, "-o", out, "--max-shard", "300kb"], {
      encoding: "utf8",
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/random weights with the real shapes/);
    expect(r.stdout).toMatch(/8 layers \(6 Gated DeltaNet, 2 full attention\) · hidden 128/);
    expect(r.stdout).toMatch(/wrote .*tiny: \d+ shard\(s\)/);
    expect(r.stderr).toMatch(/^synth: \d+% tensors/m); // plain progress lines off a terminal

    await using ck = await Qwen35Checkpoint.open(out);
    expect(ck.report.ok).toBe(true);
    expect(ck.config.hiddenSize).toBe(128);
    await using ours = await SafetensorsCheckpoint.open(out);
    await using hf = await SafetensorsCheckpoint.open(FIXTURE);
    expect(ours.shardFiles.length).toBeGreaterThan(1);
    const text = hf.names().filter((n) => !n.startsWith("mtp.") && !n.startsWith("model.visual."));
    for (const name of text) expect(ours.info(name).shape, name).toEqual(hf.info(name).shape);
    expect(readFileSync(join(out, "tokenizer.json"), "utf8")).toBe(
      readFileSync(join(FIXTURE, "tokenizer.json"), "utf8"),
    );

    // the same checkpoint again: nothing written; another one: refused without --force
    const again = await cli("synth", ...tiny, "-o", out, "--max-shard", "300kb");
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/already holds this checkpoint: nothing written/);
    const other = await cli("synth", ...tiny, "-o", out, "--seed", "2");
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/holds another synthetic checkpoint.*--force/);
    const forced = await cli("synth", ...tiny, "-o", out, "--seed", "2", "--force");
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toMatch(/wrote /);
  });

  it("refuses a folder holding other files unless --force, and leaves them be", async () => {
    const out = join(work, "mine");
    mkdirSync(out);
    writeFileSync(join(out, "notes.txt"), "keep me");
    const r = await cli("synth", ...tiny, "-o", out);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/is not empty.*--force/);
    expect(readFileSync(join(out, "notes.txt"), "utf8")).toBe("keep me");
  });

  it("--dry-run says what a full size holds and writes nothing", async () => {
    const out = join(work, "27b");
    const r = await cli("--json", "synth", "--size", "27b", "-o", out, "--dry-run");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc).toMatchObject({ name: "Qwen3.5-27B", layers: 64, written: false });
    expect(doc.parameters.text).toBeGreaterThan(26e9);
    expect(doc.parameters.text).toBeLessThan(28e9);
    expect(doc.bytes).toBeGreaterThan(2 * doc.parameters.total - 1);
    expect(existsSync(out)).toBe(false);
    const text = await cli(
      "synth",
      "--size",
      "35b-a3b",
      "--layers",
      "8",
      "--experts",
      "32",
      "-o",
      out,
      "--dry-run",
    );
    expect(text.stdout).toMatch(
      /8 layers \(6 Gated DeltaNet, 2 full attention\) · hidden 2048 · MoE 32 experts/,
    );
  });

  it("needs exactly one of --size and --config", async () => {
    expect((await cli("synth", "-o", join(work, "x"))).code).toBe(2);
    expect((await cli("synth", "--size", "3b", "-o", join(work, "x"))).code).toBe(2);
    const both = await cli("synth", "--size", "0.8b", ...tiny, "-o", join(work, "x"));
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/one of --size or --config/);
  });
});
