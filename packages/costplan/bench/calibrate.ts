/**
 * Calibration: the cost model's projections beside measured Mac results, and the fit of the two
 * figures the physics leaves free — the per-prediction dispatch overhead (ms) and the fraction of
 * anemll-bench's ANE weight-streaming bandwidth that real graphs attain.
 *
 *   pnpm --filter @anemll-qwen35/costplan calibrate          (≈2 min; --no-9b skips the 9B rows)
 *
 * With the converter's real output, pass it instead of the stand-ins (chain folders or packages):
 *   … calibrate --unfused=DIR --fused-all=DIR --one-sb=PKG --two-sb=PKG
 *
 * Measured (Mac mini M4 Pro, Qwen3.5-0.8B, the project's brief):
 *   unfused chain at ctx 1024 ............................ 49.2 tok/s
 *   all super-blocks fused at ctx 256, LUT4 head ........... 66.7 tok/s
 *   one super-block per package .......................... 3.60 ms per super-block
 *   two super-blocks fused in one package ................ 2.11 ms per super-block
 * Reference rows, not fitted (shared/reference/ane-toolchains.md §4.3): 0.8B per-super-block
 * 2.41 ms (ctx 256) / 3.19 ms (ctx 1024); 9B super-block 6.64 ms p50 (Obj-C harness); 9B LUT6
 * lm_head 7.38 ms/token; 9B end-to-end 11.39 tok/s.
 *
 * The programs are SHAPE-ACCURATE STAND-INS (bench/qwen35-standin.ts), not the converter's output.
 * Fit: least squares of ln(predicted / measured) over the four measurements, grid search then a
 * finer grid, the fraction kept in (0, 1]; each measurement is also predicted from a fit on the
 * other three (leave-one-out).
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { MlModel } from "@anemll-qwen35/ir/mil";
import {
  CHIPS,
  type ChainInput,
  type CostReport,
  costplan,
  DEFAULT_RUNTIME,
  type Figure,
  opTime,
  type RuntimeFigures,
  retime,
} from "../src/index.js";
import {
  buildLmHead,
  buildStandInChain,
  buildSuperBlocks,
  QWEN35_9B,
  QWEN35_08B,
  type StandInChainOptions,
  type StandInConfig,
} from "./qwen35-standin.js";

const chip = CHIPS["m4-pro"];
const here = dirname(fileURLToPath(import.meta.url));

type Metric = "msPerToken" | "packageMs" | "packageMsPerSuperBlock";

interface Scenario {
  readonly id: string;
  readonly what: string;
  readonly measured: number;
  readonly unit: "tok/s" | "ms";
  readonly metric: Metric;
  /** Super-blocks in the package (packageMsPerSuperBlock). */
  readonly perSuperBlock?: number;
  readonly assumption: string;
  readonly fit: boolean;
  readonly build: () => ChainInput | MlModel | string;
  report?: CostReport;
}

const chain = (cfg: StandInConfig, o: StandInChainOptions) => () => buildStandInChain(cfg, o);
const sbPackage = (cfg: StandInConfig, n: number, ctx: number) => () => buildSuperBlocks(cfg, 0, n, ctx);

const with9b = !process.argv.includes("--no-9b");

/** `--unfused=DIR` etc.: cost the converter's real output instead of a stand-in. */
function real(flag: string): string | undefined {
  return process.argv.find((a) => a.startsWith(`--${flag}=`))?.slice(flag.length + 3);
}
const realOr = (flag: string, standIn: () => ChainInput | MlModel) => {
  const path = real(flag);
  return path ? () => path : standIn;
};

const SCENARIOS: Scenario[] = [
  {
    id: "unfused-ctx1024",
    what: "0.8B unfused chain, ctx 1024 (embed + 6 × 1-SB + lm_head)",
    measured: 49.2,
    unit: "tok/s",
    metric: "msPerToken",
    assumption: "lm_head LUT6 split 16 (ANEMLL's default head; not stated with the measurement)",
    fit: true,
    build: realOr("unfused", chain(QWEN35_08B, { fuse: 1, ctx: 1024, headBits: 6 })),
  },
  {
    id: "fused-all-ctx256-lut4",
    what: "0.8B all 6 SBs fused, ctx 256, LUT4 head (embed + 1 + lm_head)",
    measured: 66.7,
    unit: "tok/s",
    metric: "msPerToken",
    assumption: "one package holds all 24 layers",
    fit: true,
    build: realOr("fused-all", chain(QWEN35_08B, { fuse: 6, ctx: 256, headBits: 4 })),
  },
  {
    id: "one-sb-package",
    what: "0.8B one super-block per package (ms per SB)",
    measured: 3.6,
    unit: "ms",
    metric: "packageMsPerSuperBlock",
    perSuperBlock: 1,
    assumption: "ctx 1024 (not stated with the measurement)",
    fit: true,
    build: realOr("one-sb", sbPackage(QWEN35_08B, 1, 1024)),
  },
  {
    id: "two-sb-package",
    what: "0.8B two super-blocks fused in one package (ms per SB)",
    measured: 2.11,
    unit: "ms",
    metric: "packageMsPerSuperBlock",
    perSuperBlock: 2,
    assumption: "ctx 1024 (not stated with the measurement)",
    fit: true,
    build: realOr("two-sb", sbPackage(QWEN35_08B, 2, 1024)),
  },
  {
    id: "ref-sb-ctx256",
    what: "reference: 0.8B per-SB latency at ctx 256 (ane-toolchains.md §4.3)",
    measured: 2.41,
    unit: "ms",
    metric: "packageMsPerSuperBlock",
    perSuperBlock: 1,
    assumption: "one SB per package; third-party quote of notes/small_model_0_8b.md",
    fit: false,
    build: sbPackage(QWEN35_08B, 1, 256),
  },
  {
    id: "ref-sb-ctx1024",
    what: "reference: 0.8B per-SB latency at ctx 1024 (ane-toolchains.md §4.3)",
    measured: 3.19,
    unit: "ms",
    metric: "packageMsPerSuperBlock",
    perSuperBlock: 1,
    assumption: "one SB per package; third-party quote of notes/small_model_0_8b.md",
    fit: false,
    build: sbPackage(QWEN35_08B, 1, 1024),
  },
  ...(with9b
    ? ([
        {
          id: "ref-9b-sb",
          what: "reference: 9B super-block 0, p50 from Obj-C (flash-moe ane_bench/README.md)",
          measured: 6.64,
          unit: "ms",
          metric: "packageMs",
          assumption: "ctx 1024 assumed; a different (Obj-C) harness than the 0.8B numbers",
          fit: false,
          build: sbPackage(QWEN35_9B, 1, 1024),
        },
        {
          id: "ref-9b-head",
          what: "reference: 9B LUT6 lm_head split 16, ms per token (ane-toolchains.md §4.3)",
          measured: 7.38,
          unit: "ms",
          metric: "packageMs",
          assumption: "one package, 16 outputs",
          fit: false,
          build: () => buildLmHead(QWEN35_9B, 6),
        },
        {
          id: "ref-9b-chain",
          what: "reference: 9B end-to-end with full KV cache (flash-moe offload-scoping doc)",
          measured: 11.39,
          unit: "tok/s",
          metric: "msPerToken",
          assumption: "8 × 1-SB packages, ctx 1024, LUT6 head; Python harness",
          fit: false,
          build: chain(QWEN35_9B, { fuse: 1, ctx: 1024, headBits: 6 }),
        },
      ] satisfies Scenario[])
    : []),
];

/** The measured value in ms (tok/s → ms per token). */
function measuredMs(s: Scenario): number {
  return s.unit === "tok/s" ? 1000 / s.measured : s.measured;
}

function toUnit(s: Scenario, ms: number): number {
  return s.unit === "tok/s" ? 1000 / ms : ms;
}

/** The scenario's metric from a report, in ms. */
function reportMs(s: Scenario, r: CostReport): number {
  if (s.metric === "msPerToken") return r.chain?.estimatedMsPerToken ?? r.totals.estimatedMs;
  const p = r.packages[0].prediction.estimatedMs;
  return s.metric === "packageMsPerSuperBlock" ? p / (s.perSuperBlock ?? 1) : p;
}

/**
 * The same roofline, reduced per scenario to what the fitted figures touch:
 * T(d, f, o) = fixed + predictions·d + aneOps·o + Σ_ANE max(FLOPs/peak, bytes/(bw·f)), per SB if asked.
 */
interface Evaluator {
  readonly predictions: number;
  readonly fixedMs: number;
  readonly aneOps: { readonly flops: number; readonly bytes: number }[];
  readonly divisor: number;
  readonly aneByFraction: Map<number, number>;
}

function evaluator(s: Scenario, r: CostReport): Evaluator {
  let fixedMs = 0;
  const aneOps: { flops: number; bytes: number }[] = [];
  for (const p of r.packages) {
    const f = p.functions.find((x) => x.name === p.decodeFunction) ?? p.functions[0];
    fixedMs += f.summary.switchMs;
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
  return { predictions: r.packages.length, fixedMs, aneOps, divisor, aneByFraction: new Map() };
}

function runtimeOf(
  dispatch: number,
  fraction: number,
  opUs = 0,
  kind: Figure["kind"] = "fitted",
): RuntimeFigures {
  return {
    dispatchMs: { value: dispatch, kind, source: "bench/calibrate.ts" },
    bandwidthFraction: { value: fraction, kind, source: "bench/calibrate.ts" },
    switchMs: DEFAULT_RUNTIME.switchMs,
    aneOpMs:
      opUs === 0
        ? DEFAULT_RUNTIME.aneOpMs
        : { value: opUs / 1000, kind, source: "bench/calibrate.ts (exploratory)" },
  };
}

function predictMs(e: Evaluator, dispatch: number, fraction: number, opUs = 0): number {
  let ane = e.aneByFraction.get(fraction);
  if (ane === undefined) {
    const rt = runtimeOf(0, fraction);
    ane = 0;
    for (const op of e.aneOps) ane += opTime("ANE", op.flops, op.bytes, chip, rt).ms;
    e.aneByFraction.set(fraction, ane);
  }
  return (e.fixedMs + e.predictions * dispatch + (e.aneOps.length * opUs) / 1000 + ane) / e.divisor;
}

interface Fit {
  readonly dispatchMs: number;
  readonly fraction: number;
  /** Per-op ANE overhead in µs (exploratory fit only; 0 otherwise). */
  readonly opUs: number;
  readonly loss: number;
}

/** Grid search, then a finer grid around the best point. `withOp` adds the per-op overhead. */
function fit(items: readonly { e: Evaluator; ms: number }[], withOp = false): Fit {
  const loss = (d: number, f: number, o: number) =>
    items.reduce((s, it) => s + Math.log(predictMs(it.e, d, f, o) / it.ms) ** 2, 0);
  let best: Fit = { dispatchMs: 0, fraction: 1, opUs: 0, loss: Number.POSITIVE_INFINITY };
  const steps = (a: number, b: number, st: number) => {
    const out: number[] = [];
    for (let i = 0; a + i * st <= b + 1e-9; i++) out.push(round(a + i * st, 6));
    return out;
  };
  const search = (ds: number[], fs: number[], os: number[]) => {
    for (const f of fs)
      for (const d of ds)
        for (const o of os) {
          const l = loss(d, f, o);
          if (l < best.loss) best = { dispatchMs: d, fraction: f, opUs: o, loss: l };
        }
  };
  // the fraction is physical only in (0, 1]: no graph streams faster than anemll-bench's lm_head
  search(steps(0, 6, 0.05), steps(0.1, 1, 0.025), withOp ? steps(0, 10, 0.25) : [0]);
  const c = best;
  search(
    steps(Math.max(0, c.dispatchMs - 0.05), c.dispatchMs + 0.05, 0.0025),
    steps(Math.max(0.01, c.fraction - 0.025), Math.min(1, c.fraction + 0.025), 0.0025),
    withOp ? steps(Math.max(0, c.opUs - 0.25), c.opUs + 0.25, 0.0125) : [0],
  );
  return {
    ...best,
    dispatchMs: round(best.dispatchMs, 4),
    fraction: round(best.fraction, 4),
    opUs: round(best.opUs, 4),
  };
}

function round(x: number, digits: number): number {
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}

function pct(pred: number, meas: number): string {
  const e = (pred - meas) / meas;
  return `${e >= 0 ? "+" : ""}${(e * 100).toFixed(1)}%`;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  console.log("costplan calibration — Mac mini M4 Pro measurements vs the static model");
  const realFlags = ["unfused", "fused-all", "one-sb", "two-sb"].filter((f) => real(f));
  console.log(
    realFlags.length
      ? `programs: the converter's output for --${realFlags.join(", --")}; shape-accurate stand-ins (bench/qwen35-standin.ts) for the rest\n`
      : "programs: SHAPE-ACCURATE STAND-INS built with MilBuilder (bench/qwen35-standin.ts), not converter output\n",
  );
  for (const s of SCENARIOS) {
    const t = performance.now();
    const target = s.build();
    s.report = await costplan(target, { chip: "m4-pro", calibration: "none", native: "off" });
    const from = typeof target === "string" ? ` (${target})` : "";
    console.log(`  built + analysed ${s.id} in ${((performance.now() - t) / 1000).toFixed(1)} s${from}`);
  }
  const evals = new Map(SCENARIOS.map((s) => [s.id, evaluator(s, s.report as CostReport)]));
  const fitted = SCENARIOS.filter((s) => s.fit);
  const all = fit(fitted.map((s) => ({ e: evals.get(s.id) as Evaluator, ms: measuredMs(s) })));
  const loo = new Map(
    fitted.map((s) => {
      const f = fit(
        fitted.filter((o) => o !== s).map((o) => ({ e: evals.get(o.id) as Evaluator, ms: measuredMs(o) })),
      );
      return [s.id, { fit: f, predMs: predictMs(evals.get(s.id) as Evaluator, f.dispatchMs, f.fraction) }];
    }),
  );
  const sub = (ids: string[]) =>
    fit(
      fitted
        .filter((s) => ids.includes(s.id))
        .map((s) => ({ e: evals.get(s.id) as Evaluator, ms: measuredMs(s) })),
    );
  const chainOnly = sub(["unfused-ctx1024", "fused-all-ctx256-lut4"]);
  const pairOnly = sub(["one-sb-package", "two-sb-package"]);
  const explore = fit(
    fitted.map((s) => ({ e: evals.get(s.id) as Evaluator, ms: measuredMs(s) })),
    true,
  );
  const physics = DEFAULT_RUNTIME;
  const rows = SCENARIOS.map((s) => {
    const r = s.report as CostReport;
    const physicsMs = reportMs(s, r);
    const fittedMs = reportMs(s, retime(r, { runtime: runtimeOf(all.dispatchMs, all.fraction) }));
    const looMs = loo.get(s.id)?.predMs;
    const exploreMs = predictMs(
      evals.get(s.id) as Evaluator,
      explore.dispatchMs,
      explore.fraction,
      explore.opUs,
    );
    return {
      id: s.id,
      what: s.what,
      fitted: s.fit,
      unit: s.unit,
      measured: s.measured,
      physicsOnly: round(toUnit(s, physicsMs), 3),
      physicsError: pct(toUnit(s, physicsMs), s.measured),
      calibrated: round(toUnit(s, fittedMs), 3),
      calibratedError: pct(toUnit(s, fittedMs), s.measured),
      leaveOneOut: looMs === undefined ? undefined : round(toUnit(s, looMs), 3),
      leaveOneOutError: looMs === undefined ? undefined : pct(toUnit(s, looMs), s.measured),
      exploratory3: round(toUnit(s, exploreMs), 3),
      exploratory3Error: pct(toUnit(s, exploreMs), s.measured),
      assumption: s.assumption,
      weightBytesReadPerCall: r.totals.bytesRead.weights,
      predictions: r.packages.length,
    };
  });

  console.log(
    `\nFitted on the 4 measurements: dispatch overhead ${all.dispatchMs} ms per prediction, ANE bandwidth fraction ${all.fraction} ` +
      `(= ${(chip.aneGBps.value * all.fraction).toFixed(1)} GB/s of the ${chip.aneGBps.value} GB/s anemll-bench figure); ` +
      `RMS log error ${Math.sqrt(all.loss / fitted.length).toFixed(3)}`,
  );
  console.log(
    `Physics only: dispatch ${physics.dispatchMs.value} ms (${physics.dispatchMs.kind}), fraction ${physics.bandwidthFraction.value} (${physics.bandwidthFraction.kind})\n`,
  );
  console.log(
    `Subset fits (to show what each pair of numbers asks for): chain numbers only → dispatch ${chainOnly.dispatchMs} ms, fraction ${chainOnly.fraction}; ` +
      `1-SB/2-SB pair only → dispatch ${pairOnly.dispatchMs} ms, fraction ${pairOnly.fraction}`,
  );
  console.log(
    `Exploratory 3-figure fit (NOT applied; adds a fixed cost per ANE op): dispatch ${explore.dispatchMs} ms, fraction ${explore.fraction}, ` +
      `${explore.opUs} µs per ANE op; RMS log error ${Math.sqrt(explore.loss / fitted.length).toFixed(3)}\n`,
  );
  const header = [
    "scenario",
    "measured",
    "physics-only",
    "err",
    "calibrated",
    "err",
    "leave-one-out",
    "err",
    "3-figure",
    "err",
  ];
  const body = rows.map((r) => [
    `${r.fitted ? "" : "(ref) "}${r.id}`,
    `${r.measured} ${r.unit}`,
    `${r.physicsOnly.toFixed(2)}`,
    r.physicsError,
    `${r.calibrated.toFixed(2)}`,
    r.calibratedError,
    r.leaveOneOut === undefined ? "—" : r.leaveOneOut.toFixed(2),
    r.leaveOneOutError ?? "—",
    r.exploratory3.toFixed(2),
    r.exploratory3Error,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (c: string[]) =>
    c.map((x, i) => (i === 0 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join("  ");
  console.log(line(header));
  for (const b of body) console.log(line(b));
  console.log("\nAssumptions per row:");
  for (const r of rows) console.log(`  ${r.id}: ${r.what} — ${r.assumption}`);

  const out = {
    tool: "@anemll-qwen35/costplan bench/calibrate.ts",
    chip: chip.id,
    programs: Object.fromEntries(
      ["unfused", "fused-all", "one-sb", "two-sb"].map((f) => [
        f,
        real(f) ?? "shape-accurate stand-in (bench/qwen35-standin.ts)",
      ]),
    ),
    fittedTo: fitted.map((s) => `${s.id}: ${s.measured} ${s.unit}`),
    fitted: {
      dispatchMs: all.dispatchMs,
      bandwidthFraction: all.fraction,
      rmsLogError: round(Math.sqrt(all.loss / fitted.length), 4),
    },
    leaveOneOut: Object.fromEntries(
      [...loo].map(([id, v]) => [id, { dispatchMs: v.fit.dispatchMs, bandwidthFraction: v.fit.fraction }]),
    ),
    physicsOnly: { dispatchMs: physics.dispatchMs.value, bandwidthFraction: physics.bandwidthFraction.value },
    subsetFits: {
      chainOnly: { dispatchMs: chainOnly.dispatchMs, bandwidthFraction: chainOnly.fraction },
      pairOnly: { dispatchMs: pairOnly.dispatchMs, bandwidthFraction: pairOnly.fraction },
    },
    exploratory3: {
      applied: false,
      dispatchMs: explore.dispatchMs,
      bandwidthFraction: explore.fraction,
      aneOpUs: explore.opUs,
      rmsLogError: round(Math.sqrt(explore.loss / fitted.length), 4),
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
