export {
  type AnalyzedFunction,
  type AnalyzedModel,
  analyzeFunction,
  analyzeModel,
  defaultFunctionOf,
} from "./analyze.js";
export { applyTiming, buildReport, type ComponentInput, retime } from "./assemble.js";
export { FITTED_RUNTIME } from "./calibration.js";
export { type ChainComponent, type ChainInput, loadTarget, ModelJsonSchema, type Target } from "./chain.js";
export {
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
export { type CostplanOptions, costplan } from "./costplan.js";
export { ChainError, CostplanOptionError, NativePlanUnavailableError, ReportSchemaError } from "./errors.js";
export { type FormatOptions, formatReport } from "./format.js";
export { findInterruptions } from "./interruptions.js";
export {
  type CostplanAddon,
  loadNativeAddon,
  mergePlan,
  type NativeMeasurement,
  type NativePlan,
  type NativePlanOp,
  nativeAvailability,
} from "./native.js";
export { aneLayout, layoutMoves, type OpWork, opWork } from "./op-cost.js";
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
export * from "./report.js";
export { deviceRates, type OpTime, opTime } from "./roofline.js";
export { TOOL_NAME, TOOL_VERSION } from "./version.js";
