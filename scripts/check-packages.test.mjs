// check-packages.mjs on made-up workspaces: it must report an import circle (one made of
// `import type` alone too), a public package importing or bundling the private testkit, and a
// circle between packages, and pass a tree that has none of them. Run by `pnpm run lint`.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const script = join(dirname(fileURLToPath(import.meta.url)), "check-packages.mjs");
const made = [];
after(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

/** A workspace of `files` (path → text; objects are written as JSON); returns its folder. */
function workspace(files) {
  const root = mkdtempSync(join(tmpdir(), "check-packages-"));
  made.push(root);
  mkdirSync(join(root, "apps"));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), typeof content === "string" ? content : JSON.stringify(content));
  }
  return root;
}

function check(root) {
  const r = spawnSync(process.execPath, [script, root], { encoding: "utf8" });
  return { status: r.status, out: r.stdout + r.stderr };
}

const testkit = {
  "packages/testkit/package.json": { name: "@anemll-qwen35/testkit", private: true },
  "packages/testkit/src/index.ts": "export const synth = 1;\n",
};

test("a clean workspace passes", () => {
  const root = workspace({
    ...testkit,
    "packages/a/package.json": {
      name: "@anemll-qwen35/a",
      exports: { ".": { source: "./src/index.ts" } },
      devDependencies: { "@anemll-qwen35/testkit": "workspace:*" },
    },
    "packages/a/README.md": "# a\n\n## API\n\n- `x`, the sum; `Y`, its type.\n",
    "packages/a/src/index.ts": '// the API\nexport { x, type Y } from "./x.js";\n',
    "packages/a/src/x.ts": 'import { y } from "./y.js";\nexport const x = y + 1;\nexport type Y = number;\n',
    "packages/a/src/y.ts": "export const y = 1;\n",
    "packages/a/test/x.test.ts": 'import { synth } from "@anemll-qwen35/testkit";\nvoid synth;\n',
  });
  const r = check(root);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /2 packages declare exactly what they import/);
});

test("reports a circle of files, type-only imports included", () => {
  const root = workspace({
    "packages/a/package.json": { name: "@anemll-qwen35/a" },
    "packages/a/src/x.ts": 'import type { Y } from "./y.js";\nexport type X = { y: Y };\n',
    "packages/a/src/y.ts": 'import type { X } from "./x.js";\nexport type Y = { x?: X };\n',
    "packages/a/src/z.ts": 'export { type X } from "./x.js";\n',
  });
  const r = check(root);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /@anemll-qwen35\/a: import circle in src\/: x\.ts → y\.ts → x\.ts/);
  assert.doesNotMatch(r.out, /z\.ts →/, "z.ts imports the circle but is not part of it");
});

test("reports a circle of three files through a folder's index", () => {
  const root = workspace({
    "packages/a/package.json": { name: "@anemll-qwen35/a" },
    "packages/a/src/server.ts": 'import { route } from "./routes/index.js";\nexport const s = route;\n',
    "packages/a/src/routes/index.ts": 'export { route } from "./route.js";\n',
    "packages/a/src/routes/route.ts": 'import type { s } from "../server.js";\nexport const route = 1;\n',
  });
  const r = check(root);
  assert.equal(r.status, 1, r.out);
  assert.match(
    r.out,
    /import circle in src\/: routes\/index\.ts → routes\/route\.ts → server\.ts → routes\/index\.ts/,
  );
});

test("reports a public package that imports or bundles the private testkit", () => {
  const root = workspace({
    ...testkit,
    "packages/a/package.json": {
      name: "@anemll-qwen35/a",
      dependencies: { "@anemll-qwen35/testkit": "workspace:*" },
    },
    "packages/a/src/index.ts": 'export { synth } from "@anemll-qwen35/testkit";\n',
    "packages/b/package.json": {
      name: "@anemll-qwen35/b",
      devDependencies: { "@anemll-qwen35/testkit": "workspace:*" },
    },
    "packages/b/src/index.ts": 'import { synth } from "@anemll-qwen35/testkit";\nexport const b = synth;\n',
    "packages/b/tsup.config.ts": 'export default { noExternal: ["@anemll-qwen35/testkit"] };\n',
  });
  const r = check(root);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /@anemll-qwen35\/a: is public but src\/ imports the private @anemll-qwen35\/testkit/);
  assert.match(r.out, /@anemll-qwen35\/b: is public but src\/ imports the private @anemll-qwen35\/testkit/);
  assert.match(r.out, /@anemll-qwen35\/b: is public but bundles the private @anemll-qwen35\/testkit/);
});

test("reports an entry point that re-exports a module wholesale, and a name its README leaves out", () => {
  const root = workspace({
    "packages/a/package.json": {
      name: "@anemll-qwen35/a",
      exports: { ".": { source: "./src/index.ts" }, "./sub": { source: "./src/sub.ts" } },
    },
    "packages/a/README.md": "# a\n\n## API\n\n- `x`\n\n## Tests\n\n`Sub` is mentioned here only.\n",
    "packages/a/src/index.ts": 'export * from "./x.js";\nexport { x } from "./x.js";\n',
    "packages/a/src/sub.ts": 'export { type Sub } from "./x.js";\n',
    "packages/a/src/x.ts": "export const x = 1;\nexport type Sub = string;\n",
    "packages/b/package.json": { name: "@anemll-qwen35/b", exports: { ".": { source: "./src/index.ts" } } },
    "packages/b/README.md": "# b\n",
    "packages/b/src/index.ts": "export const b = 1;\n",
  });
  const r = check(root);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /@anemll-qwen35\/a: src\/index\.ts re-exports all of \.\/x\.js: list the names/);
  assert.match(
    r.out,
    /@anemll-qwen35\/a: README\.md's API section does not name Sub \(from @anemll-qwen35\/a\/sub\)/,
  );
  assert.match(r.out, /@anemll-qwen35\/b: README\.md has no "## API" section/);
});

test("reports a circle between packages", () => {
  const root = workspace({
    "packages/a/package.json": { name: "@anemll-qwen35/a", dependencies: { "@anemll-qwen35/b": "*" } },
    "packages/a/src/index.ts": 'export { b } from "@anemll-qwen35/b";\n',
    "packages/b/package.json": { name: "@anemll-qwen35/b", devDependencies: { "@anemll-qwen35/a": "*" } },
    "packages/b/src/index.ts": "export const b = 1;\n",
    "packages/b/test/b.test.ts": 'import "@anemll-qwen35/a";\n',
  });
  const r = check(root);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /package circle: @anemll-qwen35\/(a|b) → @anemll-qwen35\/(b|a) → @anemll-qwen35\/\1/);
});
