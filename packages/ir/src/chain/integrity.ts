/**
 * Checking a chain's packages against the sha256 model.json records for them, before they run: a
 * package damaged on disk (a bad copy, a partial download, an edit) is named instead of computing
 * garbage. Hashing a 9B chain takes seconds, so the digest is cached per package by a fingerprint
 * of its files (path, size, mtime): later loads only stat the files. The cache is a small JSON file
 * (default `$ANEMLL_QWEN35_CACHE/digests.json`, else `~/.cache/anemll-qwen35/digests.json`); when
 * it cannot be read or written the packages are simply hashed every time.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { writeFileAtomic } from "../checkpoint/atomic.js";
import { digestMlPackage } from "../mil/format/package.js";
import type { ChainManifest } from "./contract.js";

/** A package's files do not hash to what model.json recorded. */
export class ChainIntegrityError extends AnemllError {
  readonly component: string;
  readonly file: string;
  constructor(component: string, file: string, message: string, options?: { cause?: unknown }) {
    super("E_CHAIN_INTEGRITY", `${component} (${file}): ${message}`, options);
    this.component = component;
    this.file = file;
  }
}

export function defaultDigestCacheFile(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "digests.json");
}

type DigestCache = Record<string, { fingerprint: string; sha256: string }>;

/** path, size and mtime of every file under the package: changes whenever its content can have. */
async function fingerprint(pkg: string): Promise<string> {
  const entries = await readdir(pkg, { recursive: true, withFileTypes: true });
  const rows: string[] = [];
  for (const e of entries) {
    if (!e.isFile()) continue;
    const file = join(e.parentPath, e.name);
    const st = await stat(file);
    rows.push(`${file.slice(pkg.length)}\0${st.size}\0${st.mtimeMs}`);
  }
  return createHash("sha256").update(rows.sort().join("\n")).digest("hex");
}

async function readCache(file: string): Promise<DigestCache> {
  try {
    const v = JSON.parse(await readFile(file, "utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as DigestCache) : {};
  } catch {
    return {};
  }
}

export interface VerifyChainOptions {
  /** The digest cache; `false` hashes every package every time. */
  cacheFile?: string | false;
  /** Called before each package that has to be hashed (not found in the cache). */
  onHash?: (component: string) => void;
  signal?: AbortSignal;
}

/**
 * Throws ChainIntegrityError naming the first component whose package is missing or does not hash
 * to model.json's sha256.
 */
export async function verifyChainPackages(
  dir: string,
  manifest: ChainManifest,
  o: VerifyChainOptions = {},
): Promise<void> {
  const cacheFile = o.cacheFile === undefined ? defaultDigestCacheFile() : o.cacheFile;
  const cache = cacheFile ? await readCache(cacheFile) : {};
  let changed = false;
  for (const c of manifest.components) {
    const path = join(dir, c.file);
    let real: string;
    let print: string;
    try {
      real = await realpath(path);
      print = await fingerprint(real);
    } catch (cause) {
      throw new ChainIntegrityError(c.name, c.file, "the package is missing or unreadable", { cause });
    }
    let digest = cache[real]?.fingerprint === print ? cache[real].sha256 : undefined;
    if (digest === undefined) {
      o.onHash?.(c.name);
      try {
        digest = await digestMlPackage(real, { signal: o.signal });
      } catch (cause) {
        if ((cause as Error).name === "AbortError") throw cause;
        throw new ChainIntegrityError(c.name, c.file, `cannot be read (${(cause as Error).message})`, {
          cause,
        });
      }
      cache[real] = { fingerprint: print, sha256: digest };
      changed = true;
    }
    if (digest !== c.sha256) {
      throw new ChainIntegrityError(
        c.name,
        c.file,
        `the package is corrupt or was changed after conversion: its sha256 is ${digest.slice(0, 12)}…, model.json ` +
          `records ${c.sha256.slice(0, 12)}…; convert the model again (or copy this package again)`,
      );
    }
  }
  if (changed && cacheFile) {
    // forget packages that are gone (temporary folders, deleted models)
    const kept = Object.entries(cache).filter(([p]) => existsSync(p));
    await writeFileAtomic(cacheFile, JSON.stringify(Object.fromEntries(kept))).catch(() => {});
  }
}
