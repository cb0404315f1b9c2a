import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";

const ROOT = resolve(__dirname, "../../..");
const work = scratchDir("models-readme-");

/** The first ```js block of a README that calls loadModel. */
function example(readme: string): string {
  const blocks = [...readFileSync(readme, "utf8").matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  const block = blocks.find((b) => b.includes("loadModel("));
  if (!block) throw new Error(`${readme} has no loadModel example`);
  return block;
}

describe("the README's loadModel example", () => {
  it.each(["README.md", "packages/models/README.md"])(
    "%s runs as written on this Node (on a converted fixture)",
    async (readme) => {
      const chain = join(work, readme.replace(/\W/g, "_"));
      await convert({ model: join(ROOT, "fixtures", "tiny-tied"), out: chain, ctx: 128 });
      const code = example(join(ROOT, readme)).replace('"qwen35-0.8b"', JSON.stringify(chain));
      // next to this package, so that "@anemll-qwen35/models" resolves to its built dist
      const file = join(__dirname, "..", `.readme-example-${process.pid}.mjs`);
      writeFileSync(file, code);
      try {
        const r = spawnSync(process.execPath, [file], { encoding: "utf8", timeout: timeLimit(120_000) });
        expect(r.stderr).toBe("");
        expect(r.status).toBe(0);
        expect(r.stdout).toMatch(/tok\/s \((reference|coreml) \(/);
      } finally {
        rmSync(file, { force: true });
      }
    },
    timeLimit(180_000),
  );
});
