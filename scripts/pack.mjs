#!/usr/bin/env node
// Packs every public workspace package into one folder, one .tgz each (`pnpm pack`, so
// `workspace:*` ranges become the versions being packed): how to install anemll-qwen35 before it is
// published on npm. Install them all at once, since they depend on each other:
//
//   pnpm run build && pnpm tarballs ~/anemll-tarballs
//   cd ~/my-project && npm install ~/anemll-tarballs/*.tgz     # then: npx anemll-qwen35 doctor
//
// scripts/pack-install.mjs packs the same way and checks that such an install works.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Public workspace packages: name, folder, and the subpaths they export. */
export function publicPackages() {
  const out = [];
  for (const group of ["packages", "apps"]) {
    for (const d of readdirSync(join(root, group))) {
      const dir = join(root, group, d);
      if (!existsSync(join(dir, "package.json"))) continue;
      const pj = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      if (pj.private) continue;
      out.push({ name: pj.name, dir, exports: Object.keys(pj.exports ?? {}), bin: pj.bin });
    }
  }
  return out;
}

/** `pnpm pack`s every public package into `dest` (made if missing); returns the tarballs' paths. */
export function packAll(dest) {
  mkdirSync(dest, { recursive: true });
  const made = [];
  for (const p of publicPackages()) {
    if (!existsSync(join(p.dir, "dist"))) throw new Error(`${p.name} is not built: run pnpm run build first`);
    const r = spawnSync("pnpm", ["pack", "--json", "--pack-destination", dest], {
      cwd: p.dir,
      encoding: "utf8",
    });
    if (r.status !== 0)
      throw new Error(`pnpm pack in ${p.dir} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
    made.push(resolve(dest, JSON.parse(r.stdout).filename));
  }
  return made;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dest = process.argv[2];
  if (!dest) {
    console.error("usage: node scripts/pack.mjs <folder>   (pnpm tarballs <folder>)");
    process.exit(2);
  }
  const made = packAll(resolve(dest));
  for (const f of made) console.log(f);
  console.log(
    `${made.length} tarballs in ${resolve(dest)}: npm install ${resolve(dest)}/*.tgz (all at once)`,
  );
}
