/**
 * What `convert` may put at its output path, checked before any work starts. A conversion replaces
 * only what it can tell is its own: an empty folder, a previous conversion (model.json of a chain)
 * or its own `<out>.partial` work folder. Anything else — a folder with the user's files, the
 * current folder, a plain file — is refused unless `force` is set, and the source checkpoint (or a
 * folder holding it) is refused always: replacing it would delete the weights being converted.
 */
import { readdir, readFile, realpath, stat } from "node:fs/promises";
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

async function isPreviousConversion(dir: string): Promise<boolean> {
  try {
    const m = JSON.parse(await readFile(join(dir, CHAIN_MANIFEST_FILE), "utf8")) as { format?: unknown };
    return m?.format === CHAIN_FORMAT;
  } catch {
    return false;
  }
}

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
  const hint = "choose a new or empty folder, or pass --force to replace it";
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
