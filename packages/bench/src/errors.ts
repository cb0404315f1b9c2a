/** Typed errors of the bench package: each names the scenario, option or file and what was expected. */
import { AnemllError } from "@anemll-qwen35/core";

/** A scenario name, scale or option value that does not exist. */
export class BenchOptionError extends AnemllError {
  readonly option: string;
  constructor(option: string, message: string) {
    super("E_BENCH_OPTION", `${option}: ${message}`);
    this.option = option;
  }
}

/** A model a scenario needs could not be found or prepared. */
export class BenchModelError extends AnemllError {
  readonly model: string;
  constructor(model: string, message: string, options?: { cause?: unknown }) {
    super("E_BENCH_MODEL", `${model}: ${message}`, options);
    this.model = model;
  }
}

/** A background process of the parallel scenario failed or broke the protocol. */
export class BenchWorkerError extends AnemllError {
  readonly worker: string;
  constructor(worker: string, message: string, options?: { cause?: unknown }) {
    super("E_BENCH_WORKER", `worker ${worker}: ${message}`, options);
    this.worker = worker;
  }
}

/** A result file that does not match the schema (names the file and the first problems). */
export class BenchResultError extends AnemllError {
  readonly file: string;
  constructor(file: string, message: string) {
    super("E_BENCH_RESULT", `${file}: ${message}`);
    this.file = file;
  }
}
