import { run } from "../src/program.js";

/** Runs the CLI in-process and captures what it prints. */
export async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await run(args, {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
  });
  return { code, stdout, stderr };
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
