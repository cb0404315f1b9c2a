/**
 * The command lines the repository's documents give work as written: in a clone the CLI runs as
 * `pnpm anemll-qwen35` (a bare `anemll-qwen35` exists only once linked or installed, which the root
 * README explains and this test does), conversions go outside the clone, and no document points at
 * files outside the repository.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(__dirname, "../../..");
const read = (f: string) => readFileSync(join(ROOT, f), "utf8");
const notes = readdirSync(join(ROOT, "notes"))
  .filter((f) => f.endsWith(".md"))
  .map((f) => `notes/${f}`);
const packageReadmes = readdirSync(join(ROOT, "packages")).map((p) => `packages/${p}/README.md`);
const docs = ["README.md", "apps/cli/README.md", ...notes, ...packageReadmes];

/** Lines of the ```sh blocks of a Markdown file. */
function shellLines(text: string): string[] {
  return [...text.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) => m[1].split("\n")).map((l) => l.trim());
}

describe("the documents' command lines", () => {
  it("notes/ run the CLI the way a clone can: pnpm anemll-qwen35", () => {
    for (const f of notes) {
      for (const line of shellLines(read(f))) {
        if (/^(sudo )?anemll-qwen35 /.test(line)) throw new Error(`${f}: "${line}" needs pnpm in a clone`);
      }
    }
  });

  it("the README's first CLI examples use pnpm and convert into a folder outside the clone", () => {
    const lines = shellLines(read("README.md")).filter((l) => /anemll-qwen35 /.test(l));
    const first = lines.slice(0, 4);
    for (const l of first) expect(l).toMatch(/^pnpm anemll-qwen35 /);
    for (const l of lines.filter((x) => / convert /.test(x))) {
      const out = /\s-o\s+(\S+)/.exec(l)?.[1] ?? "";
      expect(out, l).toMatch(/^(~|\/|\$)/);
    }
  });

  it("no document points at files outside the repository (../shared, reference notes)", () => {
    for (const f of docs) {
      expect(read(f), f).not.toMatch(/\.\.\/shared|shared\/reference|shared\/DESIGN|reference notes/);
    }
  });

  it("no JavaScript example uses `await using` (Node 20 rejects it)", () => {
    for (const f of docs) {
      for (const m of read(f).matchAll(/```(?:js|ts)\n([\s\S]*?)```/g)) {
        expect(m[1], f).not.toMatch(/^\s*await using /m);
      }
    }
  });

  it("`npm install -g ./apps/cli`, as the README says, puts a working anemll-qwen35 on the PATH", () => {
    const prefix = mkdtempSync(join(tmpdir(), "cli-link-"));
    try {
      execFileSync("npm", ["install", "-g", "--prefix", prefix, "./apps/cli"], { cwd: ROOT, stdio: "pipe" });
      const bin =
        process.platform === "win32"
          ? join(prefix, "anemll-qwen35.cmd")
          : join(prefix, "bin", "anemll-qwen35");
      const version = execFileSync(bin, ["--version"], { cwd: tmpdir(), encoding: "utf8" });
      expect(version.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    } finally {
      rmSync(prefix, { recursive: true, force: true });
    }
  }, 120_000);
});
