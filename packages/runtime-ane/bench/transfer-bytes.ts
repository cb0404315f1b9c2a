/**
 * Bytes per decode token crossing between JS and the reference backend, counted by the backend,
 * beside what model.json allows (only hidden state, position, mask in; hidden state and logits
 * out) and what crossed when the host kept every state buffer and fed it back each step. On the
 * tiny fixtures (io and mlstate KV) and, with --08b, the synthetic 0.8B conversion that
 * bench/reference-decode.ts makes (real shapes, ctx 256, fully fused).
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/transfer-bytes.ts [--08b] [--steps 2]
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, homedir, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { argValue, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend, transferPerToken } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const STEPS = Number(argValue("--steps", "2"));
const cache = join(process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35"), "bench");
const work = mkdtempSync(join(tmpdir(), "transfer-bytes-"));

async function measure(name: string, dir: string) {
  const backend = referenceBackend();
  const model = await ChainRunner.load(dir, { backend });
  await model.prefill([1, 2, 3]);
  const a = backend.transfers();
  for (let i = 0; i < STEPS; i++) await model.decode(4 + i);
  const b = backend.transfers();
  model.dispose();
  const per = (x: number) => x / STEPS;
  const measured = {
    bytesIn: per(b.bytesIn - a.bytesIn),
    bytesOut: per(b.bytesOut - a.bytesOut),
    bytesKept: per(b.bytesKept - a.bytesKept),
    predictions: per(b.predictions - a.predictions),
  };
  const allowed = transferPerToken(model.manifest, "backend-keeps-state", 4);
  const hostHeld = transferPerToken(model.manifest, "host-keeps-state", 4);
  const crossing = measured.bytesIn + measured.bytesOut;
  const row = {
    model: name,
    state: model.manifest.state,
    ctx: model.manifest.ctx,
    components: model.manifest.components.length,
    measured,
    allowed,
    hostHeld,
    ratio: (hostHeld.bytesIn + hostHeld.bytesOut) / crossing,
  };
  console.log(
    `${name.padEnd(34)} ${row.state.padEnd(8)} crossing ${crossing.toLocaleString()} B/token ` +
      `(allowed ${(allowed.bytesIn + allowed.bytesOut).toLocaleString()}), kept ${measured.bytesKept.toLocaleString()} B; ` +
      `host-held state: ${(hostHeld.bytesIn + hostHeld.bytesOut).toLocaleString()} B (${row.ratio.toFixed(0)}×)`,
  );
  return row;
}

const rows = [];
const fixtures = resolve(here, "../../../fixtures");
for (const fixture of ["tiny-tied", "tiny-gqa", "tiny-trained"]) {
  for (const state of ["io", "mlstate"] as const) {
    const out = join(work, `${fixture}-${state}`);
    await convert({ model: join(fixtures, fixture), out, ctx: 128, fuse: 1, lmHeadMaxRows: 512, state });
    rows.push(await measure(`${fixture} (fixture, ctx 128, fuse 1)`, out));
  }
}
if (process.argv.includes("--08b")) {
  const dir = join(cache, "synthetic-0.8b-default-ctx256");
  if (!existsSync(join(dir, "model.json"))) {
    const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
    console.log("converting the synthetic 0.8B checkpoint…");
    await convert({ model: synth.dir, out: dir, ctx: 256, fuse: "all", resume: true });
  }
  rows.push(await measure("synthetic 0.8B (ctx 256, fused)", dir));
}
rmSync(work, { recursive: true, force: true });
const results = join(here, "results");
mkdirSync(results, { recursive: true });
const file = join(results, "transfer-bytes.json");
writeFileSync(
  file,
  `${JSON.stringify({ bench: "transfer-bytes", date: new Date().toISOString(), cpus: cpus().length, steps: STEPS, rows }, null, 2)}\n`,
);
console.log(`wrote ${file}`);
