/**
 * The CLI as users run it: the built bin, `node apps/cli/dist/cli.js`, in a child process, over the
 * built dist/ of every package, so a file missing from a build fails a test. (The sources' own
 * checks are the packages' tests; here only a command's output and exit code are seen, as a user
 * sees them.)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { constants } from "node:os";
import { resolve } from "node:path";

export const CLI = resolve(import.meta.dirname, "../dist/cli.js");

export interface CliOptions {
  /** Written to stdin, which is then closed (default: stdin closed at once). */
  input?: string;
  /** Added to (or, as undefined, removed from) the environment. */
  env?: Record<string, string | undefined>;
  cwd?: string;
}

export interface CliResult {
  /** The exit code; 128 + the signal's number if a signal ended the process. */
  code: number;
  stdout: string;
  stderr: string;
}

/** A running CLI process (serve, launch): its output so far, and its end. */
export interface CliProcess {
  readonly child: ChildProcess;
  output(): { stdout: string; stderr: string };
  /** Resolves when the output matches `pattern` (fails if the process ends first). */
  waitFor(pattern: RegExp, stream?: "stdout" | "stderr"): Promise<RegExpExecArray>;
  readonly exited: Promise<CliResult>;
}

/** Processes still running when the test process exits are killed, so none outlives a failed test. */
const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of running) c.kill("SIGKILL");
});

/** Starts the built CLI with `args`. */
export function startCli(args: readonly string[], o: CliOptions = {}): CliProcess {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build the CLI first (pnpm run build)`);
  // a key in the developer's environment would make `serve` demand one in every test
  const env: NodeJS.ProcessEnv = { ...process.env, ANEMLL_API_KEY: undefined, ...o.env };
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  const child = spawn(process.execPath, [CLI, ...args], { cwd: o.cwd, env, stdio: ["pipe", "pipe", "pipe"] });
  running.add(child);
  let stdout = "";
  let stderr = "";
  const listeners = new Set<() => void>();
  const changed = () => {
    for (const l of listeners) l();
  };
  child.stdout?.on("data", (d) => {
    stdout += d;
    changed();
  });
  child.stderr?.on("data", (d) => {
    stderr += d;
    changed();
  });
  child.stdin?.on("error", () => {}); // a command that exits before reading its input
  child.stdin?.end(o.input);
  const exited = new Promise<CliResult>((ok, fail) => {
    child.on("error", fail);
    child.on("close", (code, signal) => {
      running.delete(child);
      const bySignal = signal ? 128 + constants.signals[signal] : undefined;
      ok({ code: code ?? bySignal ?? -1, stdout, stderr });
      changed();
    });
  });
  return {
    child,
    output: () => ({ stdout, stderr }),
    exited,
    waitFor(pattern, stream = "stdout") {
      return new Promise((ok, fail) => {
        const check = () => {
          const m = pattern.exec(stream === "stdout" ? stdout : stderr);
          if (m) {
            listeners.delete(check);
            ok(m);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            listeners.delete(check);
            fail(new Error(`the CLI ended before printing ${pattern}:\n${stdout}\n${stderr}`));
          }
        };
        listeners.add(check);
        check();
      });
    },
  };
}

/** Runs the built CLI to its end. */
export function runCli(args: readonly string[], o: CliOptions = {}): Promise<CliResult> {
  return startCli(args, o).exited;
}

/** `anemll-qwen35 ...args`, run to its end. */
export function cli(...args: string[]): Promise<CliResult> {
  return runCli(args);
}

/** False (and the test skipped, saying why) without the MLX addon; in CI, where MLX is required, it throws. */
export async function mlxOrSkip(ctx: { skip: (note: string) => void }): Promise<boolean> {
  const { mlxAvailable } = await import("@anemll-qwen35/runtime-mlx");
  const mlx = mlxAvailable();
  if (mlx.available) return true;
  if (process.env.CI) throw new Error(`MLX is required in CI: ${mlx.reason}`);
  ctx.skip(`MLX unavailable: ${mlx.reason}`);
  return false;
}
