/**
 * @anemll-qwen35/costplan: what a Core ML package, or a chain of them, costs on the Apple Neural
 * Engine — placement per op, roofline time per chip, projected tok/s (MLComputePlan on macOS) —
 * and measured time per op beside that estimate.
 */

export { type AnalyzedFunction, type AnalyzedModel, analyzeModel } from "./analyze.js";
/** `retime`: the same report for another chip or runtime; `applyTiming`: re-derive it after editing ops. */
/** Building a report from analysed packages directly (costplan() does this for files). */
export { applyTiming, buildReport, type ComponentInput, callEstimate, retime } from "./assemble.js";
/** Dispatch, bandwidth, I/O and ctx figures fitted to Mac measurements (the default calibration) and its band. */
export { FITTED_BAND, FITTED_RUNTIME } from "./calibration.js";
export type { ChainComponent, ChainInput } from "./chain.js";
// --- chips and the runtime figures the times rest on ---------------------------------------------
export {
  ANE_OP_MS_RANGE,
  CHIP_IDS,
  CHIPS,
  type ChipId,
  type ChipProfile,
  DEFAULT_RUNTIME,
  type Figure,
  type FigureKind,
  type RuntimeFigures,
} from "./chips.js";
export { type Comparison, compareReports, type Delta, formatComparison } from "./compare.js";
// --- estimate, compare, re-time ----------------------------------------------------------------
export { type CostplanOptions, costplan } from "./costplan.js";
// --- calibration from measurements (costplan calibrate) -------------------------------------------
export {
  CALIBRATION_SCHEMA,
  type Calibration,
  type CalibrationFit,
  type CalibrationSample,
  fitCalibration,
  type FitRow,
  MEASUREMENTS_SCHEMA,
  type PredictionWork,
  readCalibration,
  readMeasurements,
  samplesFromReport,
  workOf,
  writeCalibration,
} from "./fit.js";
// --- errors and version -------------------------------------------------------------------------
export { ChainError, CostplanOptionError, NativePlanUnavailableError, ReportSchemaError } from "./errors.js";
export { type FormatOptions, formatReport } from "./format.js";
export { findInterruptions } from "./interruptions.js";
// --- MLComputePlan (macOS) -----------------------------------------------------------------------
export {
  mergePlan,
  type NativeMeasurement,
  type NativePlan,
  type NativePlanOp,
  nativeAvailability,
} from "./native.js";
export { aneLayout, layoutMoves, type OpWork, opWork } from "./op-cost.js";
// --- the static model's parts, for tools and tests ----------------------------------------------
/** One entry per op type: FLOPs, how bytes are counted, seen on the ANE, its placement rules. */
export { ANE_OBSERVED_OPS, OP_FLOPS, OP_TABLE, type OpTypeEntry } from "./op-table.js";
export { type Operand, type OperandRole, tensorBytes, type WeightInfo } from "./operands.js";
export {
  ANE_MAX_DIM,
  ANE_MAX_STATE_UPDATES,
  ANE_MAX_WEIGHT_BYTES,
  type ComputeUnits,
  type Device,
  PLACEMENT_RULES,
  type Placement,
  type PlacementRule,
  placeOp,
} from "./placement.js";
// --- measured beside estimated: profile() -------------------------------------------------------
export {
  formatProfile,
  PROFILE_SCHEMA,
  PROFILE_SCHEMA_VERSION,
  type ProfileOp,
  type ProfileOptions,
  type ProfilePackage,
  type ProfileReport,
  ProfileReportSchema,
  parseProfile,
  profile,
} from "./profile.js";
// --- the report (schema version 1) --------------------------------------------------------------
export {
  type ChainSummary,
  type CostReport,
  CostReportSchema,
  type Fallback,
  type FunctionPlan,
  type FunctionSummary,
  type Interruptions,
  type OpEntry,
  type OpTypeRow,
  type PackagePlan,
  type PlanSource,
  parseReport,
  type RuntimeBand,
  REPORT_SCHEMA,
  REPORT_SCHEMA_VERSION,
  type Run,
  type TopOp,
  type Totals,
} from "./report.js";
export { type OpTime, opTime } from "./roofline.js";
// --- speculative decoding with the MTP head: projected ANE decode speed ------------------------
export {
  formatSpeculativeProjection,
  projectSpeculativeDecode,
  type SpeculativeAcceptance,
  type SpeculativeModelBytes,
  type SpeculativeProjection,
  type SpeculativeProjectionRow,
} from "./speculative.js";
export { TOOL_NAME, TOOL_VERSION } from "./version.js";
