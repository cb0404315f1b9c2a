/**
 * Claims the documents make about the code, checked against the code: bench prefill's prompt
 * lengths, every list of contextOverflow choices, the install path that works before a release,
 * the release checklist's commands and files, verify's drift thresholds, and runtime-ane's memory
 * figure with the prompt's prefill.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { scaleParams } from "@anemll-qwen35/bench";
import { DEFAULT_MAX_DRIFT } from "@anemll-qwen35/models";
import { describe, expect, it } from "vitest";

const ROOT = resolve(__dirname, "../../..");
const read = (f: string) => readFileSync(join(ROOT, f), "utf8");
const docs = [
  "README.md",
  "RELEASING.md",
  "apps/cli/README.md",
  ...readdirSync(join(ROOT, "notes"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `notes/${f}`),
  ...readdirSync(join(ROOT, "packages")).map((p) => `packages/${p}/README.md`),
];
const n = (x: number) => x.toLocaleString("en-US");

describe("what the documents say the code does", () => {
  it("bench's README gives the prefill scenario's prompt lengths, batched vs token by token", () => {
    const full = scaleParams("full").prefillPrompts;
    const smoke = scaleParams("smoke").prefillPrompts;
    expect(full).toEqual([64, 256, 1024]);
    const row = read("packages/bench/README.md")
      .split("\n")
      .find((l) => l.startsWith("| `prefill` |"));
    expect(row).toContain(
      `${full.map(n).join("/")}-token prompts (${smoke.map(n).join(", ")} at smoke scale)`,
    );
    expect(row).toMatch(/`batched`.*`token-by-token`/);
    expect(row).not.toMatch(/one decode step per token/);
  });

  it("every list of contextOverflow choices includes ring", () => {
    let lists = 0;
    for (const f of docs) {
      for (const m of read(f).matchAll(/`?error`?\s*\|\s*`?slide`?/g)) {
        lists++;
        const after = read(f).slice(m.index + m[0].length, m.index + m[0].length + 12);
        expect(after, `${f}: "${m[0]}" without ring`).toMatch(/^\s*\|\s*`?ring/);
      }
    }
    expect(lists).toBeGreaterThanOrEqual(3);
  });

  it("no document says `npm install -g anemll-qwen35` works before a release; the tarball path is the checked one", () => {
    for (const f of ["README.md", "apps/cli/README.md"]) {
      const text = read(f).replace(/\s+/g, " ");
      for (const m of text.matchAll(/npm install -g anemll-qwen35/g)) {
        const around = text.slice(Math.max(0, m.index - 200), m.index + 200);
        expect(around, f).toMatch(/once (a release is )?published|until .*published/);
      }
      expect(text, f).toMatch(/pnpm tarballs ~\/anemll-tarballs/);
      expect(text, f).toMatch(/npm install -g ~\/anemll-tarballs\/\*\.tgz/);
    }
    const scripts = JSON.parse(read("package.json")).scripts;
    expect(scripts.tarballs).toBe("node scripts/pack.mjs");
    // pack-install (the end-to-end install test) makes its tarballs with the same function
    expect(read("scripts/pack-install.mjs")).toMatch(
      /import \{ packAll, publicPackages \} from "\.\/pack\.mjs"/,
    );
  });

  it("RELEASING.md names commands and files that exist, and the changesets config", () => {
    const text = read("RELEASING.md");
    const scripts = JSON.parse(read("package.json")).scripts;
    for (const m of text.matchAll(/`pnpm ([\w-]+)/g)) {
      if (["run", "publish", "changeset"].includes(m[1]) || m[1] in scripts) continue;
      throw new Error(`RELEASING.md: pnpm ${m[1]} is not a root script`);
    }
    expect(scripts.changeset).toBe("changeset");
    expect(scripts["version-packages"]).toBe("changeset version");
    for (const m of text.matchAll(/`((?:scripts|\.changeset|\.github)\/[\w./-]+)`/g)) {
      expect(existsSync(join(ROOT, m[1])), m[1]).toBe(true);
    }
    const config = JSON.parse(read(".changeset/config.json"));
    expect(config).toMatchObject({
      access: "public",
      baseBranch: "main",
      updateInternalDependencies: "patch",
    });
  });

  it("runtime-ane's memory figures are bench/prefill-memory.ts's, prefill included", () => {
    const result = JSON.parse(read("packages/runtime-ane/bench/results/prefill-memory.json"));
    const text = read("packages/runtime-ane/README.md").replace(/\s+/g, " ");
    const gb = (row: { peakRssBytes: number }) => `**${(row.peakRssBytes / 1024 ** 3).toFixed(2)} GB**`;
    const row = (tokens: number, mode: string) =>
      result.rows.find(
        (r: { promptTokens: number; mode: string }) => r.promptTokens === tokens && r.mode === mode,
      );
    expect(text).toContain(`${gb(row(4, "token-by-token"))} decoding after a 4-token prompt`);
    expect(text).toContain(`${gb(row(198, "token-by-token"))} after a 198-token prompt token by token`);
    expect(text).toContain(`${gb(row(198, "batched"))} after the same prompt through the prefill function`);
  });

  it("verify --against mlx's drift thresholds in the CLI README are the code's", () => {
    const text = read("apps/cli/README.md").replace(/\s+/g, " ");
    expect(text).toContain(`default ${DEFAULT_MAX_DRIFT.fp32.toExponential()}`);
    expect(text).toContain(`${DEFAULT_MAX_DRIFT.fp16.toExponential()} when any of it is fp16`);
  });
});
