/**
 * What `convert` may put at its output path, checked before any work starts, and how the finished
 * work folder takes its place. A conversion writes only into what it can tell is its own: an empty
 * folder, a previous conversion (model.json of a chain) or its own `<out>.partial` work folder.
 * Anything else — a folder with the user's files, the current folder, a plain file — is refused
 * unless `force` is set, and the source checkpoint (or a folder holding it) is refused always.
 * Even then it deletes only what a conversion writes: files a user added to the folder (NOTES.txt)
 * are moved into the new conversion.
 */
import { existsSync } from "node:fs";
import { readdir, readFile, realpath, rename, rm, stat } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { CHAIN_FORMAT, CHAIN_MANIFEST_FILE } from "@anemll-qwen35/ir/chain";

/** The output folder cannot be written, or holds something a conversion must not replace. */
export class OutputError extends AnemllError {
  readonly path: string;
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super("E_OUTPUT", `${path}: ${message}`, options);
    this.path = path;
  }
}

/** Written into `<out>.partial/` when it is created, so a later run knows the folder is its own. */
export const PARTIAL_MARKER = ".anemll-qwen35-partial";

/** The real path of `p`, or of its nearest existing ancestor joined with the rest. */
async function realish(p: string): Promise<string> {
  const abs = resolve(p);
  try {
    return await realpath(abs);
  } catch {
    const parent = dirname(abs);
    return parent === abs ? abs : join(await realish(parent), abs.slice(parent.length + 1));
  }
}

const isInside = (child: string, parent: string) => {
  const r = relative(parent, child);
  return r === "" || (!r.startsWith(`..${sep}`) && r !== ".." && !r.startsWith(sep));
};

/** model.json of the conversion in `dir`, or undefined when it holds none. */
async function previousManifest(dir: string): Promise<Record<string, unknown> | undefined> {
  try {
    const m = JSON.parse(await readFile(join(dir, CHAIN_MANIFEST_FILE), "utf8")) as Record<string, unknown>;
    return m?.format === CHAIN_FORMAT ? m : undefined;
  } catch {
    return undefined;
  }
}

const isPreviousConversion = async (dir: string) => (await previousManifest(dir)) !== undefined;

/** Why `path` is not ours to replace, or undefined when it is (absent, empty, or `ours(path)`). */
async function foreignContent(
  path: string,
  ours: (dir: string) => Promise<boolean>,
): Promise<string | undefined> {
  const st = await stat(path).catch(() => undefined);
  if (!st) return undefined;
  if (!st.isDirectory()) return "is a file, not a folder";
  const entries = await readdir(path);
  if (entries.length === 0 || (await ours(path))) return undefined;
  const shown =
    entries.slice(0, 3).join(", ") + (entries.length > 3 ? `, … (${entries.length} entries)` : "");
  return `is a folder that is not a previous conversion (it holds ${shown})`;
}

/**
 * Throws OutputError when writing the conversion of `source` to `out` could destroy data: `out` is
 * (or holds) the source, or `out` / `<out>.partial` hold something that is not a conversion and
 * `force` is not set.
 */
export async function checkOutputTarget(out: string, source: string, force: boolean): Promise<void> {
  const [realOut, realSource] = await Promise.all([realish(out), realish(source)]);
  if (isInside(realSource, realOut)) {
    throw new OutputError(
      out,
      realOut === realSource
        ? "is the checkpoint being converted; choose another output folder"
        : `holds the checkpoint being converted (${source}); choose another output folder`,
    );
  }
  if (force) return;
  const hint = "choose a new or empty folder, or pass --force to convert into it (its other files are kept)";
  const problem = await foreignContent(out, isPreviousConversion);
  if (problem) throw new OutputError(out, `${problem}; ${hint}`);
  const partial = `${out}.partial`;
  // the marker, or the component record of a conversion that predates it
  const partialProblem = await foreignContent(partial, async (d) => {
    const names = await readdir(d);
    return names.includes(PARTIAL_MARKER) || names.includes("components.partial.json");
  });
  if (partialProblem) {
    throw new OutputError(partial, `${partialProblem} and would be used as the work folder; ${hint}`);
  }
}

/**
 * The entries of `out` that no conversion wrote: not in the new conversion (`partial`), and neither
 * model.json, config.json nor a package or tokenizer file the previous conversion's model.json lists.
 */
async function userEntries(out: string, partial: string): Promise<string[]> {
  if (!(await stat(out).catch(() => undefined))?.isDirectory()) return [];
  const ours = new Set([...(await readdir(partial)), CHAIN_MANIFEST_FILE, "config.json"]);
  const m = await previousManifest(out);
  const components = Array.isArray(m?.components) ? (m.components as { file?: unknown }[]) : [];
  const tokenizer = (m?.tokenizer as { files?: unknown } | undefined)?.files;
  for (const f of [...components.map((c) => c?.file), ...(Array.isArray(tokenizer) ? tokenizer : [])]) {
    // a plain name in the folder; anything else in an edited model.json is not ours to claim
    if (typeof f === "string" && f !== "" && !/[\\/]/.test(f) && f !== "." && f !== "..") ours.add(f);
  }
  return (await readdir(out)).filter((name) => !ours.has(name));
}

/**
 * Replaces `out` with the finished `partial` folder: the old folder is renamed aside, the new one
 * renamed in, the user's entries of the old one (see userEntries) moved into the new one, and only
 * then is the old one removed — with what a conversion wrote in it. If a move fails, the old folder
 * stays and the error says where the files are. Returns the entries it kept.
 */
export async function swapIntoPlace(partial: string, out: string): Promise<string[]> {
  const kept = await userEntries(out, partial);
  const old = existsSync(out) ? `${out}.old-${process.pid}-${Date.now()}` : undefined;
  try {
    if (old) await rename(out, old);
    try {
      await rename(partial, out);
    } catch (err) {
      if (old) await rename(old, out).catch(() => {});
      throw err;
    }
  } catch (err) {
    throw new OutputError(
      out,
      `could not move the finished conversion into place (${(err as Error).message})`,
      {
        cause: err,
      },
    );
  }
  if (!old) return kept;
  for (const name of kept) {
    try {
      await rename(join(old, name), join(out, name));
    } catch (err) {
      throw new OutputError(
        out,
        `the new conversion is in place, but ${name} (and anything else you added) could not be moved from ` +
          `the previous one; they are still in ${old} (${(err as Error).message})`,
        { cause: err },
      );
    }
  }
  await rm(old, { recursive: true, force: true });
  return kept;
}
