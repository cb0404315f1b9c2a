/**
 * Every scenario at a small scale (default smoke; `--scale full` for the full runs), results and
 * charts in packages/bench/results/. One scenario: `--only decode`.
 *
 *   pnpm --filter @anemll-qwen35/bench bench [-- --scale full] [-- --only ctx-sweep]
 */
import { runScenario, SCENARIOS, type Scale } from "../src/index.js";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const scale = (arg("--scale") ?? "smoke") as Scale;
const only = arg("--only");
const names = only ? only.split(",") : [...SCENARIOS];
let failed = 0;
for (const name of names) {
  const t0 = performance.now();
  try {
    const r = await runScenario(name, { scale, onLog: (l) => console.log(l) });
    console.log(
      `→ ${r.file} (+${r.charts.length} chart files) in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );
  } catch (err) {
    failed++;
    console.error(`${name} failed: ${(err as Error).stack ?? err}\n`);
  }
}
process.exitCode = failed ? 1 : 0;
