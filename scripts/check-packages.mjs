#!/usr/bin/env node
// Each package declares exactly what it imports: every package its src/ imports is a dependency (or
// peer), every dependency is imported by src/ (native build tools excepted), and what only tests,
// benchmarks and scripts import is a devDependency. No public package depends on, imports or
// bundles a private one.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
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

/** Package names imported (statically or dynamically) by these files. */
function imported(paths) {
  const names = new Set();
  const re = /(?:from\s+|import\s*\(\s*|^\s*import\s+)["']([^"'./][^"']*)["']/gm;
  for (const f of paths) {
    for (const m of readFileSync(f, "utf8").matchAll(re)) {
      const spec = m[1];
      if (!/^(@[a-z0-9._-]+\/)?[a-z0-9._-]+(\/[^\s]*)?$/.test(spec)) continue; // not a package name (text in a string)
      if (spec.startsWith("node:") || builtinModules.includes(spec.split("/")[0])) continue;
      const parts = spec.split("/");
      names.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]);
    }
  }
  return names;
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
  for (const n of src) {
    if (n === pj.name) continue;
    if (!deps[n]) say(`src/ imports ${n}, which is not a dependency`);
    if (!pj.private && privateNames.has(n)) say(`is public but its src/ imports the private ${n}`);
  }
  // nor may a public package ship a private one inside its dist (tsup's noExternal)
  const tsup = join(dir, "tsup.config.ts");
  if (!pj.private && existsSync(tsup)) {
    for (const n of readFileSync(tsup, "utf8").match(/@anemll-qwen35\/[a-z-]+/g) ?? [])
      if (privateNames.has(n)) say(`is public but bundles the private ${n} (tsup.config.ts)`);
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
if (problems.length) {
  console.error(`package dependencies:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`package dependencies: ${manifests.size} packages declare exactly what they import`);
