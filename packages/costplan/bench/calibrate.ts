/**
 * Calibration: the cost model's projections beside measured Mac results, and the fit of the three
 * figures the physics leaves free — the per-prediction dispatch overhead (ms), the fraction of
 * anemll-bench's ANE weight-streaming bandwidth that real graphs attain, and the cost of passing a
 * prediction's inputs and outputs (ms per MB; what makes io KV grow with ctx).
 *
 *   pnpm --filter @anemll-qwen35/costplan calibrate [--packages DIR] [--no-9b]     (≈1–3 min)
 *
 * --packages DIR: the converter's packages of the synthetic 0.8B (real shapes; costs do not depend
 * on weight values), written by `pnpm --filter @anemll-qwen35/converter exec tsx
 * bench/calibration-packages.ts`: embed, lm_head-lut6, lm_head-lut4, sb1-ctx256, sb1-ctx1024,
 * sb2-ctx1024, sb6-ctx256 (.mlpackage). Without it: the SHAPE-ACCURATE STAND-INS of
 * bench/qwen35-standin.ts (their KV and GDN state are Core ML states, so they pass almost no I/O).
 *
 * Measured (Mac mini M4 Pro, Qwen3.5-0.8B, KV and GDN state as prediction inputs/outputs, LUT4 body;
 * the project's brief and ane-toolchains.md §4.3):
 *   unfused chain at ctx 1024 (LUT6 head assumed) ............... 49.2 tok/s
 *   all super-blocks fused at ctx 256, LUT4 head ................. 66.7 tok/s
 *   one super-block per package (ctx 1024 assumed) ............... 3.60 ms per super-block
 *   two super-blocks fused in one package (ctx 1024 assumed) ..... 2.11 ms per super-block
 *   one super-block at ctx 256 (one per package assumed) ......... 2.41 ms
 *   one super-block at ctx 1024 — HELD OUT: predicted by the fit on the five above, never fitted . 3.19 ms
 * Not fitted (9B stand-ins; a different Obj-C harness): 9B super-block 6.64 ms p50, 9B LUT6 lm_head
 * 7.38 ms, 9B end-to-end 11.39 tok/s.
 *
 * Fit: src/fit.ts's fitCalibration — the same code `anemll-qwen35 costplan calibrate --from` runs —
 * on these rows, written first as a measurements file (bench/results/study-measurements.json, so
 * `costplan calibrate --from` reproduces this fit). Also: each fitted row predicted from a fit on
 * the other four (leave-one-out), the model without the I/O and ctx terms for comparison, and the
 * ctx sweep the fit projects for one 0.8B super-block (ctx 128 … 4096).
 * Writes bench/results/calibration.json (a calibration file `--calibration` takes); copy its
 * figures into src/calibration.ts (a test compares).
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type MlModel, readMlPackage } from "@anemll-qwen35/ir/mil";
import { calibrationFile } from "../src/fit.js";
import {
  type CalibrationSample,
  CHIPS,
  type ChainInput,
  type CostReport,
  costplan,
  fitCalibration,
  MEASUREMENTS_SCHEMA,
  samplesFromReport,
} from "../src/index.js";
import { writeJsonAtomic } from "../src/units.js";
import { buildLmHead, buildStandInChain, buildSuperBlocks, QWEN35_9B, QWEN35_08B } from "./qwen35-standin.js";

const chip = CHIPS["m4-pro"];
const here = dirname(fileURLToPath(import.meta.url));
const argValue = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0
    ? process.argv[i + 1]
    : process.argv.find((a) => a.startsWith(`${name}=`))?.slice(name.length + 1);
};
const packagesDir = argValue("--packages");
const with9b = !process.argv.includes("--no-9b");

type Metric = "msPerToken" | "packageMs" | "packageMsPerSuperBlock";
type Program = ChainInput | MlModel;

interface Scenario {
  readonly id: string;
  readonly what: string;
  readonly measured: number;
  readonly unit: "tok/s" | "ms";
  readonly metric: Metric;
  /** Super-blocks in the package (packageMsPerSuperBlock). */
  readonly perSuperBlock?: number;
  readonly assumption: string;
  /** "fit": in the fit; "held-out": predicted by the fit, never in it; "reference": not fitted (9B). */
  readonly role: "fit" | "held-out" | "reference";
  readonly build: () => Promise<Program>;
  report?: CostReport;
}

/** The converter's packages (read once each) or the stand-ins. */
const loaded = new Map<string, Promise<MlModel>>();
const pkg = (file: string) => {
  if (!packagesDir) throw new Error("unreachable");
  const path = join(packagesDir, `${file}.mlpackage`);
  if (!loaded.has(path)) loaded.set(path, readMlPackage(path));
  return loaded.get(path) as Promise<MlModel>;
};
/** embed → 6/sbCount copies of one super-block package → lm_head (identical packages cost the same). */
async function chain08(sb: string, sbCount: number, head: 4 | 6, name: string): Promise<ChainInput> {
  const model = await pkg(sb);
  return {
    name,
    components: [
      { name: "embed", model: await pkg("embed") },
      ...Array.from({ length: 6 / sbCount }, (_, i) => ({ name: `sb${i}`, model })),
      { name: "lm_head", model: await pkg(`lm_head-lut${head}`) },
    ],
  };
}
/** A 0.8B program: the converter's packages with --packages, else the stand-in. */
const real08 = (file: () => Promise<Program>, standIn: () => Program) =>
  packagesDir ? file : async () => standIn();

/** A 0.8B package of `superBlocks` super-blocks at `ctx`, in ms per super-block. */
function superBlockScenario(
  s: Pick<Scenario, "id" | "what" | "measured" | "assumption" | "role"> & {
    superBlocks: number;
    ctx: number;
  },
): Scenario {
  const { superBlocks: n, ctx, ...rest } = s;
  return {
    ...rest,
    unit: "ms",
    metric: "packageMsPerSuperBlock",
    perSuperBlock: n,
    build: real08(
      () => pkg(`sb${n}-ctx${ctx}`),
      () => buildSuperBlocks(QWEN35_08B, 0, n, ctx),
    ),
  };
}

const SCENARIOS: Scenario[] = [
  {
    id: "unfused-ctx1024",
    what: "0.8B unfused chain, ctx 1024 (embed + 6 × 1-SB + lm_head)",
    measured: 49.2,
    unit: "tok/s",
    metric: "msPerToken",
    assumption: "lm_head LUT6 split 16 (ANEMLL's default head; not stated with the measurement)",
    role: "fit",
    build: real08(
      () => chain08("sb1-ctx1024", 1, 6, "0.8b unfused ctx1024"),
      () => buildStandInChain(QWEN35_08B, { fuse: 1, ctx: 1024, headBits: 6 }),
    ),
  },
  {
    id: "fused-all-ctx256-lut4",
    what: "0.8B all 6 SBs fused, ctx 256, LUT4 head (embed + 1 + lm_head)",
    measured: 66.7,
    unit: "tok/s",
    metric: "msPerToken",
    assumption: "one package holds all 24 layers",
    role: "fit",
    build: real08(
      () => chain08("sb6-ctx256", 6, 4, "0.8b fused ctx256"),
      () => buildStandInChain(QWEN35_08B, { fuse: 6, ctx: 256, headBits: 4 }),
    ),
  },
  superBlockScenario({
    id: "one-sb-package",
    what: "0.8B one super-block per package (ms per SB)",
    measured: 3.6,
    superBlocks: 1,
    ctx: 1024,
    assumption: "ctx 1024 (not stated with the measurement)",
    role: "fit",
  }),
  superBlockScenario({
    id: "two-sb-package",
    what: "0.8B two super-blocks fused in one package (ms per SB)",
    measured: 2.11,
    superBlocks: 2,
    ctx: 1024,
    assumption: "ctx 1024 (not stated with the measurement)",
    role: "fit",
  }),
  superBlockScenario({
    id: "sb-ctx256",
    what: "0.8B per-SB latency at ctx 256 (ane-toolchains.md §4.3)",
    measured: 2.41,
    superBlocks: 1,
    ctx: 256,
    assumption: "one SB per package; third-party quote of notes/small_model_0_8b.md",
    role: "fit",
  }),
  superBlockScenario({
    id: "sb-ctx1024",
    what: "0.8B per-SB latency at ctx 1024 (ane-toolchains.md §4.3) — held out",
    measured: 3.19,
    superBlocks: 1,
    ctx: 1024,
    assumption: "one SB per package; third-party quote of notes/small_model_0_8b.md",
    role: "held-out",
  }),
  ...(with9b
    ? ([
        {
          id: "ref-9b-sb",
          what: "reference: 9B super-block 0, p50 from Obj-C (flash-moe ane_bench/README.md)",
          measured: 6.64,
          unit: "ms",
          metric: "packageMs",
          assumption: "stand-in, ctx 1024 assumed; a different (Obj-C) harness than the 0.8B numbers",
          role: "reference",
          build: async () => buildSuperBlocks(QWEN35_9B, 0, 1, 1024),
        },
        {
          id: "ref-9b-head",
          what: "reference: 9B LUT6 lm_head split 16, ms per token (ane-toolchains.md §4.3)",
          measured: 7.38,
          unit: "ms",
          metric: "packageMs",
          assumption: "stand-in; one package, 16 outputs",
          role: "reference",
          build: async () => buildLmHead(QWEN35_9B, 6),
        },
        {
          id: "ref-9b-chain",
          what: "reference: 9B end-to-end with full KV cache (flash-moe offload-scoping doc)",
          measured: 11.39,
          unit: "tok/s",
          metric: "msPerToken",
          assumption: "stand-in: 8 × 1-SB packages, ctx 1024, LUT6 head; Python harness",
          role: "reference",
          build: async () => buildStandInChain(QWEN35_9B, { fuse: 1, ctx: 1024, headBits: 6 }),
        },
      ] satisfies Scenario[])
    : []),
];

/** The measured value in ms (tok/s → ms per token). */
const measuredMs = (s: Scenario) => (s.unit === "tok/s" ? 1000 / s.measured : s.measured);
const toUnit = (s: Scenario, ms: number) => (s.unit === "tok/s" ? 1000 / ms : ms);

/** The scenario as a measurement: every package once (a chain's token) or the one package per SB. */
function sampleOf(s: Scenario, r: CostReport): CalibrationSample {
  return samplesFromReport(r, {
    id: s.id,
    what: `${s.what} — ${s.assumption}`,
    measuredMs: measuredMs(s),
    divisor: s.metric === "packageMsPerSuperBlock" ? (s.perSuperBlock ?? 1) : undefined,
    role: s.role,
    packages: s.metric === "msPerToken" ? undefined : [r.packages[0].name],
  });
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
const pct = (e: number | undefined) =>
  e === undefined ? "—" : `${e >= 0 ? "+" : ""}${(e * 100).toFixed(1)}%`;

async function main(): Promise<void> {
  const t0 = performance.now();
  console.log("costplan calibration — Mac mini M4 Pro measurements vs the static model");
  console.log(
    packagesDir
      ? `programs: the converter's packages in ${packagesDir} (0.8B); stand-ins for the 9B rows\n`
      : "programs: SHAPE-ACCURATE STAND-INS built with MilBuilder (bench/qwen35-standin.ts), not converter output\n",
  );
  for (const s of SCENARIOS) {
    const t = performance.now();
    s.report = await costplan(await s.build(), { chip: "m4-pro", calibration: "none", native: "off" });
    console.log(`  built + analysed ${s.id} in ${((performance.now() - t) / 1000).toFixed(1)} s`);
  }
  const samples = SCENARIOS.map((s) => sampleOf(s, s.report as CostReport));
  const dir = join(here, "results");
  const measurementsFile = join(dir, "study-measurements.json");
  // compact: every op's [FLOPs, bytes] of nine programs
  await writeJsonAtomic(
    measurementsFile,
    { schema: MEASUREMENTS_SCHEMA, schemaVersion: 1, samples },
    undefined,
  );
  const fit = fitCalibration(samples, {
    from: "the reference study (bench/results/study-measurements.json)",
  });
  // the model without the I/O and ctx terms, per-op cost at the low end: what the terms buy
  const plain = fitCalibration(
    samples.map((x) => ({
      ...x,
      predictions: x.predictions.map((p) => ({ ...p, ioBytes: 0, kv: undefined })),
    })),
  );
  const cal = fit.calibration;
  const f = (
    k: "dispatchMs" | "bandwidthFraction" | "ioMsPerMB" | "kvMsPerMB" | "aneOpMs",
    rt = cal.runtime,
  ) => rt[k]?.value ?? 0;
  console.log(
    `\nFitted on ${fit.rows.filter((r) => r.role === "fit").length} measurements: dispatch ${f("dispatchMs")} ms per prediction, ANE bandwidth fraction ${f("bandwidthFraction")} ` +
      `(= ${(chip.aneGBps.value * f("bandwidthFraction")).toFixed(1)} GB/s of ${chip.aneGBps.value}), inputs/outputs ${f("ioMsPerMB")} ms per MB, ` +
      `ctx term ${f("kvMsPerMB")} ms per MB of KV rows (≤ ${cal.runtime.kvKneeRows?.value} rows), per-op ${(f("aneOpMs") * 1e3).toFixed(1)} µs; RMS log error ${fit.rmsLogError.toFixed(3)}`,
  );
  console.log(`Band (${fit.opCost}): ${cal.band.source}`);
  for (const [end, rt] of [
    ["low", cal.band.low],
    ["high", cal.band.high],
  ] as const)
    console.log(
      `  ${end}: per-op ${(f("aneOpMs", rt as never) * 1e3).toFixed(1)} µs, dispatch ${f("dispatchMs", rt as never)} ms, fraction ${f("bandwidthFraction", rt as never)}, I/O ${f("ioMsPerMB", rt as never)} ms/MB, ctx ${f("kvMsPerMB", rt as never)} ms/MB`,
    );
  console.log(`Without the I/O and ctx terms: RMS log error ${plain.rmsLogError.toFixed(3)}`);

  const rows = SCENARIOS.map((s, i) => {
    const r = s.report as CostReport;
    const fr = fit.rows[i];
    const pr = plain.rows[i];
    const perSb = s.metric === "packageMsPerSuperBlock" ? (s.perSuperBlock ?? 1) : 1;
    const physicsMs =
      s.metric === "msPerToken"
        ? (r.chain?.estimatedMsPerToken ?? r.totals.estimatedMs)
        : r.packages[0].prediction.estimatedMs / perSb;
    const conv = (ms: number | undefined) => (ms === undefined ? undefined : round(toUnit(s, ms), 3));
    const err = (ms: number | undefined) =>
      ms === undefined ? undefined : round(toUnit(s, ms) / s.measured - 1, 4);
    return {
      id: s.id,
      what: s.what,
      role: s.role,
      unit: s.unit,
      measured: s.measured,
      physicsOnly: conv(physicsMs),
      physicsError: err(physicsMs),
      calibrated: conv(fr.predictedMs),
      calibratedError: err(fr.predictedMs),
      band: [conv(fr.highMs), conv(fr.lowMs)].sort((a, b) => (a ?? 0) - (b ?? 0)),
      leaveOneOut: conv(fr.leaveOneOutMs),
      leaveOneOutError: err(fr.leaveOneOutMs),
      noIoCtx: conv(pr.predictedMs),
      noIoCtxError: err(pr.predictedMs),
      ioMBPerCall: round(samples[i].predictions.reduce((a, p) => a + p.ioBytes, 0) / 1e6, 3),
      assumption: s.assumption,
    };
  });
  const header = [
    "scenario",
    "role",
    "measured",
    "physics",
    "err",
    "calibrated",
    "err",
    "band",
    "leave-one-out",
    "err",
    "no I/O+ctx",
    "err",
  ];
  const body = rows.map((r) => [
    r.id,
    r.role,
    `${r.measured} ${r.unit}`,
    r.physicsOnly?.toFixed(2) ?? "—",
    pct(r.physicsError),
    r.calibrated?.toFixed(2) ?? "—",
    pct(r.calibratedError),
    `${r.band[0]?.toFixed(2)}–${r.band[1]?.toFixed(2)}`,
    r.leaveOneOut?.toFixed(2) ?? "—",
    pct(r.leaveOneOutError),
    r.noIoCtx?.toFixed(2) ?? "—",
    pct(r.noIoCtxError),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (c: string[]) =>
    c.map((x, i) => (i < 2 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join("  ");
  console.log(`\n${line(header)}`);
  for (const b of body) console.log(line(b));

  // the ctx sweep the fit projects: one 0.8B super-block per package, ms per SB
  const sweep = [];
  console.log("\nctx sweep, one 0.8B super-block (ms): measured 256 → 2.41, 1024 → 3.19 (plateau from 512)");
  for (const ctx of [128, 256, 512, 1024, 2048, 4096]) {
    const prog =
      packagesDir && (ctx === 256 || ctx === 1024)
        ? await pkg(`sb1-ctx${ctx}`)
        : buildSuperBlocks(QWEN35_08B, 0, 1, ctx);
    const r = await costplan(prog, { chip: "m4-pro", calibration: cal, native: "off" });
    const p = r.packages[0].prediction;
    sweep.push({
      ctx,
      ms: round(p.estimatedMs, 3),
      lowMs: round(p.band?.lowMs ?? 0, 3),
      highMs: round(p.band?.highMs ?? 0, 3),
      kvMs: round(p.kvMs ?? 0, 3),
      ioMs: round(p.ioMs ?? 0, 3),
    });
    console.log(
      `  ctx ${String(ctx).padStart(4)}: ${p.estimatedMs.toFixed(2)} ms (band ${p.band?.lowMs.toFixed(2)}–${p.band?.highMs.toFixed(2)}; ctx term ${(p.kvMs ?? 0).toFixed(2)}, I/O ${(p.ioMs ?? 0).toFixed(2)})`,
    );
  }
  console.log("\nAssumptions per row:");
  for (const r of rows) console.log(`  ${r.id}: ${r.what} — ${r.assumption}`);

  const seconds = round((performance.now() - t0) / 1000, 1);
  const out = {
    ...calibrationFile(fit, [measurementsFile]),
    bench: "@anemll-qwen35/costplan bench/calibrate.ts",
    chip: chip.id,
    programs: packagesDir ?? "shape-accurate stand-ins (bench/qwen35-standin.ts)",
    withoutIoAndCtx: { rmsLogError: round(plain.rmsLogError, 4) },
    rows,
    sweep,
    seconds,
  };
  const file = join(dir, "calibration.json");
  await writeJsonAtomic(file, out);
  console.log(`\nwrote ${file} and ${measurementsFile} (${seconds} s)`);
}

await main();
