/**
 * The chain's integrity check: the digest cache cannot be fooled by restoring a file's mtime, lives
 * where only its user can write it, and `@anemll-qwen35/ir/chain` (as built) loads no protobuf.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, chownSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { ChainIntegrityError, type ChainManifest, verifyChainPackages } from "../src/chain/index.js";
import { digestMlPackage, writeMlPackage } from "../src/mil/format/package.js";
import { linearModel } from "./mil-format/programs.js";
import { scratchDir } from "./testkit.js";

const work = scratchDir("anemll-integrity-");
let n = 0;

/** A one-package chain folder and the model.json fields the check reads. */
async function chain(): Promise<{ dir: string; manifest: ChainManifest; blob: string }> {
  const dir = join(work, `chain-${n++}`);
  const pkg = join(dir, "sb.mlpackage");
  await writeMlPackage(pkg, linearModel());
  const manifest = {
    components: [{ name: "sb", file: "sb.mlpackage", sha256: await digestMlPackage(pkg) }],
  } as unknown as ChainManifest;
  const weights = join(pkg, "Data", "com.apple.CoreML", "weights");
  return { dir, manifest, blob: join(weights, readdirSync(weights)[0]) };
}

/** Checks a chain folder against its manifest with the digest cache at `cacheFile`, recording hashes and warnings. */
function verifier({ dir, manifest }: { dir: string; manifest: ChainManifest }, cacheFile: string) {
  const hashed: string[] = [];
  const warnings: string[] = [];
  const verify = () =>
    verifyChainPackages(dir, manifest, {
      cacheFile,
      onHash: (c) => hashed.push(c),
      onWarning: (m) => warnings.push(m),
    });
  return { verify, hashed, warnings };
}

describe("the digest cache", () => {
  it("a weight byte flipped and its mtime restored with `touch -r` is caught, naming the file and the sha256", async () => {
    const { dir, manifest, blob } = await chain();
    const { verify, hashed } = verifier({ dir, manifest }, join(work, "cache-touch", "digests.json"));
    await verify();
    await verify();
    expect(hashed).toEqual(["sb"]); // the second load used the cache
    const stamp = join(work, "stamp");
    writeFileSync(stamp, "");
    execFileSync("touch", ["-r", blob, stamp]); // remember the blob's times
    const before = statSync(blob);
    const bytes = readFileSync(blob);
    bytes[bytes.length - 3] ^= 0xff;
    writeFileSync(blob, bytes);
    execFileSync("touch", ["-r", stamp, blob]); // and put them back
    const after = statSync(blob);
    expect([after.size, after.mtimeMs]).toEqual([before.size, before.mtimeMs]);
    const changed = await digestMlPackage(join(dir, "sb.mlpackage"));
    const err = await verify().catch((e) => e);
    expect(err).toBeInstanceOf(ChainIntegrityError);
    expect(err.file).toBe("sb.mlpackage");
    expect(err.message).toMatch(
      /^sb \(sb\.mlpackage\): the package is corrupt or was changed after conversion/,
    );
    expect(err.message).toContain(`its sha256 is ${changed.slice(0, 12)}`);
    expect(err.message).toContain(`records ${manifest.components[0].sha256.slice(0, 12)}`);
    expect(hashed).toEqual(["sb", "sb"]);
  });

  it("is made 0700 (folder) and 0600 (file), and ignored, saying so, when group or others may write it", async () => {
    const folder = join(work, "cache-modes");
    const cacheFile = join(folder, "digests.json");
    const { verify, hashed, warnings } = verifier(await chain(), cacheFile);
    await verify();
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    expect(statSync(cacheFile).mode & 0o777).toBe(0o600);
    expect(warnings).toEqual([]);

    chmodSync(cacheFile, 0o666);
    await verify();
    await verify();
    expect(hashed).toEqual(["sb", "sb", "sb"]); // hashed every time, the cache is not read
    expect(warnings[0]).toMatch(
      /not using the digest cache: .*digests\.json is writable by its group \(mode 666\)/,
    );
    expect(statSync(cacheFile).mode & 0o777).toBe(0o666); // nor rewritten

    chmodSync(cacheFile, 0o600);
    chmodSync(folder, 0o757);
    await verify();
    expect(hashed).toHaveLength(4);
    expect(warnings.at(-1)).toMatch(/cache-modes is writable by others \(mode 757\)/);
    chmodSync(folder, 0o700);
    await verify();
    expect(hashed).toHaveLength(4); // trusted again: cached
  });

  it.runIf(process.getuid?.() === 0)(
    "ignores a cache file owned by another user (needs root to chown; skipped otherwise)",
    async () => {
      const cacheFile = join(work, "cache-owner", "digests.json");
      const { verify, hashed, warnings } = verifier(await chain(), cacheFile);
      await verify();
      chownSync(cacheFile, 65534, 65534);
      await verify();
      expect(hashed).toEqual(["sb", "sb"]);
      expect(warnings[0]).toMatch(/digests\.json is owned by uid 65534, not by this user \(0\)/);
    },
  );
});

describe("@anemll-qwen35/ir/chain, as built", () => {
  const dist = resolve(import.meta.dirname, "../dist");
  /** The module URLs Node resolves while importing `entry` (a resolve hook writes them to a file). */
  function modulesLoadedBy(entry: string): string[] {
    const log = join(work, `loads-${n++}.txt`);
    const hooks = join(work, `hooks-${n++}.mjs`);
    writeFileSync(
      hooks,
      `import { appendFileSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(${JSON.stringify(log)}, r.url + "\\n");
  return r;
}`,
    );
    const register = join(work, `register-${n++}.mjs`);
    writeFileSync(
      register,
      `import { register } from "node:module"; register(${JSON.stringify(pathToFileURL(hooks).href)});`,
    );
    writeFileSync(log, "");
    execFileSync(process.execPath, [
      "--import",
      pathToFileURL(register).href,
      "-e",
      `await import(${JSON.stringify(pathToFileURL(entry).href)})`,
    ]);
    return readFileSync(log, "utf8").split("\n").filter(Boolean);
  }

  it("loads no protobufjs (the package digest is plain files and JSON); ir/mil does", () => {
    const chainLoads = modulesLoadedBy(join(dist, "chain.js"));
    expect(chainLoads.some((u) => u.endsWith("/chain.js"))).toBe(true);
    expect(chainLoads.filter((u) => /protobufjs/.test(u))).toEqual([]);
    // the hook does see it where it is used
    expect(modulesLoadedBy(join(dist, "mil.js")).some((u) => /protobufjs/.test(u))).toBe(true);
  });
});
