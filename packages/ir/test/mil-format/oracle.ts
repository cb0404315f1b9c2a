/**
 * Test-side access to coremltools (Python). When it is unavailable, tests skip with the reason —
 * except under CI (process.env.CI set), where a missing oracle is a failure.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { findCoremltoolsPython } from "../testkit.js";

const ORACLE = fileURLToPath(new URL("./coremltools_oracle.py", import.meta.url));

export type Availability = { available: true } | { available: false; reason: string };

/** Skips the running test (or fails under CI) when coremltools is unavailable. */
export function requireAvailable(ctx: { skip: (note?: string) => void }, a: Availability): void {
  if (a.available) return;
  if (process.env.CI) throw new Error(`coremltools is required under CI but unavailable: ${a.reason}`);
  ctx.skip(`coremltools unavailable: ${a.reason}`);
}

export interface OracleRequest {
  schema?: boolean;
  readBlobs?: { file: string; items: { dtype: string; offset: number }[] };
  writeBlobs?: { file: string; items: { dtype: string; values: number[] }[] };
  makePackage?: string;
}

export interface OracleAnswer {
  schema?: {
    messages: Record<string, Record<string, number>>;
    enums: Record<string, Record<string, number>>;
  };
  readBlobs?: number[][];
  writeBlobs?: number[];
  makePackage?: { w: number[]; indices: number[]; lut: number[] };
}

/** Runs test/mil-format/coremltools_oracle.py once with a combined request. */
export async function runOracle(
  req: OracleRequest,
): Promise<({ available: true } & OracleAnswer) | { available: false; reason: string }> {
  const found = findCoremltoolsPython();
  if ("reason" in found) return { available: false, reason: found.reason };
  return new Promise((done, fail) => {
    const child = spawn(found.python, [ORACLE], { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      out += s;
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      err = (err + s).slice(-5000);
    });
    child.on("error", (e) => done({ available: false, reason: `cannot run ${found.python}: ${e.message}` }));
    child.on("close", (code) => {
      if (code !== 0) {
        if (/No module named 'coremltools'|No module named 'numpy'/.test(err)) {
          done({ available: false, reason: err.trim().split("\n").pop() ?? "import failed" });
          return;
        }
        fail(new Error(`coremltools oracle failed (exit ${code}): ${err}`));
        return;
      }
      done({ available: true, ...(JSON.parse(out) as OracleAnswer) });
    });
    child.stdin.end(JSON.stringify(req));
  });
}
