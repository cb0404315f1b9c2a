/**
 * A test file's scratch folders: `out` for results and charts, and a conversion cache
 * (ANEMLL_QWEN35_CACHE) of its own so the file is hermetic; both are removed after its tests.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";

export function benchDirs(prefix: string): { readonly out: string; readonly cache: string } {
  const dirs = { out: "", cache: "" };
  let savedCache: string | undefined;
  beforeAll(() => {
    dirs.out = mkdtempSync(join(tmpdir(), `${prefix}-out-`));
    dirs.cache = mkdtempSync(join(tmpdir(), `${prefix}-cache-`));
    savedCache = process.env.ANEMLL_QWEN35_CACHE;
    process.env.ANEMLL_QWEN35_CACHE = dirs.cache;
  });
  afterAll(() => {
    if (savedCache === undefined) delete process.env.ANEMLL_QWEN35_CACHE;
    else process.env.ANEMLL_QWEN35_CACHE = savedCache;
    rmSync(dirs.out, { recursive: true, force: true });
    rmSync(dirs.cache, { recursive: true, force: true });
  });
  return dirs;
}
