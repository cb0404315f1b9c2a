#!/usr/bin/env node
// The names each package entry point exports (values and types), as TypeScript's checker sees them
// through the entry's source with every re-export followed: the counts for a note on the public APIs.
//
//   node scripts/export-counts.mjs [--names]
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const ts = createRequire(join(root, "package.json"))("typescript");

/** Every `exports` entry of every workspace package: its import name and its source file. */
const entries = [];
for (const group of ["packages", "apps"]) {
  for (const d of readdirSync(join(root, group))) {
    const manifest = join(root, group, d, "package.json");
    if (!existsSync(manifest)) continue;
    const pj = JSON.parse(readFileSync(manifest, "utf8"));
    for (const [key, target] of Object.entries(pj.exports ?? {})) {
      // the "source" condition names the entry's file; a package without it has src/index.ts
      const source =
        (typeof target === "object" && target.source) || (key === "." ? "./src/index.ts" : undefined);
      if (!source) continue;
      const name = key === "." ? pj.name : `${pj.name}/${key.slice(2)}`;
      entries.push({ name, file: join(root, group, d, source), private: Boolean(pj.private) });
    }
  }
}

const program = ts.createProgram(
  entries.map((e) => e.file),
  {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    customConditions: ["source"], // workspace packages resolve to their sources, as in the tests
    resolveJsonModule: true,
    skipLibCheck: true,
    noEmit: true,
  },
);
const checker = program.getTypeChecker();
const report = {};
for (const e of entries) {
  const module = checker.getSymbolAtLocation(program.getSourceFile(e.file));
  const names = (module ? checker.getExportsOfModule(module) : []).map((s) => {
    const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
    return target.flags & ts.SymbolFlags.Value ? s.name : `type ${s.name}`;
  });
  const types = names.filter((n) => n.startsWith("type ")).length;
  report[e.name] = { total: names.length, values: names.length - types, types, private: e.private };
  if (process.argv.includes("--names")) report[e.name].names = names.sort();
}
if (process.argv.includes("--names")) console.log(JSON.stringify(report, null, 1));
else {
  for (const [name, r] of Object.entries(report)) {
    const note = r.private ? "  (private)" : "";
    console.log(
      `${name.padEnd(32)} ${String(r.total).padStart(4)}  ${r.values} values, ${r.types} types${note}`,
    );
  }
}
