/** Temp folders for tests, removed after each test file (vitest only: registers an afterAll hook). */
import { mkdtempSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";

const made: string[] = [];

/** A fresh folder under os.tmpdir(), removed after the test file. */
export async function tempDir(tag = "ckpt"): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `anemll-${tag}-`));
  made.push(dir);
  return dir;
}

/** tempDir made at once (for a test file's top level): a fresh folder named by its prefix, removed after the file. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

afterAll(async () => {
  await Promise.all(made.map((d) => rm(d, { recursive: true, force: true })));
});

/** Entries of a folder (to check that no temp files were left behind). */
export const listDir = (dir: string) => readdir(dir);
