#!/usr/bin/env node
// Builds the MLX addon with cmake-js when an installed MLX 0.32.x can be found; otherwise says plainly
// why it is skipped and how to fix it, and exits 0 so that `npm install`, `pnpm install` and
// `turbo run build` never fail for lack of MLX. A real compile error still fails the build.
// Runs as the package's `build` in the repository and as its `install` when installed from npm
// (`--on-install`; MLX is found from MLX_ROOT, ANEMLL_PYTHON or python3 — see INSTALL_HINT).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const PKG_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const REPO_ROOT = resolve(PKG_DIR, "../..");
const WANT_MINOR = "0.32";
const INSTALL_HINT = [
  `  Linux:  pip install "mlx[cpu]==0.32.4"   (the mlx-cpu wheel carries libmlx.so, headers and CMake config)`,
  "  macOS:  pip install mlx==0.32.4          (brings mlx-metal)",
  "  Then rebuild with MLX_ROOT=<site-packages>/mlx, or ANEMLL_PYTHON=<python with mlx>, or a repo .venv.",
].join("\n");

function say(message) {
  console.log(`[runtime-mlx] ${message}`);
}

function skip(reason) {
  say(`native addon NOT built: ${reason}`);
  say(`The TypeScript package still builds; MLX features report MlxUnavailableError.\n${INSTALL_HINT}`);
  process.exit(0);
}

/** The MLX install prefix (<site-packages>/mlx), or undefined, with where it came from. */
function locateMlx() {
  if (process.env.MLX_ROOT) return { prefix: process.env.MLX_ROOT, via: "MLX_ROOT" };
  const candidates = [];
  if (process.env.ANEMLL_PYTHON) candidates.push(process.env.ANEMLL_PYTHON);
  const venvPython = join(REPO_ROOT, ".venv/bin/python");
  if (existsSync(venvPython)) candidates.push(venvPython);
  candidates.push("python3");
  for (const python of candidates) {
    try {
      // `mlx` is a namespace package in the backend wheels: use __path__, not __file__.
      const out = execFileSync(python, ["-c", "import mlx; print(list(mlx.__path__)[0])"], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim();
      if (out && existsSync(join(out, "share/cmake/MLX/MLXConfig.cmake")))
        return { prefix: out, via: python };
    } catch {
      // try the next interpreter
    }
  }
  return undefined;
}

/** MLX version from the installed headers (mlx/version.h), e.g. "0.32.4". */
function headerVersion(prefix) {
  const file = join(prefix, "include/mlx/version.h");
  if (!existsSync(file)) return undefined;
  const text = readFileSync(file, "utf8");
  const part = (name) => text.match(new RegExp(`#define\\s+MLX_VERSION_${name}\\s+(\\d+)`))?.[1];
  const [major, minor, patch] = [part("MAJOR"), part("MINOR"), part("PATCH")];
  return major && minor && patch ? `${major}.${minor}.${patch}` : undefined;
}

// In the repository the workspace build compiles it; `pnpm install` there has nothing to do.
if (process.argv.includes("--on-install") && existsSync(join(REPO_ROOT, "pnpm-workspace.yaml")))
  process.exit(0);
if (process.env.ANEMLL_SKIP_NATIVE === "1") skip("ANEMLL_SKIP_NATIVE=1 is set");

const mlx = locateMlx();
if (!mlx) skip("MLX is not installed (no MLX_ROOT, and no Python with the `mlx` package and its C++ SDK)");
if (!existsSync(join(mlx.prefix, "share/cmake/MLX/MLXConfig.cmake"))) {
  skip(
    `MLX_ROOT=${mlx.prefix} has no share/cmake/MLX/MLXConfig.cmake (on Linux install mlx[cpu], not mlx alone)`,
  );
}
const version = headerVersion(mlx.prefix);
if (!version?.startsWith(`${WANT_MINOR}.`)) {
  skip(
    `found MLX ${version ?? "(unknown version)"} at ${mlx.prefix}, but runtime-mlx needs MLX ${WANT_MINOR}.x`,
  );
}
if (spawnSync("cmake", ["--version"], { stdio: "ignore" }).status !== 0) {
  skip("cmake is not on PATH (install cmake >= 3.25 and a C++20 compiler)");
}

say(`building against MLX ${version} at ${mlx.prefix} (found via ${mlx.via})`);
let cmakeJs;
try {
  cmakeJs = createRequire(import.meta.url).resolve("cmake-js/bin/cmake-js");
} catch {
  skip("cmake-js is not installed (it is a dependency of this package: reinstall it)");
}
const jobs = process.env.CMAKE_BUILD_PARALLEL_LEVEL ?? "2";
const started = Date.now();
// `build` configures only when needed, then builds incrementally (cmake-js picks Ninja when present).
const result = spawnSync(
  process.execPath,
  [cmakeJs, "build", "--out", "build", "--parallel", jobs, `--CDMLX_ROOT=${mlx.prefix}`],
  { cwd: PKG_DIR, stdio: "inherit" },
);
if (result.status !== 0) {
  console.error(`[runtime-mlx] native build FAILED (exit ${result.status}); see the compiler output above.`);
  process.exit(result.status ?? 1);
}
say(`native addon built in ${((Date.now() - started) / 1000).toFixed(1)} s: build/Release/runtime_mlx.node`);
