// Prints what a fresh setup installed: toolchain versions, workspace packages and the Python venv.
// Until the CLI's `demo` lands this is the main job of the README's first command.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const run = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "not found";
  }
};

console.log("anemll-qwen35 — installed toolchain");
console.log(`  node      ${process.version}`);
console.log(`  pnpm      ${run("pnpm", ["--version"])}`);
console.log(`  python    ${run("python3", ["--version"])}`);
console.log(`  cmake     ${run("cmake", ["--version"]).split("\n")[0]}`);
console.log("workspace packages");
for (const dir of ["packages", "apps"]) {
  const base = join(root, dir);
  if (!existsSync(base)) continue;
  for (const name of readdirSync(base)) {
    const pj = join(base, name, "package.json");
    if (!existsSync(pj)) continue;
    const pkg = JSON.parse(readFileSync(pj, "utf8"));
    const built = existsSync(join(base, name, "dist")) ? "built" : "not built";
    console.log(`  ${pkg.name.padEnd(30)} ${pkg.version.padEnd(8)} ${built}`);
  }
}
const py = join(root, ".venv", "bin", "python");
console.log("python .venv (tools/oracle/requirements-ci.txt)");
if (existsSync(py)) {
  const probe =
    "import importlib.metadata as m\nfor p in ['coremltools','mlx','mlx-cpu','numpy','safetensors']:\n" +
    "  try: print(f'{p:<12} {m.version(p)}')\n  except Exception: print(f'{p:<12} missing')";
  for (const line of run(py, ["-c", probe]).split("\n")) console.log(`  ${line}`);
} else {
  console.log("  missing: run `bash scripts/setup.sh`");
}
