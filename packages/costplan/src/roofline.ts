/**
 * Roofline time of one op on one device: max(FLOPs / peak throughput, bytes / attainable
 * bandwidth). On the ANE the bandwidth is the measured weight-streaming figure times the
 * attainable fraction (calibration.ts fits it); on the CPU and GPU the chip profile's figures.
 * ANE kernel ops (op-table's `kernel`: conv, linear, matmul, SDPA) add `aneOpMs`.
 */
import type { ChipProfile, RuntimeFigures } from "./chips.js";
import type { Placement } from "./placement.js";

export interface OpTime {
  readonly ms: number;
  readonly bound: "compute" | "memory" | "none";
}

/** Peak FLOP/s and attainable byte/s of a device. */
export function deviceRates(
  device: "ANE" | "CPU" | "GPU",
  chip: ChipProfile,
  runtime: Pick<RuntimeFigures, "bandwidthFraction">,
): { flops: number; bytes: number } {
  switch (device) {
    case "ANE":
      return {
        flops: chip.aneFp16Tflops.value * 1e12,
        bytes: chip.aneGBps.value * 1e9 * runtime.bandwidthFraction.value,
      };
    case "CPU":
      return { flops: chip.cpuGflops.value * 1e9, bytes: chip.cpuGBps.value * 1e9 };
    case "GPU":
      return { flops: chip.gpuTflops.value * 1e12, bytes: chip.gpuGBps.value * 1e9 };
  }
}

export function opTime(
  device: Placement,
  flops: number,
  bytes: number,
  chip: ChipProfile,
  runtime: Pick<RuntimeFigures, "bandwidthFraction" | "aneOpMs">,
  /** A kernel of its own on the ANE (ANE_KERNEL_OPS): pays `aneOpMs`. */
  kernel = false,
): OpTime {
  if (device === "load" || (flops === 0 && bytes === 0)) return { ms: 0, bound: "none" };
  const rates = deviceRates(device, chip, runtime);
  const compute = flops / rates.flops;
  const memory = bytes / rates.bytes;
  const fixed = device === "ANE" && kernel ? runtime.aneOpMs.value : 0;
  return compute > memory
    ? { ms: compute * 1e3 + fixed, bound: "compute" }
    : { ms: memory * 1e3 + fixed, bound: "memory" };
}
