/**
 * Runs every benchmark of @anemll-qwen35/ir in turn (`pnpm --filter @anemll-qwen35/ir bench`).
 * Each writes its own JSON under bench/results/.
 */
import { interpreterSuperblockBench } from "./interpreter-superblock.js";
import { safetensorsReadBench } from "./safetensors-read.js";

const benches: [string, () => Promise<unknown>][] = [
  ["safetensors-read", () => safetensorsReadBench()],
  ["interpreter-superblock", () => interpreterSuperblockBench()],
];

for (const [name, run] of benches) {
  console.log(`== ${name}`);
  await run();
}
