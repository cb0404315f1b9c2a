/**
 * Converts every chain the full-scale sweeps need (synthetic 0.8B: ctx 128/256/512/1024 fully
 * fused, and fuse 1/2/3 at ctx 256) ahead of the runs, so a later `--scale full` run measures
 * instead of converting. Each conversion is cached; re-running skips the finished ones.
 *
 *   pnpm --filter @anemll-qwen35/bench exec tsx bench/prepare-full.ts
 */
import { ensureChain, scaleParams } from "../src/index.js";

const p = scaleParams("full");
const wanted = [
  ...p.ctxSweep.map((ctx) => ({ ctx, fuse: "all" as const })),
  ...p.fuseSweep.filter((f) => f !== "all").map((fuse) => ({ ctx: p.ctx, fuse })),
];
for (const w of wanted) {
  const t0 = performance.now();
  const r = await ensureChain(p.model, { ...w, body: p.body, lmHead: p.lmHead }, (l) => console.log(l));
  console.log(
    `${r.dir}: ${r.convertSeconds ? "converted" : "cached"} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
}
