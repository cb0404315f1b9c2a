// Builds the Core ML addon on macOS (the package's `build`, and `install` when installed from npm);
// everywhere else says plainly that it is skipped and exits 0: the reference backend and the
// static cost model serve.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
// In the repository the workspace build compiles it; `pnpm install` there has nothing to do.
if (process.argv.includes("--on-install") && existsSync(join(pkg, "..", "..", "pnpm-workspace.yaml")))
  process.exit(0);
if (process.platform !== "darwin") {
  console.log(
    `coreml: Core ML addon skipped — it needs macOS (15 or later to run models, 14.4 for MLComputePlan; this is ${process.platform}); the reference backend and the static cost model serve.`,
  );
  process.exit(0);
}
const cmakeJs = createRequire(import.meta.url).resolve("cmake-js/bin/cmake-js");
const r = spawnSync(process.execPath, [cmakeJs, "compile", "--directory", pkg], { stdio: "inherit" });
process.exit(r.status ?? 1);
