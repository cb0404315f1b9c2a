/**
 * Runtime figures fitted to measurements by bench/calibrate.ts. The numbers below are copied from
 * its output, bench/results/calibration.json (a test checks they agree); rerun it after changing
 * the cost model or the converter's graphs, then copy the new `fitted` values here.
 *
 * Fitted: the per-prediction dispatch overhead, the fraction of anemll-bench's ANE bandwidth that
 * real graphs attain, and the cost of passing a prediction's inputs and outputs (ms per MB) — the
 * three figures the physics leaves free — by least squares of ln(predicted / measured) over five
 * Mac mini M4 Pro, Qwen3.5-0.8B measurements: unfused chain at ctx 1024 (49.2 tok/s), all
 * super-blocks fused at ctx 256 with a LUT4 head (66.7 tok/s), one super-block per package
 * (3.60 ms), two per package (2.11 ms per super-block) and one super-block at ctx 256 (2.41 ms);
 * one super-block at ctx 1024 (3.19 ms) is held out. Errors, the leave-one-out check and what the
 * fit is not good for: README "Calibration".
 */
import { DEFAULT_RUNTIME, type RuntimeFigures } from "./chips.js";

const FIT =
  "bench/calibrate.ts: least squares in ln(time) over 5 Mac mini M4 Pro Qwen3.5-0.8B measurements (the converter's packages of the synthetic 0.8B checkpoint)";

export const FITTED_RUNTIME: RuntimeFigures = {
  dispatchMs: { value: 0.92, kind: "fitted", source: FIT },
  bandwidthFraction: { value: 0.665, kind: "fitted", source: FIT },
  switchMs: DEFAULT_RUNTIME.switchMs,
  aneOpMs: DEFAULT_RUNTIME.aneOpMs,
  ioMsPerMB: { value: 0.181, kind: "fitted", source: FIT },
};
