/**
 * The machine a result was measured on: OS, CPU / Apple chip, memory, Node, and which of the two
 * accelerated backends could load here (with the reason when not), so a number is never read
 * without knowing that "ANE" meant the reference interpreter or "GPU" meant MLX's CPU backend.
 */
import { execFileSync } from "node:child_process";
import { arch, cpus, loadavg, release, totalmem, type } from "node:os";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import type { Machine } from "./schema.js";

function appleChip(): string | undefined {
  if (process.platform !== "darwin") return undefined;
  try {
    return execFileSync("sysctl", ["-n", "machdep.cpu.brand_string"], { encoding: "utf8" }).trim();
  } catch {
    return undefined;
  }
}

export function describeMachine(): Machine {
  const cpu = cpus();
  const mlx = mlxAvailable();
  const coreml = coreMLAvailability();
  return {
    os: type(),
    platform: process.platform,
    arch: arch(),
    release: release(),
    cpu: { model: cpu[0]?.model?.trim() ?? "unknown", cores: cpu.length },
    chip: appleChip(),
    memoryBytes: totalmem(),
    node: process.version,
    mlx: { available: mlx.available, version: mlx.version, reason: mlx.reason },
    coreml: { available: coreml.available, reason: coreml.reason },
    loadAverage: loadavg(),
  };
}
