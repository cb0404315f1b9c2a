/**
 * What the prefill check costs at a chain's first load, and what it measures: per KV form, the
 * load that checks (placement of every function, one prefill call timed against T decode steps)
 * against the next load, which reads the recorded verdict; the verdict's prefill ms, decode ms
 * (median of T steps) and their per-token ratio; all in one run. On a Mac `--backend coreml` runs
 * the Core ML backend's own seam (MLComputePlan and the clock). The reference backend has no seam
 * (its ops run nowhere but here), so this script gives it one that times with the clock and reads
 * no placement (speed alone decides, as on a Mac without an ANE).
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/prefill-check.ts [--backend coreml] [--dir <chain>] [--runs 3]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { argValue } from "@anemll-qwen35/testkit";
import {
  type Backend,
  ChainRunner,
  coreMLBackend,
  type FunctionCheckSeam,
  referenceBackend,
} from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const which = argValue("--backend", "reference") as "reference" | "coreml";
const RUNS = Number(argValue("--runs", "3"));
const given = argValue("--dir", "");
const work = mkdtempSync(join(tmpdir(), "prefill-check-bench-"));

/** The reference backend with a clock seam: real timings, no placement (nothing to place on). */
function referenceWithClock(): Backend {
  const ref = referenceBackend({ precision: "fp16" });
  const functionCheck: FunctionCheckSeam = {
    machine: async () => ({ key: `reference fp16 · ${cpus()[0]?.model ?? "?"} · bench`, requireAne: false }),
    placement: async (_path, fn) => ({
      component: fn.component,
      function: fn.functionName,
      role: fn.role,
      ane: 0,
      cpu: 0,
      gpu: 0,
      unplaced: 0,
      offAne: [],
    }),
    async time(_what, run) {
      const t0 = performance.now();
      await run();
      return performance.now() - t0;
    },
  };
  return { ...ref, functionCheck };
}

const backend = () => (which === "coreml" ? coreMLBackend() : referenceWithClock());
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timedLoad(dir: string, mode: "recheck" | "recorded") {
  const t0 = performance.now();
  const m = await ChainRunner.load(dir, { backend: backend(), prefillCheck: mode });
  const ms = performance.now() - t0;
  const r = m.prefillCheck;
  m.dispose();
  return { ms, r };
}

const rows = [];
try {
  const chains: [string, string][] = given
    ? [["given", resolve(given)]]
    : await Promise.all(
        (["io", "mlstate"] as const).map(async (state): Promise<[string, string]> => {
          const out = join(work, state);
          // the default conversion's prefill function (64 tokens) and context
          await convert({ model: resolve(here, "../../../fixtures/tiny-trained"), out, state });
          return [`tiny-trained ${state}`, out];
        }),
      );
  for (const [name, dir] of chains) {
    const checked = [];
    const recorded = [];
    for (let i = 0; i < RUNS; i++) {
      checked.push(await timedLoad(dir, "recheck"));
      recorded.push(await timedLoad(dir, "recorded"));
    }
    const last = checked[checked.length - 1].r;
    const row = {
      chain: name,
      backend: which,
      runs: RUNS,
      firstLoadMs: median(checked.map((c) => c.ms)),
      recordedLoadMs: median(recorded.map((c) => c.ms)),
      T: last?.T,
      prefillMs: median(checked.map((c) => c.r?.prefillMs ?? Number.NaN)),
      decodeMs: median(checked.map((c) => c.r?.decodeMs ?? Number.NaN)),
      keep: last?.keep,
      reason: last?.reason,
      recordedSource: recorded[recorded.length - 1].r?.source,
    };
    const perToken = row.prefillMs / (row.T ?? 1);
    console.log(
      `${name.padEnd(20)} first load ${row.firstLoadMs.toFixed(0)} ms vs recorded ${row.recordedLoadMs.toFixed(0)} ms ` +
        `(check ≈ ${(row.firstLoadMs - row.recordedLoadMs).toFixed(0)} ms); prefill ${perToken.toFixed(2)} ms/token vs decode ` +
        `${row.decodeMs.toFixed(2)} ms/step (×${(row.decodeMs / perToken).toFixed(2)}); ${row.reason}`,
    );
    rows.push(row);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
const out = join(here, "results", `prefill-check-${which}.json`);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify({ createdAt: new Date().toISOString(), cpu: cpus()[0]?.model, cpus: cpus().length, rows }, null, 2)}\n`,
);
console.log(`wrote ${out}`);
