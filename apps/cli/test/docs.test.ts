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
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { buildProgram } from "../src/program.js";

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

/**
 * Command lines of every code block (sh or plain, continuations joined) that start
 * `anemll-qwen35 <command>`, without a trailing `# comment` or a synopsis' description (after 3 spaces).
 */
function cliLines(text: string): string[] {
  return [...text.matchAll(/```(?:sh|bash)?\n([\s\S]*?)```/g)]
    .flatMap((m) => m[1].replace(/\\\n\s*/g, " ").split("\n"))
    .map(
      (l) =>
        l
          .trim()
          .replace(/^pnpm /, "")
          .replace(/\s+#.*$/, "")
          .split(/\s{3,}/)[0],
    )
    .filter((l) => /^anemll-qwen35 [a-z]/.test(l));
}

// in-process: this reads the command tree (each command's options) to check the documents
// against it; it runs no command (the other tests run the built bin)
const program = buildProgram({ stdout: { write: () => {} }, stderr: { write: () => {} } });

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

  it("every conversion, synthetic checkpoint and bench output they name goes outside the clone (no stray folder in the repository)", () => {
    for (const f of docs) {
      for (const l of cliLines(read(f)).filter((x) => /^anemll-qwen35 (convert|synth|bench) /.test(x))) {
        const out = /\s(?:-o|--out)\s+(\S+)/.exec(l)?.[1];
        if (out === undefined || /^<|^dir$/.test(out)) continue; // a placeholder in a synopsis
        expect(out, `${f}: ${l}`).toMatch(/^(~|\/|\$)/);
      }
    }
  });

  it("every option they give an anemll-qwen35 command is one the command takes", () => {
    let checked = 0;
    for (const f of docs) {
      // `launch … -- serve …`: what follows -- is the command each rank runs, with its own options
      const lines = cliLines(read(f)).flatMap((l) => {
        const [head, rest] = l.split(/\s--\s/);
        return rest === undefined ? [l] : [head, `anemll-qwen35 ${rest}`];
      });
      for (const l of lines) {
        const [name, sub] = l.split(/\s+/).slice(1);
        const top = program.commands.find((c) => c.name() === name);
        expect(top, `${f}: "${l}" names no command`).toBeDefined();
        const cmd = top!.commands.find((c) => c.name() === sub) ?? top!;
        const known = new Set(["--help", "-h", "--json"]);
        for (const o of cmd.options) for (const flag of [o.long, o.short]) if (flag) known.add(flag);
        // a flag in a line's options: after a space or an opening bracket, not inside a path
        for (const flag of l.match(/(?<=[\s[])--?[a-zA-Z][\w-]*/g) ?? []) {
          expect(known.has(flag), `${f}: ${cmd.name()} takes no ${flag} ("${l}")`).toBe(true);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(20);
  });

  it("the CLI README lists every command and subcommand, and the mlx backend", () => {
    const readme = read("apps/cli/README.md");
    for (const c of program.commands) {
      expect(readme, c.name()).toMatch(new RegExp(`anemll-qwen35 ${c.name()}\\b`));
      for (const sub of c.commands) {
        expect(readme, `${c.name()} ${sub.name()}`).toMatch(
          new RegExp(`anemll-qwen35 ${c.name()} ${sub.name()}\\b`),
        );
      }
    }
    expect(readme).toMatch(/--backend auto\|coreml\|reference\|mlx/);
  });

  it("bench's and costplan's src/index.ts are explicit lists, and their README's API section names every entry", () => {
    for (const pkg of ["bench", "costplan"]) {
      const index = read(`packages/${pkg}/src/index.ts`);
      expect(index, pkg).not.toMatch(/export \*/);
      const names = [...index.matchAll(/export (?:type )?\{([^}]*)\}/g)].flatMap((m) =>
        m[1]
          .split(",")
          .map((n) => n.replace(/^\s*type\s+/, "").trim())
          .filter(Boolean),
      );
      expect(names.length, pkg).toBeGreaterThan(40);
      const api = read(`packages/${pkg}/README.md`).split("## API")[1]?.split("\n## ")[0] ?? "";
      expect(
        names.filter((n) => !new RegExp(`\`${n}[\`(]`).test(api)),
        `${pkg}: public names its README's API section does not name`,
      ).toEqual([]);
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

  it(
    "`npm install -g ./apps/cli`, as the README says, puts a working anemll-qwen35 on the PATH",
    () => {
      const prefix = mkdtempSync(join(tmpdir(), "cli-link-"));
      try {
        execFileSync("npm", ["install", "-g", "--prefix", prefix, "./apps/cli"], {
          cwd: ROOT,
          stdio: "pipe",
        });
        const bin =
          process.platform === "win32"
            ? join(prefix, "anemll-qwen35.cmd")
            : join(prefix, "bin", "anemll-qwen35");
        const version = execFileSync(bin, ["--version"], { cwd: tmpdir(), encoding: "utf8" });
        expect(version.trim()).toMatch(/^\d+\.\d+\.\d+$/);
      } finally {
        rmSync(prefix, { recursive: true, force: true });
      }
    },
    timeLimit(120_000),
  );
});
