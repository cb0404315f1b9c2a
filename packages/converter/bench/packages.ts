/**
 * What the costplan benchmarks share: the synthetic 0.8B checkpoint, a cache folder under
 * ~/.cache/anemll-qwen35/bench/, and building one component into a package there (atomically,
 * once: an existing package is reused unless `rebuild`).
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { MlPackageWriter } from "@anemll-qwen35/ir/mil";
import type { WeightSource } from "../src/graph/index.js";
import { type BuildOptions, buildComponent, type ComponentSpec } from "../src/graph/index.js";

const here = dirname(fileURLToPath(import.meta.url));

/** `$ANEMLL_QWEN35_CACHE/bench/<name>` (else under ~/.cache/anemll-qwen35), created. */
export function benchCache(name: string): string {
  const root = process.env.ANEMLL_QWEN35_CACHE || join(homedir(), ".cache", "anemll-qwen35");
  const dir = join(root, "bench", name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * A short hash of the converter's graph and encoder sources (src/graph, src/quant, the build
 * options): packages built by other code are not reused. quant/policy.ts (the presets) is left
 * out: callers name packages by the rules they resolve to (shortHash), so a changed preset
 * rebuilds only what it changes.
 */
export function graphSourceHash(): string {
  const src = join(here, "..", "src");
  const h = createHash("sha256");
  const files = [
    ...["graph", "quant"].flatMap((d) => readdirSync(join(src, d)).map((f) => join(d, f))),
    "options.ts",
  ];
  for (const f of files.sort())
    if (f !== join("quant", "policy.ts")) h.update(f).update(readFileSync(join(src, f)));
  return h.digest("hex").slice(0, 10);
}

/** A short hash of any JSON value (e.g. a policy's resolved rules). */
export const shortHash = (value: unknown): string =>
  createHash("sha256").update(JSON.stringify(value)).digest("hex").slice(0, 8);

/** A graph builder with buildComponent's signature (this tree's, or an earlier converter's). */
export type ComponentBuilder = (
  source: WeightSource,
  spec: ComponentSpec,
  options: BuildOptions,
) => Promise<Pick<Awaited<ReturnType<typeof buildComponent>>, "model">>;

/** Builds `spec` of `source` into `file` unless it exists (or `rebuild`); returns `file`. */
export async function ensurePackage(
  source: WeightSource,
  file: string,
  spec: ComponentSpec,
  options: BuildOptions,
  rebuild = false,
  build: ComponentBuilder = buildComponent,
): Promise<string> {
  if (existsSync(file) && !rebuild) return file;
  mkdirSync(dirname(file), { recursive: true });
  const started = performance.now();
  const w = await MlPackageWriter.create(file); // written aside, renamed into place by finish()
  try {
    const built = await build(source, spec, { workers: 2, ...options, blobSink: w.blobs });
    await w.finish(built.model);
  } catch (e) {
    await w.abort();
    throw e;
  }
  console.log(`  built ${file} in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  return file;
}
