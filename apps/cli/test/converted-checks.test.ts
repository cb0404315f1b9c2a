/**
 * The commands that only read a converted model (inspect, costplan, profile) refuse what `run`
 * refuses: a package whose bytes changed (sha256), a missing package, a model.json whose ctx or
 * vocabulary was edited. Each exits non-zero with run's error; a lone .mlpackage says what was not
 * checked.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

const FIXTURE = resolve(import.meta.dirname, "../../../fixtures/tiny-tied");
const work = mkdtempSync(join(tmpdir(), "cli-converted-checks-"));
const savedCache = process.env.ANEMLL_QWEN35_CACHE;
let good: string;

beforeAll(async () => {
  process.env.ANEMLL_QWEN35_CACHE = join(work, "cache"); // this test's own digest cache
  good = join(work, "good");
  const r = await cli("convert", FIXTURE, "-o", good, "--ctx", "128", "--fuse", "1", "--quant", "none");
  expect(r.code, r.stderr).toBe(0);
}, 120_000);
afterAll(() => {
  if (savedCache === undefined) delete process.env.ANEMLL_QWEN35_CACHE;
  else process.env.ANEMLL_QWEN35_CACHE = savedCache;
  rmSync(work, { recursive: true, force: true });
});

let n = 0;
/** A copy of the good conversion with `edit` applied. */
function broken(edit: (dir: string) => void): string {
  const dir = join(work, `broken-${n++}`);
  cpSync(good, dir, { recursive: true });
  edit(dir);
  return dir;
}
const editManifest =
  (change: (m: Record<string, unknown> & { model: Record<string, unknown> }) => void) => (dir: string) => {
    const file = join(dir, "model.json");
    const m = JSON.parse(readFileSync(file, "utf8"));
    change(m);
    writeFileSync(file, JSON.stringify(m));
  };

const CASES: [string, (dir: string) => void, RegExp][] = [
  [
    "a weight byte changed",
    (dir) => {
      const weights = join(dir, "sb_00.mlpackage", "Data", "com.apple.CoreML", "weights");
      const blob = join(weights, readdirSync(weights)[0]);
      const bytes = readFileSync(blob);
      bytes[bytes.length - 9] ^= 0x40;
      writeFileSync(blob, bytes);
    },
    /sb_00 \(sb_00\.mlpackage\): the package is corrupt or was changed after conversion: its sha256 is/,
  ],
  [
    "a package missing",
    (dir) => rmSync(join(dir, "lm_head.mlpackage"), { recursive: true }),
    /lm_head \(lm_head\.mlpackage\): the package is missing or unreadable/,
  ],
  [
    "ctx edited",
    editManifest((m) => (m.ctx = 4096)),
    /ctx 4096 disagrees with component embed, built for 128 tokens/,
  ],
  [
    "vocabulary edited",
    editManifest((m) => (m.model.vocabSize = 2048)),
    /model\.vocabSize 2048 disagrees with the lm_head's 1024 rows/,
  ],
];

describe("inspect, costplan and profile check a converted model as run does", () => {
  it("the good conversion passes every command", async () => {
    for (const args of [
      ["inspect", good],
      ["costplan", good],
      ["profile", good, "--runs", "1", "--warmup", "0"],
    ]) {
      const r = await cli(...args);
      expect(r.code, `${args[0]}: ${r.stderr}`).toBe(0);
    }
  }, 120_000);

  it.each(CASES)(
    "%s: refused by run, and by inspect, costplan and profile with run's error",
    async (_what, edit, error) => {
      const dir = broken(edit);
      const run = await cli("run", dir, "--backend", "reference", "--max-tokens", "1", "hi");
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toMatch(error);
      for (const args of [
        ["inspect", dir],
        ["costplan", dir],
        ["profile", dir, "--runs", "1", "--warmup", "0"],
      ]) {
        const r = await cli(...args);
        expect(r.code, `${args[0]} exited ${r.code}: ${r.stdout}${r.stderr}`).toBe(1);
        expect(r.stderr, args[0]).toMatch(error);
      }
    },
    120_000,
  );

  it("a lone .mlpackage is read, saying that nothing recorded its sha256", async () => {
    const r = await cli("costplan", join(good, "embed.mlpackage"));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(
      /embed\.mlpackage: a package alone records no sha256, so it is read as it is, not checked for damage/,
    );
  }, 60_000);
});
