// The names a package's README documents: the identifiers in the code spans and code blocks of its
// "## API" section (up to the next "## " heading). check-packages.mjs holds every entry point's
// list to it; pack-install.mjs's consumer uses only names in it.
import { existsSync, readFileSync } from "node:fs";

/** The identifiers of `readme`'s API section; undefined when the file or the section is missing. */
export function documentedNames(readme) {
  if (!existsSync(readme)) return undefined;
  const lines = readFileSync(readme, "utf8").split("\n");
  const start = lines.findIndex((l) => /^##\s+API\b/.test(l));
  if (start < 0) return undefined;
  const end = lines.findIndex((l, i) => i > start && /^##\s/.test(l));
  const section = lines.slice(start + 1, end < 0 ? undefined : end).join("\n");
  const code = [...section.matchAll(/```[\s\S]*?```|`[^`]+`/g)].map((m) => m[0]).join(" ");
  return new Set(code.match(/[A-Za-z_$][\w$]*/g) ?? []);
}
