// Builds the MLComputePlan addon on macOS; everywhere else says plainly that it is skipped. Never
// fails the workspace build for lack of macOS: the static cost model serves there.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
if (process.platform !== "darwin") {
  console.log(
    `costplan: MLComputePlan addon skipped — it needs macOS 14.4 or later (this is ${process.platform}); the static cost model serves.`,
  );
  process.exit(0);
}
const cmakeJs = join(pkg, "node_modules", ".bin", "cmake-js");
const r = spawnSync(cmakeJs, ["compile", "--directory", pkg], { stdio: "inherit" });
process.exit(r.status ?? 1);
