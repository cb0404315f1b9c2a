/**
 * Runs coremltools (Python) over written packages as an independent validator:
 * tools/oracle/validate_mlpackage.py checks the package layout, parses the Model and rebuilds
 * every op with coremltools' own type inference. One Python process validates many packages.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

export interface CoremltoolsVerdict {
  readonly path: string;
  readonly ok: boolean;
  /** coremltools' error, e.g. "AssertionError: Mismatch between var types in specification vs PyMIL". */
  readonly error: string | null;
}

export type CoremltoolsValidation =
  | {
      readonly available: true;
      readonly coremltools: string;
      readonly verdicts: readonly CoremltoolsVerdict[];
    }
  | { readonly available: false; readonly reason: string };

export interface ValidateWithCoremltoolsOptions {
  /** Python with coremltools; default $ANEMLL_PYTHON, else <repo>/.venv/bin/python found from `cwd` upwards. */
  python?: string;
  /** The validator script; default <repo>/tools/oracle/validate_mlpackage.py found from `cwd` upwards. */
  script?: string;
  /** Where to start looking for the repository. Default process.cwd(). */
  cwd?: string;
  /** Kill the validator after this long. Default 5 minutes. */
  timeoutMs?: number;
}

const SCRIPT = join("tools", "oracle", "validate_mlpackage.py");

function findUp(start: string, relativePath: string): string | undefined {
  let dir = resolve(start);
  for (;;) {
    const candidate = join(dir, relativePath);
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/**
 * The Python interpreter (and validator script) to use: `python` option, else $ANEMLL_PYTHON, else
 * <repo>/.venv/bin/python found by walking up from `cwd`. Whether coremltools imports is only known
 * when it runs.
 */
export function findCoremltoolsPython(
  options: Pick<ValidateWithCoremltoolsOptions, "python" | "script" | "cwd"> = {},
): { python: string; script: string } | { reason: string } {
  const cwd = options.cwd ?? process.cwd();
  const script = options.script ?? findUp(cwd, SCRIPT);
  if (!script) return { reason: `${SCRIPT} not found above ${cwd}` };
  const venvPython =
    process.platform === "win32" ? join(".venv", "Scripts", "python.exe") : join(".venv", "bin", "python");
  const python = options.python ?? process.env.ANEMLL_PYTHON ?? findUp(cwd, venvPython);
  if (!python)
    return { reason: `no Python: set ANEMLL_PYTHON or create ${venvPython} with coremltools (tools/oracle)` };
  return { python, script };
}

/**
 * Validates packages with coremltools. Reports `available: false` (with the reason) when Python,
 * coremltools or the validator script cannot be found; otherwise one verdict per path, in order.
 */
export async function validateWithCoremltools(
  paths: readonly string[],
  options: ValidateWithCoremltoolsOptions = {},
): Promise<CoremltoolsValidation> {
  const found = findCoremltoolsPython(options);
  if ("reason" in found) return { available: false, reason: found.reason };
  const { python, script } = found;
  if (paths.length === 0) return { available: true, coremltools: "", verdicts: [] };

  const { code, stdout, stderr, spawnError } = await new Promise<{
    code: number | null;
    stdout: string;
    stderr: string;
    spawnError?: Error;
  }>((done) => {
    const child = spawn(python, [script, ...paths], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      out += s;
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      err = (err + s).slice(-20_000);
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 300_000);
    child.on("error", (e) => {
      clearTimeout(timer);
      done({ code: null, stdout: out, stderr: err, spawnError: e });
    });
    child.on("close", (c) => {
      clearTimeout(timer);
      done({ code: c, stdout: out, stderr: err });
    });
  });
  if (spawnError) return { available: false, reason: `cannot run ${python}: ${spawnError.message}` };

  const lines = stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const unavailable = lines.find((l) => typeof l.unavailable === "string");
  if (code === 3 || unavailable) {
    return {
      available: false,
      reason: String(unavailable?.unavailable ?? `validator exited with 3: ${stderr.slice(-500)}`),
    };
  }
  let version = "";
  const byPath = new Map<string, CoremltoolsVerdict>();
  for (const l of lines) {
    if (typeof l.path !== "string") continue;
    version = String(l.coremltools ?? version);
    byPath.set(l.path, {
      path: l.path,
      ok: l.ok === true,
      error: typeof l.error === "string" ? l.error : null,
    });
  }
  const verdicts = paths.map(
    (p) =>
      byPath.get(p) ?? {
        path: p,
        ok: false,
        error: `the validator gave no verdict (exit code ${code}); stderr: ${stderr.slice(-500)}`,
      },
  );
  return { available: true, coremltools: version, verdicts };
}
