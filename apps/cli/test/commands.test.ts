import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadGolden } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { cli, mlxOrSkip } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
const work = mkdtempSync(join(tmpdir(), "cli-"));
const exact = join(work, "exact");

describe("convert → run → verify → inspect", () => {
  beforeAll(async () => {
    const r = await cli(
      "convert",
      FIXTURE,
      "-o",
      exact,
      "--ctx",
      "128",
      "--fuse",
      "1",
      "--dtype",
      "fp32",
      "--lut",
      "none",
      "--lmhead-lut",
      "none",
      "--lmhead-rows",
      "512",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/sb_01\.mlpackage/);
  }, timeLimit(120_000));

  it("run with greedy sampling reproduces the Hugging Face golden tokens", async () => {
    const g = await loadGolden(FIXTURE);
    const r = await cli(
      "--json",
      "run",
      exact,
      "Hi!",
      "--backend",
      "reference",
      "--max-tokens",
      String(g.generatedIds.length),
    );
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.tokenIds).toEqual(g.generatedIds);
    expect(doc.stats.decodeTokensPerSecond).toBeGreaterThan(0);
  });

  it("run --json-schema FILE holds the answer to the schema (random-weight model)", async () => {
    const file = join(work, "answer.schema.json");
    const schema = {
      type: "object",
      properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 } },
      required: ["ok", "n"],
      additionalProperties: false,
    };
    writeFileSync(file, JSON.stringify(schema));
    const held = ["--backend", "reference", "--json-schema", file, "--max-tokens", "24"];
    const r = await cli("--json", "run", exact, "Hi!", ...held);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.finishReason).toBe("stop");
    const value = JSON.parse(doc.text);
    expect(Object.keys(value)).toEqual(["ok", "n"]);
    expect(typeof value.ok).toBe("boolean");
    expect(Number.isInteger(value.n) && value.n >= 0 && value.n <= 9).toBe(true);

    writeFileSync(file, JSON.stringify({ type: "array", uniqueItems: true }));
    const bad = await cli("run", exact, "Hi!", "--backend", "reference", "--json-schema", file);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/jsonSchema\.uniqueItems: "uniqueItems" is not supported/);
    const missing = await cli("run", exact, "Hi!", "--json-schema", join(work, "nope.json"));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--json-schema .*nope\.json/);
  });

  it("run streams text and prints a stats line", async () => {
    const r = await cli("run", exact, "Hi!", "--backend", "reference", "--max-tokens", "5");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(0);
    expect(r.stderr).toMatch(/decode [\d.]+ tok\/s · 5 tokens · length · RSS \d+ MB \(peak \d+ MB\)/);
  });

  it("verify prints identical greedy agreement against the goldens", async () => {
    const r = await cli("--json", "verify", exact);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.tokensIdentical).toBe(true);
    expect(doc.maxAbsLogitDiff).toBeLessThan(1e-3);
    expect(doc.decodeTokensPerSecond).toBeGreaterThan(0);
    expect(doc.peakRssBytes).toBeGreaterThanOrEqual(doc.rssBytes);
    // the converter's default chain has a prefill function, and verify runs the prompt through it
    expect(doc.prefill).toEqual({ function: true, tokens: 64 });
    const text = await cli("verify", exact);
    expect(text.stdout).toMatch(/decode [\d.]+ tok\/s · RSS \d+ MB \(peak \d+ MB\)/);
    expect(text.stdout).toMatch(
      /prompt prefilled by the prefill function, 64 tokens a call \(a 16-token prompt: 1 call\(s\) per package\)/,
    );
    const tokenByToken = JSON.parse((await cli("--json", "verify", exact, "--token-by-token")).stdout);
    expect(tokenByToken.prefill).toEqual({ function: false, tokens: 1 });
    expect(tokenByToken.tokensIdentical).toBe(true);
  });

  it("verify prints its threshold and exits 1 below it, or on another model's goldens", async () => {
    const ok = await cli("verify", exact);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/pass: needs agreement ≥ 0\.9 and cosine ≥ 0\.99/);
    const strict = await cli("verify", exact, "--min-cosine", "1.5");
    expect(strict.code).toBe(1);
    expect(strict.stdout).toMatch(/FAIL: needs agreement ≥ 0\.9 and cosine ≥ 1\.5/);
    expect(strict.stderr).toMatch(/error: agreement 1\.000, min cosine 1\.0000 is below the threshold/);
    const other = await cli("verify", exact, "--golden", resolve(FIXTURE, "../tiny-gqa"));
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/goldens in .*tiny-gqa belong to another model/);
  });

  it("inspect summarises model.json and prints a component's MIL", async () => {
    const s = await cli("inspect", exact);
    expect(s.stdout).toMatch(/2 super-blocks/);
    expect(s.stdout).toMatch(/lm_head\.mlpackage/);
    const mil = await cli("inspect", exact, "--component", "sb_00");
    expect(mil.code).toBe(0);
    expect(mil.stdout).toMatch(/conv\(/);
    expect(mil.stdout).toMatch(/layer_norm\(/);
  });

  it("fails clearly with a non-zero exit on bad input", async () => {
    const empty = mkdtempSync(join(work, "empty-"));
    let r = await cli("run", empty, "Hi!", "--backend", "reference");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/neither a converted chain \(model\.json/);

    writeFileSync(join(empty, "model.json"), "{");
    r = await cli("inspect", empty);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/not valid JSON/);

    r = await cli("run", exact, "Hi!", "--backend", "gpu");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--backend must be one of auto, coreml, reference, mlx/);

    r = await cli("run", exact, "word ".repeat(200), "--backend", "reference", "--raw");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/context holds 128/);

    const broken = join(work, "broken");
    await cli(
      "convert",
      FIXTURE,
      "-o",
      broken,
      "--ctx",
      "128",
      "--fuse",
      "all",
      "--lut",
      "none",
      "--lmhead-lut",
      "none",
    );
    rmSync(join(broken, "embed.mlpackage", "Manifest.json"));
    r = await cli("run", broken, "Hi!", "--backend", "reference");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/embed \(embed\.mlpackage\): cannot be read .*Manifest\.json is missing/);

    r = await cli("convert", FIXTURE, "-o", join(work, "x"), "--ctx", "100");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--ctx must be an integer from 128 to 16384/);
    r = await cli("convert", FIXTURE, "-o", join(work, "x"), "--quant", "default,gdn.in_proj_qvk=lut6");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--quant "gdn\.in_proj_qvk" matches no tensor/);
    r = await cli("convert", FIXTURE, "-o", join(work, "x"), "--attention", "flash");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--attention/);
  });
});

describe("convert --help", () => {
  it("names the attention forms and spells out the default quantization policy", async () => {
    const help = await cli("convert", "--help");
    expect(help.code).toBe(0);
    const text = help.stdout.replace(/\s+/g, " ");
    expect(text).toMatch(/--attention <form> .*matmul.*sdpa.*\(default: "matmul"\)/);
    expect(text).toMatch(/--quant <policy> .*\(default: "default"\)/);
    expect(text).toContain("body=lut6,gdn.in_proj_a=none,gdn.in_proj_b=none,lm_head=lut6,embed=none");
  });
});

describe("demo", () => {
  const TRAINED = resolve(__dirname, "../../../fixtures/tiny-trained");
  /** Every word of the bundled model's training text (the KJV without Ruth), lower case. */
  const corpus = new Set(readFileSync(join(TRAINED, "words.txt"), "utf8").split("\n").filter(Boolean));
  const words = (text: string) => text.toLowerCase().match(/[a-z]+/g) ?? [];
  /**
   * Reads as the corpus's language: at least 15 words, 90 % of them corpus words, and at least 10
   * different corpus words (a loop of one real word, e.g. "add add add", is not language).
   */
  const readsLikeCorpus = (text: string) => {
    const ws = words(text);
    const known = ws.filter((w) => corpus.has(w));
    return ws.length >= 15 && known.length >= 0.9 * ws.length && new Set(known).size >= 10;
  };

  it(
    "converts the bundled trained model, continues the prompt in the corpus's words and reports tok/s",
    async () => {
      const r = await cli("--json", "demo", "--max-tokens", "32");
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.stats.generatedTokens).toBe(32);
      expect(doc.stats.decodeTokensPerSecond).toBeGreaterThan(0);
      expect(readsLikeCorpus(doc.text), doc.text).toBe(true);
    },
    timeLimit(120_000),
  );

  it(
    "the corpus check fails on the noise of the random-weight fixture",
    async () => {
      const r = await cli("--json", "demo", "--model", FIXTURE, "--max-tokens", "32");
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(readsLikeCorpus(doc.text), doc.text).toBe(false);
    },
    timeLimit(120_000),
  );
});

describe("run --backend mlx", () => {
  it(
    "runs a Hugging Face checkpoint on MLX through the same generate loop",
    async (ctx) => {
      if (!(await mlxOrSkip(ctx))) return;
      const r = await cli("--json", "run", FIXTURE, "Hi!", "--max-tokens", "4");
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.backend).toMatch(/^mlx/);
      expect(doc.stats.generatedTokens).toBe(4);
    },
    timeLimit(120_000),
  );

  it(
    "--speculative mtp [--gamma N]: the same greedy text, the acceptance in the stats; refused without a head",
    async (ctx) => {
      if (!(await mlxOrSkip(ctx))) return;
      const trained = resolve(FIXTURE, "../tiny-trained");
      const args = [
        "run",
        trained,
        "And",
        "Ruth",
        "said",
        "--raw",
        "--dtype",
        "float32",
        "--max-tokens",
        "16",
      ];
      const plain = await cli("--json", ...args);
      const spec = await cli("--json", ...args, "--speculative", "mtp", "--gamma", "3");
      expect(spec.code, spec.stderr).toBe(0);
      const [p, s] = [JSON.parse(plain.stdout), JSON.parse(spec.stdout)];
      expect(s.tokenIds).toEqual(p.tokenIds);
      expect(s.stats.speculative.calls).toBeGreaterThan(0);
      expect(p.stats.speculative).toBeUndefined();
      const line = await cli(...args, "--speculative", "mtp");
      expect(line.stderr).toMatch(/mtp \d+ % accepted, \d+\.\d\d tok\/call/);
      const refused = await cli("run", FIXTURE, "Hi!", "--speculative", "mtp");
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/multi-token-prediction head/);
      const bad = await cli("run", trained, "Hi!", "--speculative", "eagle");
      expect(bad.code).toBe(2);
    },
    timeLimit(180_000),
  );
});
