/** Parsers for option values shared by several commands; each throws a UsageError naming the option. */

import { parseWeightQuant, type WeightQuant } from "@anemll-qwen35/converter";
import { AnemllError } from "@anemll-qwen35/core";
import { CHIP_IDS, type ChipId } from "@anemll-qwen35/costplan";
import type { Command } from "commander";

/** Core ML compute units, as --compute-units takes them (run, chat, serve, costplan). */
export const COMPUTE_UNITS = ["cpuAndNeuralEngine", "cpuOnly", "cpuAndGPU", "all"] as const;

export class UsageError extends AnemllError {
  constructor(message: string) {
    super("E_USAGE", message);
  }
}

export function int(option: string, min = 0, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) {
      throw new UsageError(`${option} must be an integer from ${min} to ${max}, got "${value}"`);
    }
    return n;
  };
}

export function num(option: string, min = Number.NEGATIVE_INFINITY) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < min)
      throw new UsageError(`${option} must be a number ≥ ${min}, got "${value}"`);
    return n;
  };
}

export function choice<T extends string>(option: string, allowed: readonly T[]) {
  return (value: string): T => {
    if (!(allowed as readonly string[]).includes(value)) {
      throw new UsageError(`${option} must be one of ${allowed.join(", ")}, got "${value}"`);
    }
    return value as T;
  };
}

/** `4`, `6,16`, `none`, `int8`, `lut4,per-tensor` … → a weight encoding. */
export function weightQuant(option: string) {
  return (value: string): WeightQuant => {
    const v = /^\d/.test(value) ? `lut${value}` : value;
    try {
      return parseWeightQuant(v, option);
    } catch (err) {
      throw new UsageError(`${option}: ${(err as Error).message}`);
    }
  };
}

/** `all` or a positive integer. */
export function fuse(value: string): number | "all" {
  return value === "all" ? "all" : int("--fuse", 1)(value);
}

/** --buckets: comma-separated context lengths (the converter checks their order and range). */
export function buckets(value: string): number[] {
  return value.split(",").map((v) => int("--buckets", 1)(v.trim()));
}

/** Bytes with an optional unit: 1.5GB, 800MB, 2e9. */
export function bytes(option: string) {
  return (value: string): number => {
    const m = /^(\d+(?:\.\d+)?(?:e\d+)?)\s*(b|kb|mb|gb)?$/i.exec(value.trim());
    if (!m) throw new UsageError(`${option} must be a size such as 1.5GB or 800MB, got "${value}"`);
    const unit = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9 }[(m[2] ?? "b").toLowerCase() as "b"];
    return Number(m[1]) * unit;
  };
}

/** The --chip and --compute-units choices (addChipOptions) as costplan's options. */
export function chipChoice(o: { chip: ChipId; computeUnits: (typeof COMPUTE_UNITS)[number] }) {
  return { chip: o.chip, computeUnits: o.computeUnits };
}

/** --chip and --compute-units, as costplan's estimate takes them (costplan, profile). */
export function addChipOptions(cmd: Command, say: { chip: string; units: string }): Command {
  return cmd
    .option(
      "--chip <id>",
      `${say.chip} (${CHIP_IDS.join(", ")})`,
      choice("--chip", CHIP_IDS as readonly ChipId[]),
      "m4-pro",
    )
    .option(
      "--compute-units <u>",
      `${say.units}: ${COMPUTE_UNITS.join(", ")}`,
      choice("--compute-units", COMPUTE_UNITS),
      "cpuAndNeuralEngine",
    );
}
