/** The public names are the explicit list in src/index.ts, and the README's API section names each. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";

const read = (f: string) => readFileSync(join(import.meta.dirname, "..", f), "utf8");

it("src/index.ts is an explicit list, and README.md's API section names every entry", () => {
  const index = read("src/index.ts");
  expect(index).not.toMatch(/export \*/);
  const names = [...index.matchAll(/export (?:type )?\{([^}]*)\}/g)].flatMap((m) =>
    m[1]
      .split(",")
      .map((n) => n.replace(/^\s*type\s+/, "").trim())
      .filter(Boolean),
  );
  expect(names.length).toBeGreaterThan(50);
  const api = read("README.md").split("## API")[1]?.split("\n## ")[0] ?? "";
  const missing = names.filter((n) => !api.includes(`\`${n}`));
  expect(missing).toEqual([]);
});
