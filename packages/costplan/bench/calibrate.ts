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
 * Fit: least squares of ln(predicted / measured) over the fitted rows, grid search then a finer
 * grid, the fraction kept in (0, 1]. Also: each fitted row predicted from a fit on the other four
 * (leave-one-out), and the two-figure model without the I/O term on the same rows, for comparison.
 * Writes bench/results/calibration.json; copy `fitted` into src/calibration.ts (a test compares).
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type MlModel, readMlPackage } from "@anemll-qwen35/ir/mil";
import {
  CHIPS,
  type ChainInput,
  type CostReport,
  costplan,
  DEFAULT_RUNTIME,
  opTime,
  type RuntimeFigures,
  retime,
} from "../src/index.js";
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

/** The scenario's metric from a report, in ms. */
function reportMs(s: Scenario, r: CostReport): number {
  if (s.metric === "msPerToken") return r.chain?.estimatedMsPerToken ?? r.totals.estimatedMs;
  const p = r.packages[0].prediction.estimatedMs;
  return s.metric === "packageMsPerSuperBlock" ? p / (s.perSuperBlock ?? 1) : p;
}

/**
 * The same model, reduced per scenario to what the fitted figures touch:
 * T(d, f, k) = fixed + predictions·d + Σ_ANE max(FLOPs/peak, bytes/(bw·f)) + ioMB·k, per SB if asked.
 */
interface Evaluator {
  readonly predictions: number;
  readonly fixedMs: number;
  readonly ioMB: number;
  readonly aneOps: { readonly flops: number; readonly bytes: number }[];
  readonly divisor: number;
  readonly aneByFraction: Map<number, number>;
}

function evaluator(s: Scenario, r: CostReport): Evaluator {
  let fixedMs = 0;
  let ioMB = 0;
  const aneOps: { flops: number; bytes: number }[] = [];
  for (const p of r.packages) {
    const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
    fixedMs += f.summary.switchMs;
    ioMB += f.io ? (f.io.inputBytes + f.io.outputBytes) / 1e6 : 0;
    for (const op of f.ops) {
      if (op.device === "load") continue;
      const bytes =
        op.bytesRead.weights +
        op.bytesRead.activations +
        op.bytesRead.state +
        op.bytesWritten.activations +
        op.bytesWritten.state;
      if (op.device === "ANE") {
        if (op.flops > 0 || bytes > 0) aneOps.push({ flops: op.flops, bytes });
      } else fixedMs += op.estimatedMs; // CPU/GPU ops do not depend on the fitted figures
    }
  }
  const divisor = s.metric === "packageMsPerSuperBlock" ? (s.perSuperBlock ?? 1) : 1;
  return { predictions: r.packages.length, fixedMs, ioMB, aneOps, divisor, aneByFraction: new Map() };
}

interface Fit {
  readonly dispatchMs: number;
  readonly fraction: number;
  readonly ioMsPerMB: number;
  readonly loss: number;
}

function runtimeOf(f: Omit<Fit, "loss">): RuntimeFigures {
  const src = "bench/calibrate.ts";
  return {
    dispatchMs: { value: f.dispatchMs, kind: "fitted", source: src },
    bandwidthFraction: { value: f.fraction, kind: "fitted", source: src },
    switchMs: DEFAULT_RUNTIME.switchMs,
    aneOpMs: DEFAULT_RUNTIME.aneOpMs,
    ioMsPerMB: { value: f.ioMsPerMB, kind: "fitted", source: src },
  };
}

function predictMs(e: Evaluator, f: Omit<Fit, "loss">): number {
  let ane = e.aneByFraction.get(f.fraction);
  if (ane === undefined) {
    const rt = runtimeOf({ ...f, dispatchMs: 0 });
    ane = 0;
    for (const op of e.aneOps) ane += opTime("ANE", op.flops, op.bytes, chip, rt).ms;
    e.aneByFraction.set(f.fraction, ane);
  }
  return (e.fixedMs + e.predictions * f.dispatchMs + ane + e.ioMB * f.ioMsPerMB) / e.divisor;
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
const steps = (a: number, b: number, st: number) => {
  const out: number[] = [];
  for (let i = 0; a + i * st <= b + 1e-9; i++) out.push(round(a + i * st, 6));
  return out;
};

/** Grid search, then a finer grid around the best point; `withIo` false pins the I/O term at 0. */
function fit(items: readonly { e: Evaluator; ms: number }[], withIo = true): Fit {
  const loss = (g: Omit<Fit, "loss">) =>
    items.reduce((s, it) => s + Math.log(predictMs(it.e, g) / it.ms) ** 2, 0);
  let best: Fit = { dispatchMs: 0, fraction: 1, ioMsPerMB: 0, loss: Number.POSITIVE_INFINITY };
  const search = (ds: number[], fs: number[], ks: number[]) => {
    for (const fraction of fs)
      for (const dispatchMs of ds)
        for (const ioMsPerMB of ks) {
          const l = loss({ dispatchMs, fraction, ioMsPerMB });
          if (l < best.loss) best = { dispatchMs, fraction, ioMsPerMB, loss: l };
        }
  };
  // the fraction is physical only in (0, 1]: no graph streams faster than anemll-bench's lm_head
  search(steps(0, 6, 0.05), steps(0.1, 1, 0.025), withIo ? steps(0, 2, 0.02) : [0]);
  const c = best;
  search(
    steps(Math.max(0, c.dispatchMs - 0.05), c.dispatchMs + 0.05, 0.0025),
    steps(Math.max(0.01, c.fraction - 0.025), Math.min(1, c.fraction + 0.025), 0.0025),
    withIo ? steps(Math.max(0, c.ioMsPerMB - 0.02), c.ioMsPerMB + 0.02, 0.001) : [0],
  );
  return {
    ...best,
    dispatchMs: round(best.dispatchMs, 4),
    fraction: round(best.fraction, 4),
    ioMsPerMB: round(best.ioMsPerMB, 4),
  };
}

const errOf = (pred: number, meas: number) => (pred - meas) / meas;
const pct = (e: number) => `${e >= 0 ? "+" : ""}${(e * 100).toFixed(1)}%`;

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
  const evals = new Map(SCENARIOS.map((s) => [s.id, evaluator(s, s.report as CostReport)]));
  const item = (s: Scenario) => ({ e: evals.get(s.id) as Evaluator, ms: measuredMs(s) });
  const fitted = SCENARIOS.filter((s) => s.role === "fit");
  const heldOut = SCENARIOS.filter((s) => s.role === "held-out");
  const all = fit(fitted.map(item));
  const two = fit(fitted.map(item), false);
  const loo = new Map(
    fitted.map((s) => {
      const f = fit(fitted.filter((o) => o !== s).map(item));
      return [s.id, { fit: f, predMs: predictMs(evals.get(s.id) as Evaluator, f) }];
    }),
  );
  const rows = SCENARIOS.map((s) => {
    const r = s.report as CostReport;
    const e = evals.get(s.id) as Evaluator;
    const physics = toUnit(s, reportMs(s, r));
    const calibrated = toUnit(s, reportMs(s, retime(r, { runtime: runtimeOf(all) })));
    const twoFigure = toUnit(s, predictMs(e, two));
    const looMs = loo.get(s.id)?.predMs;
    return {
      id: s.id,
      what: s.what,
      role: s.role,
      unit: s.unit,
      measured: s.measured,
      physicsOnly: round(physics, 3),
      physicsError: round(errOf(physics, s.measured), 4),
      calibrated: round(calibrated, 3),
      calibratedError: round(errOf(calibrated, s.measured), 4),
      leaveOneOut: looMs === undefined ? undefined : round(toUnit(s, looMs), 3),
      leaveOneOutError: looMs === undefined ? undefined : round(errOf(toUnit(s, looMs), s.measured), 4),
      twoFigure: round(twoFigure, 3),
      twoFigureError: round(errOf(twoFigure, s.measured), 4),
      ioMBPerCall: round(e.ioMB, 3),
      assumption: s.assumption,
      weightBytesReadPerCall: r.totals.bytesRead.weights,
      predictions: r.packages.length,
    };
  });

  const rms = (l: number) => Math.sqrt(l / fitted.length).toFixed(3);
  console.log(
    `\nFitted on ${fitted.length} measurements: dispatch ${all.dispatchMs} ms per prediction, ANE bandwidth fraction ${all.fraction} ` +
      `(= ${(chip.aneGBps.value * all.fraction).toFixed(1)} GB/s of ${chip.aneGBps.value}), inputs/outputs ${all.ioMsPerMB} ms per MB ` +
      `(= ${(1 / Math.max(all.ioMsPerMB, 1e-9)).toFixed(2)} GB/s); RMS log error ${rms(all.loss)}`,
  );
  console.log(
    `Without the I/O term (2 figures, same rows): dispatch ${two.dispatchMs} ms, fraction ${two.fraction}; RMS log error ${rms(two.loss)}`,
  );
  for (const s of heldOut) {
    const row = rows.find((r) => r.id === s.id);
    console.log(
      `Held out ${s.id}: measured ${s.measured} ${s.unit}, predicted ${row?.calibrated} (${pct(row?.calibratedError ?? 0)}); without the I/O term ${row?.twoFigure} (${pct(row?.twoFigureError ?? 0)})`,
    );
  }
  const header = [
    "scenario",
    "role",
    "measured",
    "physics",
    "err",
    "calibrated",
    "err",
    "leave-one-out",
    "err",
    "no I/O term",
    "err",
    "I/O MB",
  ];
  const body = rows.map((r) => [
    r.id,
    r.role,
    `${r.measured} ${r.unit}`,
    r.physicsOnly.toFixed(2),
    pct(r.physicsError),
    r.calibrated.toFixed(2),
    pct(r.calibratedError),
    r.leaveOneOut === undefined ? "—" : r.leaveOneOut.toFixed(2),
    r.leaveOneOutError === undefined ? "—" : pct(r.leaveOneOutError),
    r.twoFigure.toFixed(2),
    pct(r.twoFigureError),
    r.ioMBPerCall.toFixed(2),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (c: string[]) =>
    c.map((x, i) => (i < 2 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join("  ");
  console.log(`\n${line(header)}`);
  for (const b of body) console.log(line(b));
  console.log("\nAssumptions per row:");
  for (const r of rows) console.log(`  ${r.id}: ${r.what} — ${r.assumption}`);

  const out = {
    tool: "@anemll-qwen35/costplan bench/calibrate.ts",
    chip: chip.id,
    programs: packagesDir ?? "shape-accurate stand-ins (bench/qwen35-standin.ts)",
    fittedTo: fitted.map((s) => `${s.id}: ${s.measured} ${s.unit}`),
    heldOut: heldOut.map((s) => `${s.id}: ${s.measured} ${s.unit}`),
    fitted: {
      dispatchMs: all.dispatchMs,
      bandwidthFraction: all.fraction,
      ioMsPerMB: all.ioMsPerMB,
      rmsLogError: round(Math.sqrt(all.loss / fitted.length), 4),
    },
    withoutIoTerm: {
      dispatchMs: two.dispatchMs,
      bandwidthFraction: two.fraction,
      rmsLogError: round(Math.sqrt(two.loss / fitted.length), 4),
    },
    leaveOneOut: Object.fromEntries(
      [...loo].map(([id, v]) => [
        id,
        { dispatchMs: v.fit.dispatchMs, bandwidthFraction: v.fit.fraction, ioMsPerMB: v.fit.ioMsPerMB },
      ]),
    ),
    physicsOnly: {
      dispatchMs: DEFAULT_RUNTIME.dispatchMs.value,
      bandwidthFraction: DEFAULT_RUNTIME.bandwidthFraction.value,
      ioMsPerMB: DEFAULT_RUNTIME.ioMsPerMB.value,
    },
    rows,
    seconds: round((performance.now() - t0) / 1000, 1),
  };
  const dir = join(here, "results");
  await mkdir(dir, { recursive: true });
  const file = join(dir, "calibration.json");
  await writeFile(`${file}.tmp`, `${JSON.stringify(out, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
  console.log(`\nwrote ${file} (${out.seconds} s)`);
}

await main();
