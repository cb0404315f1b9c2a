/**
 * @anemll-qwen35/coreml: the one Core ML addon (macOS), its loader, and what it tells about the Mac.
 * Elsewhere every entry point says plainly that Core ML is unavailable; nothing pretends to be it.
 */

// The addon's API, as runtime-ane (models, states, predictions) and costplan (plans, timings) use it
export type {
  CoreMLAddon,
  NativeComputeDevice,
  NativeDType,
  NativeFeature,
  NativeMeasurement,
  NativeMemoryFootprint,
  NativeModel,
  NativeOutput,
  NativePlan,
  NativePlanOp,
  NativeState,
  NativeStateBuffer,
  NativeStateSpec,
  NativeStats,
  NativeTensor,
} from "./addon.js";
// Is Core ML here, and the addon for a feature ("predict" | "computePlan" | "devices")
export {
  addonPath,
  type CoreMLFeature,
  CoreMLUnavailableError,
  coreMLAvailability,
  loadCoreMLAddon,
} from "./addon.js";
// Compute units a model is loaded for, and the devices MLComputePlan places operations on
export { COMPUTE_UNITS, type ComputeDevice, type ComputeUnits, isComputeUnits } from "./compute-units.js";
// This Mac: the compute devices Core ML sees (is there a Neural Engine at all?) and this process's
// memory footprint
export { type CoreMLComputeDevice, computeDevices, hasNeuralEngine, memoryFootprint } from "./devices.js";
