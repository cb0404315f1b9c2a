#!/usr/bin/env node
// Each package declares exactly what it imports: every package its src/ imports is a dependency (or
// peer), every dependency is imported by src/ (native build tools excepted), and what only tests,
// benchmarks and scripts import is a devDependency. No public package depends on, imports or bundles
// a private one (testkit is test-only). No import circles: between the files of a package's src/
// (relative imports, `import type` included) nor between packages.
//
//   node scripts/check-packages.mjs [ROOT]     (ROOT: a workspace folder; default this repository)
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { documentedNames } from "./readme-api.mjs";

const root = process.argv[2] ? resolve(process.argv[2]) : join(dirname(fileURLToPath(import.meta.url)), "..");
/** Used by native/build.mjs and CMakeLists.txt, not by import. */
const NATIVE_BUILD = new Set(["cmake-js", "node-addon-api"]);

function files(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return f === "node_modules" || f === "results" ? [] : files(p);
    return /\.(ts|mts|mjs|js)$/.test(f) ? [p] : [];
  });
}

/** `from "…"`, `import("…")`, `import "…"`: the specifiers a file imports (types included). */
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["']([^"']+)["']/gm;

/** The src/ file a relative specifier of `from` names (`./x.js` is x.ts), or undefined. */
function resolveRelative(from, spec, known) {
  const base = resolve(dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, ".ts"), base.replace(/\.mjs$/, ".mts"), `${base}.ts`];
  return [...candidates, join(base, "index.ts")].find((c) => known.has(c));
}

/**
 * The import circles of a graph (node → nodes it imports): each strongly connected component of
 * more than one node (or a node importing itself), as one cycle through it (`[a, b, a]`) and the
 * component's other nodes.
 */
function circles(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const found = [];
  const visit = (v) => {
    index.set(v, index.size);
    low.set(v, index.get(v));
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) !== index.get(v)) return;
    const component = new Set(stack.splice(stack.indexOf(v)));
    if (component.size > 1 || graph.get(v)?.has(v)) {
      const cycle = cycleThrough(graph, [...component].sort()[0], component);
      found.push({ cycle, others: [...component].filter((n) => !cycle.includes(n)).sort() });
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/** The shortest path from `start` back to itself inside `component` (breadth first). */
function cycleThrough(graph, start, component) {
  const previous = new Map();
  const queue = [start];
  while (queue.length) {
    const v = queue.shift();
    for (const w of graph.get(v) ?? []) {
      if (!component.has(w)) continue;
      if (w === start) {
        const path = [v];
        while (path[0] !== start) path.unshift(previous.get(path[0]));
        return [...path, start];
      }
      if (!previous.has(w)) {
        previous.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start, start];
}

/** Package names imported (statically or dynamically) by these files. */
function imported(paths) {
  const names = new Set();
  for (const f of paths) {
    for (const m of readFileSync(f, "utf8").matchAll(IMPORT)) {
      const spec = m[1];
      if (spec.startsWith(".") || spec.startsWith("/")) continue;
      if (!/^(@[a-z0-9._-]+\/)?[a-z0-9._-]+(\/[^\s]*)?$/.test(spec)) continue; // not a package name (text in a string)
      if (spec.startsWith("node:") || builtinModules.includes(spec.split("/")[0])) continue;
      const parts = spec.split("/");
      names.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]);
    }
  }
  return names;
}

/**
 * What an entry point (an index.ts of explicit lists) exports: its names, and the modules it
 * re-exports wholesale (`export * from`, which hides the list from a reader).
 */
function entryExports(file) {
  const text = readFileSync(file, "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/\/\/.*$/gm, "");
  const names = new Set();
  for (const m of text.matchAll(/\bexport\s+(?:type\s+)?\{([^}]*)\}/g)) {
    for (const item of m[1].split(",")) {
      const words = item
        .trim()
        .replace(/^type\s+/, "")
        .split(/\s+as\s+/);
      if (words[0]) names.add(words.at(-1).trim());
    }
  }
  for (const m of text.matchAll(/\bexport\s+\*\s+as\s+([\w$]+)/g)) names.add(m[1]);
  const declared =
    /\bexport\s+(?:declare\s+)?(?:abstract\s+)?(?:const|let|function\*?|async\s+function|class|interface|type|enum)\s+([\w$]+)/g;
  for (const m of text.matchAll(declared)) names.add(m[1]);
  const wholesale = [...text.matchAll(/\bexport\s+\*\s+from\s+["']([^"']+)["']/g)].map((m) => m[1]);
  return { names, wholesale };
}

const problems = [];
const dirs = ["packages", "apps"].flatMap((g) => readdirSync(join(root, g)).map((d) => join(root, g, d)));
const manifests = new Map();
for (const dir of dirs) {
  if (existsSync(join(dir, "package.json")))
    manifests.set(dir, JSON.parse(readFileSync(join(dir, "package.json"), "utf8")));
}
const privateNames = new Set([...manifests.values()].filter((p) => p.private).map((p) => p.name));

for (const [dir, pj] of manifests) {
  const deps = { ...pj.dependencies, ...pj.peerDependencies, ...pj.optionalDependencies };
  const dev = pj.devDependencies ?? {};
  const src = imported(files(join(dir, "src")));
  const other = imported(["test", "bench", "scripts"].flatMap((d) => files(join(dir, d))));
  const say = (m) => problems.push(`${pj.name}: ${m}`);
  // what tsup bundles into dist (noExternal) ships to users like what src/ imports
  const bundled = new Set(
    existsSync(join(dir, "tsup.config.ts"))
      ? (readFileSync(join(dir, "tsup.config.ts"), "utf8").match(/@anemll-qwen35\/[a-z-]+/g) ?? [])
      : [],
  );
  for (const n of src) {
    if (n === pj.name) continue;
    if (!deps[n]) say(`src/ imports ${n}, which is not a dependency`);
  }
  for (const n of Object.keys(pj.dependencies ?? {})) {
    if (!src.has(n) && !(NATIVE_BUILD.has(n) && existsSync(join(dir, "native"))))
      say(`depends on ${n}, which src/ does not import (a devDependency?)`);
  }
  for (const n of other) {
    if (n !== pj.name && n !== "vitest" && !deps[n] && !dev[n] && !existsSync(join(root, "node_modules", n)))
      say(`tests/benchmarks import ${n}, which is not declared`);
  }
  if (!pj.private) {
    for (const n of Object.keys({ ...pj.dependencies, ...pj.peerDependencies }))
      if (privateNames.has(n)) say(`is public but depends on the private ${n}`);
    // a private package is test-only: what src/ imports or tsup bundles ships to users
    for (const n of src) if (privateNames.has(n)) say(`is public but src/ imports the private ${n}`);
    for (const n of bundled)
      if (privateNames.has(n)) say(`is public but bundles the private ${n} (tsup noExternal)`);
  }
  // every public entry point lists its names (no `export *`), and the README's API section names each
  if (!pj.private) {
    const documented = documentedNames(join(dir, "README.md"));
    if (!documented && pj.exports) say(`README.md has no "## API" section for its exports`);
    for (const [key, target] of Object.entries(pj.exports ?? {})) {
      // the "source" condition names the entry's file; a package without it has src/index.ts
      const source =
        (typeof target === "object" && target.source) || (key === "." ? "./src/index.ts" : undefined);
      if (!source || !existsSync(join(dir, source))) continue;
      const entry = key === "." ? pj.name : `${pj.name}/${key.slice(2)}`;
      const { names, wholesale } = entryExports(join(dir, source));
      if (wholesale.length)
        say(
          `${source.replace(/^\.\//, "")} re-exports all of ${wholesale.join(", ")}: list the names ${entry} offers`,
        );
      const missing = documented ? [...names].filter((n) => !documented.has(n)).sort() : [];
      if (missing.length) say(`README.md's API section does not name ${missing.join(", ")} (from ${entry})`);
    }
  }
  // the files of src/ import each other without a circle (a shared type moves down into its own file)
  const srcFiles = files(join(dir, "src"));
  const known = new Set(srcFiles);
  const graph = new Map();
  for (const f of srcFiles) {
    const to = new Set();
    for (const m of readFileSync(f, "utf8").matchAll(IMPORT)) {
      const t = m[1].startsWith(".") ? resolveRelative(f, m[1], known) : undefined;
      if (t) to.add(t);
    }
    graph.set(f, to);
  }
  const name = (f) => relative(join(dir, "src"), f);
  for (const { cycle, others } of circles(graph)) {
    const also = others.length ? ` (the circle also takes in ${others.map(name).join(", ")})` : "";
    say(`import circle in src/: ${cycle.map(name).join(" → ")}${also}`);
  }
  // a file src/ opens at run time beside itself (a worker: `new URL("./x.js", import.meta.url)`)
  // must be in the build output, or the published package fails where the sources work
  if (existsSync(join(dir, "dist"))) {
    for (const f of files(join(dir, "src"))) {
      for (const line of readFileSync(f, "utf8").split("\n")) {
        if (!line.includes("new URL(")) continue;
        for (const m of line.matchAll(/["']\.\/([\w.-]+\.js)["']/g)) {
          if (!existsSync(join(dir, "dist", m[1])))
            say(`${f.slice(dir.length + 1)} opens ./${m[1]} at run time, but the build has no dist/${m[1]}`);
        }
      }
    }
  }
}
// and the packages depend on each other without a circle (devDependencies too: they order the build)
const byName = new Map([...manifests.values()].map((pj) => [pj.name, pj]));
const packageGraph = new Map(
  [...byName.values()].map((pj) => {
    const all = {
      ...pj.dependencies,
      ...pj.peerDependencies,
      ...pj.optionalDependencies,
      ...pj.devDependencies,
    };
    return [pj.name, new Set(Object.keys(all).filter((n) => byName.has(n) && n !== pj.name))];
  }),
);
for (const { cycle, others } of circles(packageGraph)) {
  const also = others.length ? ` (the circle also takes in ${others.join(", ")})` : "";
  problems.push(`package circle: ${cycle.join(" → ")}${also}`);
}

if (problems.length) {
  console.error(`package dependencies:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`package dependencies: ${manifests.size} packages declare exactly what they import`);
