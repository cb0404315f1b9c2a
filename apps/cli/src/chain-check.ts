/**
 * The checks `run` makes before it loads a converted model, for the commands that only read one
 * (inspect, costplan, profile): model.json validated and every package checked against the sha256
 * it records, so that they refuse what `run` refuses. A lone .mlpackage or a folder without
 * model.json records no digests: it is read as it is, and a notice says what was not checked.
 */
import { existsSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { CHAIN_MANIFEST_FILE, type ChainManifest, readVerifiedChain } from "@anemll-qwen35/ir/chain";

/** Says which package is being hashed (the digests are cached, so only once per change). */
export const hashNotices = (notice: (text: string) => void) => ({
  onHash: (component: string) => notice(`checking ${component} against model.json's sha256 (once)…`),
});

/** The converted model at `path` (its folder or its model.json), checked; undefined when it is not one. */
export async function checkConverted(
  path: string,
  notice: (text: string) => void,
): Promise<ChainManifest | undefined> {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) return undefined; // the command says what it expected
  const isPackage = path.replace(/[/\\]$/, "").endsWith(".mlpackage");
  const dir = isPackage
    ? undefined
    : st.isDirectory()
      ? path
      : basename(path) === CHAIN_MANIFEST_FILE
        ? dirname(path)
        : undefined;
  if (dir !== undefined && existsSync(join(dir, CHAIN_MANIFEST_FILE))) {
    return readVerifiedChain(dir, hashNotices(notice));
  }
  notice(
    `${path}: ${isPackage ? "a package alone" : "a folder without model.json"} records no sha256, ` +
      "so it is read as it is, not checked for damage",
  );
  return undefined;
}
