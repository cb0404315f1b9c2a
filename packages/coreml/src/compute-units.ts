/** Core ML's compute units (MLComputeUnits), by the names Apple's Swift API gives them. */
export type ComputeUnits = "cpuAndNeuralEngine" | "cpuOnly" | "cpuAndGPU" | "all";

export const COMPUTE_UNITS: readonly ComputeUnits[] = ["cpuAndNeuralEngine", "all", "cpuAndGPU", "cpuOnly"];

/** Where MLComputePlan says an operation runs. */
export type ComputeDevice = "ANE" | "GPU" | "CPU";
