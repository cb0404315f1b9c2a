/**
 * Result files: validated against the schema before they are written (atomically), read back with
 * the same schema, and named `<scenario>-<date>-<hhmmss>.json` (UTC start time;
 * `<scenario>-smoke-…` at smoke scale) so that every run keeps its own file and the two scales never
 * collide.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "@anemll-qwen35/ir/checkpoint";
import { BenchResultError } from "./errors.js";
import { type BenchResult, benchResultSchema } from "./schema.js";

export function resultStem(r: Pick<BenchResult, "scenario" | "scale" | "startedAt">): string {
  // 2026-12-01T10:22:33.456Z → 2026-12-01-102233
  const when = `${r.startedAt.slice(0, 10)}-${r.startedAt.slice(11, 19).replaceAll(":", "")}`;
  return r.scale === "smoke" ? `${r.scenario}-smoke-${when}` : `${r.scenario}-${when}`;
}

/** packages/bench/results in the repository; ./bench-results elsewhere (an installed package). */
export function defaultResultsDir(): string {
  const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
  if (existsSync(join(pkg, "..", "..", "pnpm-workspace.yaml"))) return join(pkg, "results");
  return join(process.cwd(), "bench-results");
}

export function validateResult(doc: unknown, file = "<result>"): BenchResult {
  const parsed = benchResultSchema.safeParse(doc);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
      .join("; ");
    throw new BenchResultError(file, `does not match the bench result schema: ${issues}`);
  }
  return parsed.data;
}

/** Writes `result` into `dir` as `<stem>.json` (default: its own stem). */
export async function writeResult(
  dir: string,
  result: BenchResult,
  stem = resultStem(result),
): Promise<string> {
  const file = join(dir, `${stem}.json`);
  validateResult(result, file);
  await writeFileAtomic(file, `${JSON.stringify(result, null, 2)}\n`);
  return file;
}

export async function readResult(file: string): Promise<BenchResult> {
  let doc: unknown;
  try {
    doc = JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    throw new BenchResultError(file, `cannot read JSON (${(err as Error).message})`);
  }
  return validateResult(doc, file);
}
