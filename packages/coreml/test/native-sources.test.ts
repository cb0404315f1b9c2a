/**
 * Every Objective-C++ file of the repository is compiled twice over: by CMake on a Mac and, on
 * Linux, by the macOS SDK compile check (../shared/macos-sdk-check/check.sh, run by .ci/run), which
 * takes packages/*\/native/*.mm. A .mm file elsewhere, or one the package's CMakeLists.txt does
 * not build, would escape one of them: this test says which.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(__dirname, "../../..");
const CHECK = resolve(ROOT, "..", "shared", "macos-sdk-check", "check.sh");
const SKIP = new Set(["node_modules", ".git", "dist", "build", ".turbo", ".venv", ".venv-oracle"]);

function objcxxFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory()) return SKIP.has(e.name) || e.isSymbolicLink() ? [] : objcxxFiles(join(dir, e.name));
    return e.name.endsWith(".mm") ? [relative(ROOT, join(dir, e.name))] : [];
  });
}

const files = objcxxFiles(ROOT);
const covered = /^packages\/[^/]+\/native\/[^/]+\.mm$/;

describe("Objective-C++ sources", () => {
  it("exist (the Core ML addon)", () => {
    expect(files).toContain("packages/coreml/native/coreml_addon.mm");
  });

  it("all sit where the macOS SDK compile check looks: packages/*/native/*.mm", () => {
    expect(files.filter((f) => !covered.test(f))).toEqual([]);
  });

  it("are each built by their package's CMakeLists.txt", () => {
    for (const f of files) {
      const [, pkg, , name] = f.split("/");
      const cmake = join(ROOT, "packages", pkg, "CMakeLists.txt");
      expect(existsSync(cmake), `${f}: packages/${pkg}/CMakeLists.txt is missing`).toBe(true);
      expect(readFileSync(cmake, "utf8"), `${f} is not a source in ${relative(ROOT, cmake)}`).toContain(
        `native/${name}`,
      );
    }
  });

  it("are packed: every native/ file a CMakeLists.txt builds is in its package.json files", () => {
    // npm's `files` globs: `*` within one path segment (all this repository uses)
    const glob = (g: string) =>
      new RegExp(`^${g.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*")}$`);
    for (const pkg of new Set(files.map((f) => f.split("/")[1]))) {
      const dir = join(ROOT, "packages", pkg);
      const built = readFileSync(join(dir, "CMakeLists.txt"), "utf8").match(/native\/[\w.-]+/g) ?? [];
      expect(built.length, `packages/${pkg}/CMakeLists.txt names no native/ source`).toBeGreaterThan(0);
      const packed = (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).files as string[]).map(
        glob,
      );
      for (const f of built) {
        expect(existsSync(join(dir, f)), `packages/${pkg}/CMakeLists.txt builds ${f}, which is missing`).toBe(
          true,
        );
        expect(
          packed.some((g) => g.test(f)),
          `packages/${pkg}/${f} is built but not in package.json files`,
        ).toBe(true);
      }
    }
  });

  it.skipIf(!existsSync(CHECK))(
    `are the files check.sh compiles by default (skipped: ${CHECK} is not here)`,
    () => {
      // check.sh lists its default files with this glob; were it to change, this test must follow
      expect(readFileSync(CHECK, "utf8")).toContain('ls "$proj"/packages/*/native/*.mm');
    },
  );
});
