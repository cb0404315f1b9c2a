/**
 * @anemll-qwen35/coreml: the one Core ML addon (macOS) — compile, load, state and predict for
 * runtime-ane; MLComputePlan and timed predictions for costplan; what Core ML sees of this Mac.
 * Off macOS it says why it is unavailable; nothing pretends to be Core ML.
 */

// Loading the addon, and why it is unavailable where it is
export {
  type CoreMLAddon,
  type CoreMLFeature,
  CoreMLUnavailableError,
  coreMLAvailability,
  loadCoreMLAddon,
} from "./addon.js";

// Compute units (MLComputeUnits) and the devices a compute plan names
export { COMPUTE_UNITS, type ComputeDevice, type ComputeUnits } from "./compute-units.js";

// Models: features, tensors and the state a loaded package keeps between predictions
export type {
  NativeDType,
  NativeFeature,
  NativeModel,
  NativeOutput,
  NativeState,
  NativeStateBuffer,
  NativeStateSpec,
  NativeStats,
  NativeTensor,
} from "./addon.js";

// The compute plan (MLComputePlan) and timed predictions
export type { NativeMeasurement, NativePlan, NativePlanOp } from "./addon.js";

// This Mac: the compute devices Core ML sees (is there a Neural Engine at all?) and this process's
// memory footprint
export type { NativeComputeDevice, NativeMemoryFootprint } from "./addon.js";
export { type CoreMLComputeDevice, computeDevices, hasNeuralEngine, memoryFootprint } from "./devices.js";
