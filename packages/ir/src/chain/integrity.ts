/**
 * Checking a chain's packages against the sha256 model.json records for them, before they run: a
 * package damaged on disk (a bad copy, a partial download, an edit) is named instead of computing
 * garbage. Hashing a 9B chain takes seconds, so the digest is cached per package by a fingerprint
 * of its files: path, device, inode, size, mtime and ctime. ctime is set by the kernel on every
 * change and `touch` cannot set it back, so bytes flipped and the mtime restored (`touch -r`) still
 * change the fingerprint and the package is hashed again. The cache is a small JSON file (default
 * `$ANEMLL_QWEN35_CACHE/digests.json`, else `~/.cache/anemll-qwen35/digests.json`) that only its
 * user may write: the folder is made 0700 and the file 0600, and a cache file (or folder) owned by
 * someone else or writable by group or others is ignored, saying so. When it cannot be used the
 * packages are simply hashed every time.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, mkdir, readdir, readFile, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { writeFileAtomic } from "../checkpoint/atomic.js";
import { digestMlPackage } from "../mil/format/layout.js";
import { type ChainManifest, readChainManifest } from "./contract.js";

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

/**
 * Every file under the package with its device, inode, size, mtime and ctime (nanoseconds): changes
 * whenever its content can have, including when the mtime was set back.
 */
async function fingerprint(pkg: string): Promise<string> {
  const entries = await readdir(pkg, { recursive: true, withFileTypes: true });
  const rows: string[] = [];
  for (const e of entries) {
    if (!e.isFile()) continue;
    const file = join(e.parentPath, e.name);
    const st = await stat(file, { bigint: true });
    rows.push([file.slice(pkg.length), st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs].join("\0"));
  }
  return createHash("sha256").update(rows.sort().join("\n")).digest("hex");
}

/** Why `path` (the cache file or its folder) cannot be trusted, or undefined when only we can write it. */
async function untrusted(path: string, kind: "file" | "folder"): Promise<string | undefined> {
  const st = await lstat(path).catch(() => undefined);
  if (!st) return undefined; // made by us, with our modes
  if (kind === "file" ? !st.isFile() : !st.isDirectory()) return `${path} is not a plain ${kind}`;
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid)
    return `${path} is owned by uid ${st.uid}, not by this user (${uid})`;
  if ((st.mode & 0o022) !== 0) {
    return `${path} is writable by ${st.mode & 0o020 ? "its group" : "others"} (mode ${(st.mode & 0o777).toString(8)})`;
  }
  return undefined;
}

/** The cache, or undefined (after saying why) when it must not be trusted. */
async function openCache(file: string, warn: (message: string) => void): Promise<DigestCache | undefined> {
  const problem = (await untrusted(dirname(file), "folder")) ?? (await untrusted(file, "file"));
  if (problem) {
    warn(
      `not using the digest cache: ${problem}; every package is hashed on each load (fix: chmod go-w, or remove it)`,
    );
    return undefined;
  }
  try {
    const v = JSON.parse(await readFile(file, "utf8"));
    if (typeof v !== "object" || v === null || Array.isArray(v)) return {};
    const ok = (e: unknown) =>
      typeof (e as { fingerprint?: unknown })?.fingerprint === "string" &&
      typeof (e as { sha256?: unknown })?.sha256 === "string";
    return Object.fromEntries(Object.entries(v).filter(([, e]) => ok(e))) as DigestCache;
  } catch {
    return {};
  }
}

const warned = new Set<string>();
const warnOnce = (message: string) => {
  if (warned.has(message)) return;
  warned.add(message);
  process.emitWarning(message, { code: "ANEMLL_DIGEST_CACHE" });
};

async function saveCache(file: string, cache: DigestCache): Promise<void> {
  // forget packages that are gone (temporary folders, deleted models)
  const kept = Object.entries(cache).filter(([p]) => existsSync(p));
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeFileAtomic(file, JSON.stringify(Object.fromEntries(kept)), { mode: 0o600 });
}

export interface VerifyChainOptions {
  /** The digest cache; `false` hashes every package every time. */
  cacheFile?: string | false;
  /** Called before each package that has to be hashed (not found in the cache). */
  onHash?: (component: string) => void;
  /** Why the cache is not used (default: a process warning). */
  onWarning?: (message: string) => void;
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
  const warn = o.onWarning ?? warnOnce;
  const stored = cacheFile ? await openCache(cacheFile, warn) : undefined;
  const cache = stored ?? {};
  let changed = false;
  const mtp = manifest.speculative ? [manifest.speculative.mtp] : [];
  for (const c of [...manifest.components, ...mtp]) {
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
  if (changed && cacheFile && stored) await saveCache(cacheFile, cache).catch(() => {});
}

/**
 * What a runtime checks before it loads a converted model, for tools that only read one: model.json
 * read and validated (readChainManifest: schema, ctx and vocabulary against the components), then
 * every package against its sha256 (verifyChainPackages).
 */
export async function readVerifiedChain(dir: string, o: VerifyChainOptions = {}): Promise<ChainManifest> {
  const manifest = await readChainManifest(dir);
  await verifyChainPackages(dir, manifest, o);
  return manifest;
}
