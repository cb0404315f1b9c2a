/**
 * The k-means worker is a file of its own (dist/kmeans-worker.js): it must ship in the npm
 * tarball and start from an installed copy of the package, and from source under tsx and vitest
 * (src/kmeans-worker.ts).
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const pkg = resolve(__dirname, "..");
const work = mkdtempSync(join(tmpdir(), "converter-pack-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Palettizes a 2 Mi-element tensor on the main thread and on the pool; prints whether they agree. */
const SCRIPT = `
import { palettize } from "@anemll-qwen35/converter";
const w = new Float32Array(512 * 4096).map((_, i) => Math.round(Math.sin(i * 0.37) * 2000) / 65536);
const a = await palettize(w, [512, 4096], { bits: 4, workers: 1 });
const b = await palettize(w, [512, 4096], { bits: 4 });
console.log(JSON.stringify({ same: Buffer.from(a.indices).equals(Buffer.from(b.indices)) && Buffer.from(a.lut.buffer).equals(Buffer.from(b.lut.buffer)) }));
`;

describe("the k-means worker from source", () => {
  it("starts under tsx (as the benchmarks run) as it does under vitest", () => {
    const script = join(work, "from-source.mts");
    writeFileSync(
      script,
      SCRIPT.replace(
        '"@anemll-qwen35/converter"',
        JSON.stringify(pathToFileURL(join(pkg, "src/index.ts")).href),
      ),
    );
    const r = execFileSync(process.execPath, ["--import", "tsx", script], { cwd: pkg, encoding: "utf8" });
    expect(JSON.parse(r.trim().split("\n").at(-1) as string)).toEqual({ same: true });
  }, 60_000);
});

describe("the published package", () => {
  it("ships the k-means worker and runs it when installed from its tarball", () => {
    if (!existsSync(join(pkg, "dist", "kmeans-worker.js")))
      throw new Error("build the converter first (pnpm run build): the test packs dist/");
    const out = execFileSync("npm", ["pack", "--json", "--pack-destination", work], {
      cwd: pkg,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    const [{ filename, files }] = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
    expect(files.map((f) => f.path)).toContain("dist/kmeans-worker.js");
    // an installed layout: the tarball's contents under node_modules, ir next to it
    const modules = join(work, "app", "node_modules", "@anemll-qwen35");
    mkdirSync(join(modules, "converter"), { recursive: true });
    execFileSync("tar", [
      "-xzf",
      join(work, filename),
      "-C",
      join(modules, "converter"),
      "--strip-components=1",
    ]);
    symlinkSync(resolve(pkg, "../ir"), join(modules, "ir"));
    expect(readdirSync(join(modules, "converter"))).not.toContain("src");
    writeFileSync(join(work, "app", "check.mjs"), SCRIPT);
    const r = execFileSync(process.execPath, ["check.mjs"], { cwd: join(work, "app"), encoding: "utf8" });
    expect(JSON.parse(r.trim())).toEqual({ same: true });
  }, 60_000);
});
