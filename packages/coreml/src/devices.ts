/**
 * Which compute devices Core ML sees on this Mac: whether there is a Neural Engine at all. Virtual
 * Macs (hosted CI runners included) have none, and Core ML then runs every operation on the CPU or
 * GPU without a word, so a first run asks here before it trusts a placement. Off macOS 14, or when
 * the addon is not built, each call rejects with `CoreMLUnavailableError` saying why: nothing here
 * answers for a machine it cannot see.
 */
import { loadCoreMLAddon, type NativeComputeDevice, type NativeMemoryFootprint } from "./addon.js";

/** A compute device Core ML can use (MLAllComputeDevices). */
export type CoreMLComputeDevice = NativeComputeDevice;

/** Every compute device Core ML can use here, in its order (MLAllComputeDevices, macOS 14). */
export async function computeDevices(): Promise<CoreMLComputeDevice[]> {
  return loadCoreMLAddon("devices").computeDevices();
}

/** Whether Core ML sees a Neural Engine here (rejects, rather than answer false, where it cannot tell). */
export async function hasNeuralEngine(): Promise<boolean> {
  return (await computeDevices()).some((d) => d.kind === "neuralEngine");
}

/** This process's memory footprint (task_info), e.g. before and after loading or unloading a function. */
export function memoryFootprint(): NativeMemoryFootprint {
  return loadCoreMLAddon("devices").memoryFootprint();
}
