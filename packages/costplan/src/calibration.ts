/**
 * Runtime figures fitted to measurements by bench/calibrate.ts (which runs src/fit.ts's
 * fitCalibration on the reference study's Mac measurements). The numbers below are copied from
 * its output, bench/results/calibration.json (a test checks they agree); rerun it after changing
 * the cost model or the converter's graphs, then copy the new values here.
 *
 * Fitted: dispatch per prediction, the fraction of anemll-bench's ANE bandwidth real graphs attain,
 * passing a prediction's inputs and outputs (ms per MB) and the ctx term (ms per MB of KV rows up to
 * the 512-row knee), by least squares over five Mac mini M4 Pro, Qwen3.5-0.8B measurements: unfused
 * chain at ctx 1024 (49.2 tok/s), all super-blocks fused at ctx 256 with a LUT4 head (66.7 tok/s),
 * one super-block per package (3.60 ms), two per package (2.11 ms per super-block) and one
 * super-block at ctx 256 (2.41 ms); one super-block at ctx 1024 (3.19 ms) is held out. The per-op
 * ANE cost is not pinned by these (decode) measurements: FITTED_BAND holds the figures refitted
 * with it at each end of ANE_OP_MS_RANGE. Errors and leave-one-out: README "Calibration".
 */
import { ANE_OP_MS_RANGE, DEFAULT_RUNTIME, type Figure, type RuntimeFigures } from "./chips.js";
import type { RuntimeBand } from "./report.js";

const FIT =
  "bench/calibrate.ts: least squares over 5 Mac mini M4 Pro Qwen3.5-0.8B measurements (the converter's packages of the synthetic 0.8B)";

const fitted = (value: number): Figure => ({ value, kind: "fitted", source: FIT });

function figures(f: {
  dispatchMs: number;
  bandwidthFraction: number;
  ioMsPerMB: number;
  kvMsPerMB: number;
  aneOpMs: number;
}): RuntimeFigures {
  return {
    dispatchMs: fitted(f.dispatchMs),
    bandwidthFraction: fitted(f.bandwidthFraction),
    switchMs: DEFAULT_RUNTIME.switchMs,
    aneOpMs: fitted(f.aneOpMs),
    ioMsPerMB: fitted(f.ioMsPerMB),
    kvMsPerMB: fitted(f.kvMsPerMB),
    kvKneeRows: DEFAULT_RUNTIME.kvKneeRows,
  };
}

// --- copied from bench/results/calibration.json -------------------------------------------------
const CENTRAL = {
  dispatchMs: 1.0916,
  bandwidthFraction: 1,
  ioMsPerMB: 0,
  kvMsPerMB: 0.4494,
  aneOpMs: 0.0223,
};
const LOW = { dispatchMs: 1.0979, bandwidthFraction: 1, ioMsPerMB: 0.028, kvMsPerMB: 0.3725, aneOpMs: 0.02 };
const HIGH = { dispatchMs: 0.4494, bandwidthFraction: 1, ioMsPerMB: 0, kvMsPerMB: 0, aneOpMs: 0.05 };
// -------------------------------------------------------------------------------------------------

export const FITTED_RUNTIME: RuntimeFigures = figures(CENTRAL);

/** The fitted figures with the per-op ANE cost at each end of ANE_OP_MS_RANGE. */
export const FITTED_BAND: RuntimeBand = {
  low: figures(LOW),
  high: figures(HIGH),
  source: `per-op cost not pinned by the decode measurements: ${ANE_OP_MS_RANGE.source}; each end fitted with the other figures (${FIT})`,
};

/** The fitted figures as bench/calibrate.ts wrote them (a test compares). */
export const FITTED_FIGURES = { central: CENTRAL, low: LOW, high: HIGH } as const;
