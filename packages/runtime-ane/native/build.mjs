// Builds the Core ML addon on macOS; everywhere else says plainly that it is skipped. Never fails
// the workspace build for lack of macOS: the reference backend serves there.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
if (process.platform !== "darwin") {
  console.log(
    `runtime-ane: Core ML addon skipped — it needs macOS 15 or later (this is ${process.platform}).`,
  );
  process.exit(0);
}
const cmakeJs = join(pkg, "node_modules", ".bin", "cmake-js");
const r = spawnSync(cmakeJs, ["compile", "--directory", pkg], { stdio: "inherit" });
process.exit(r.status ?? 1);
