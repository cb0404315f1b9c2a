import { cpus, loadavg, totalmem } from "node:os";

/** The machine a benchmark ran on, as every bench script's results JSON records it. */
export function benchMachine() {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    memoryBytes: totalmem(),
    node: process.version,
    loadAverage: loadavg(),
  };
}
