/**
 * Atomic outputs: everything is written under a temporary name in the same directory as the
 * destination and renamed into place only when complete, so that an interrupted run never
 * leaves a file or folder that looks finished. rename(2) within one filesystem is atomic.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";

/** A hidden sibling path for `target`: `.name.tmp-<pid>-<random>`. */
export function tempSiblingPath(target: string): string {
  const tag = `${process.pid}-${randomBytes(4).toString("hex")}`;
  return join(dirname(target), `.${basename(target)}.tmp-${tag}`);
}

/** Writes `data` to `path` through a temp file, fsync and rename; `mode` is the new file's (default 0o666 less the umask). */
export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number } = {},
): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = tempSiblingPath(path);
  const fh = await open(tmp, "wx", options.mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } catch (err) {
    await fh.close().catch(() => {});
    await rm(tmp, { force: true });
    throw err;
  }
  await fh.close();
  try {
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Moves a finished temp directory to `dst`. If `dst` exists it is replaced only with
 * `overwrite`; the old one is first renamed aside so that `dst` is never half old, half new.
 */
export async function commitDirectory(tmpDir: string, dst: string, overwrite: boolean): Promise<void> {
  if (await pathExists(dst)) {
    if (!overwrite) throw new InvalidArgumentError(`${dst} already exists`);
    const aside = tempSiblingPath(`${dst}.old`);
    await rename(dst, aside);
    try {
      await rename(tmpDir, dst);
    } catch (err) {
      await rename(aside, dst).catch(() => {});
      throw err;
    }
    await rm(aside, { recursive: true, force: true });
    return;
  }
  await rename(tmpDir, dst);
}
