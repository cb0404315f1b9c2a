/** Typed errors of the cost planner: each names the file, field or option and what was expected. */
import { AnemllError } from "@anemll-qwen35/core";

/** A chain folder or model.json that cannot be read as a chain of packages. */
export class ChainError extends AnemllError {
  readonly path: string;
  constructor(path: string, detail: string, options?: { cause?: unknown }) {
    super("E_COSTPLAN_CHAIN", `${path}: ${detail}`, options);
    this.path = path;
  }
}

/** An option given to costplan() that is not one it knows (unknown chip, bad function name, ...). */
export class CostplanOptionError extends AnemllError {
  readonly option: string;
  constructor(option: string, detail: string) {
    super("E_COSTPLAN_OPTION", `costplan option '${option}': ${detail}`);
    this.option = option;
  }
}

/** MLComputePlan / the measured loop was asked for where it cannot run (not macOS, addon not built). */
export class NativePlanUnavailableError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_COSTPLAN_NATIVE_UNAVAILABLE", message, options);
  }
}

/** A report that does not match the report schema (e.g. read back from a JSON file). */
export class ReportSchemaError extends AnemllError {
  constructor(where: string, detail: string, options?: { cause?: unknown }) {
    super("E_COSTPLAN_REPORT", `${where}: ${detail}`, options);
  }
}
