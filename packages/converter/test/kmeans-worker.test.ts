/**
 * The k-means worker is a file of its own: src/kmeans-worker.ts from source (under vitest:
 * palettize.test.ts; under tsx: here), dist/kmeans-worker.js when built (the pack-and-install
 * test, scripts/pack-install.mjs, runs it from the npm tarball).
 */
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { workerExecArgv } from "../src/quant/kmeans-pool.js";

const pkg = resolve(__dirname, "..");
const work = scratchDir("kmeans-worker-");

/** Palettizes a 2 Mi-element tensor on the main thread and on the pool; prints whether they agree. */
const SCRIPT = `
import { palettize } from ${JSON.stringify(pathToFileURL(join(pkg, "src/index.ts")).href)};
const w = new Float32Array(512 * 4096).map((_, i) => Math.round(Math.sin(i * 0.37) * 2000) / 65536);
const a = await palettize(w, [512, 4096], { bits: 4, workers: 1 });
const b = await palettize(w, [512, 4096], { bits: 4 });
console.log(JSON.stringify({ same: Buffer.from(a.indices).equals(Buffer.from(b.indices)) && Buffer.from(a.lut.buffer).equals(Buffer.from(b.lut.buffer)) }));
`;

describe("the k-means worker from source", () => {
  it(
    "starts under tsx (as the benchmarks run) as it does under vitest",
    () => {
      const script = join(work, "from-source.mts");
      writeFileSync(script, SCRIPT);
      const r = execFileSync(process.execPath, ["--import", "tsx", script], { cwd: pkg, encoding: "utf8" });
      expect(JSON.parse(r.trim().split("\n").at(-1) as string)).toEqual({ same: true });
    },
    timeLimit(60_000),
  );
});

describe("worker options", () => {
  it("drops the inline script of node -e/-p and its --input-type, keeps the rest", () => {
    expect(
      workerExecArgv(["--input-type=module", "-e", "console.log(await 1)", "--conditions", "source"]),
    ).toEqual(["--conditions", "source"]);
    expect(workerExecArgv(["--max-old-space-size=4096", "-p", "1 + 1", "--eval=2"])).toEqual([
      "--max-old-space-size=4096",
    ]);
  });
});
