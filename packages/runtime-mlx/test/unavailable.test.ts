/** Without the addon the package still loads and says why MLX is unavailable (runs everywhere). */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";

describe("when the addon is missing", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.resetModules();
  });

  it("mlxAvailable() reports the reason; ops throw MlxUnavailableError with the fix", async () => {
    vi.stubEnv("ANEMLL_MLX_ADDON", "/nonexistent/runtime_mlx.node");
    vi.resetModules();
    const pkg = await import("../src/index.js");
    const status = pkg.mlxAvailable();
    expect(status.available).toBe(false);
    expect(status.reason).toMatch(/not built \(no \/nonexistent\/runtime_mlx\.node\)/);
    expect(status.version).toBeUndefined();
    let caught: unknown;
    try {
      pkg.mx.zeros([2]);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(pkg.MlxUnavailableError);
    const error = caught as InstanceType<typeof pkg.MlxUnavailableError>;
    expect(error.code).toBe("E_MLX_UNAVAILABLE");
    expect(error.message).toMatch(/pip install "mlx\[cpu\]==0\.32\.4"/);
    // the fix names this copy's own build script (an npm user has no workspace to --filter)
    const script = /`node (\S+build\.mjs)`/.exec(error.message)?.[1];
    expect(script && existsSync(script)).toBe(true);
    expect(pkg.mx.isMxArray({})).toBe(false);
  });

  it("a file that is not a loadable addon is reported as a load failure", async () => {
    const dir = mkdtempSync(join(tmpdir(), "runtime-mlx-fake-"));
    const fake = join(dir, "runtime_mlx.node");
    writeFileSync(fake, "not a shared object");
    try {
      vi.stubEnv("ANEMLL_MLX_ADDON", fake);
      vi.resetModules();
      const pkg = await import("../src/index.js");
      const status = pkg.mlxAvailable();
      expect(status.available).toBe(false);
      expect(status.reason).toMatch(/failed to load/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
