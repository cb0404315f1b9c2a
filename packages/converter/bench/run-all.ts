/** The converter's benchmarks, one after another (each writes its own bench/results/*.json). */
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
for (const script of ["palettize-vs-coremltools.ts", "convert-synthetic.ts"]) {
  console.log(`\n== ${script}`);
  const r = spawnSync(process.execPath, ["--import", "tsx", join(here, script), ...process.argv.slice(2)], {
    stdio: "inherit",
    cwd: join(here, ".."),
  });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
