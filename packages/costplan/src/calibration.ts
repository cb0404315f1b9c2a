/**
 * Runtime figures fitted to measurements by bench/calibrate.ts. The numbers below are copied from
 * its output, bench/results/calibration.json (a test checks they agree); rerun it after changing
 * the cost model or the stand-ins, then copy the new `fitted` values here.
 *
 * Fitted: the per-prediction dispatch overhead and the fraction of anemll-bench's ANE bandwidth
 * that real graphs attain — the two figures the physics leaves free — by least squares of
 * ln(predicted / measured) over four Mac mini M4 Pro, Qwen3.5-0.8B measurements: unfused chain at
 * ctx 1024 (49.2 tok/s), all super-blocks fused at ctx 256 with a LUT4 head (66.7 tok/s), one
 * super-block per package (3.60 ms) and two per package (2.11 ms per super-block). Errors, the
 * leave-one-out check and what the fit is not good for (9B-class models): README "Calibration".
 */
import { DEFAULT_RUNTIME, type RuntimeFigures } from "./chips.js";

const FIT =
  "bench/calibrate.ts: least squares in ln(time) over 4 Mac mini M4 Pro Qwen3.5-0.8B measurements (the converter's packages of the synthetic 0.8B checkpoint)";

export const FITTED_RUNTIME: RuntimeFigures = {
  dispatchMs: { value: 1.7075, kind: "fitted", source: FIT },
  bandwidthFraction: { value: 0.445, kind: "fitted", source: FIT },
  switchMs: DEFAULT_RUNTIME.switchMs,
  aneOpMs: DEFAULT_RUNTIME.aneOpMs,
  ioMsPerMB: { value: 0, kind: "fitted", source: FIT },
};
