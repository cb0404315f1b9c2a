/**
 * Typed errors of the MIL layer. Each names the op (type and name), the parameter or output and
 * what was expected, so that the message alone says what to fix.
 */
import { AnemllError } from "@anemll-qwen35/core";

/** Where in a program an error happened. */
export interface OpLocation {
  /** Op type, e.g. "linear". */
  readonly opType: string;
  /** The op's name attribute, e.g. "q_proj". */
  readonly opName: string;
  /** Function name, when known. */
  readonly fn?: string;
}

function where(loc: OpLocation): string {
  return `${loc.fn ? `${loc.fn}: ` : ""}${loc.opType} '${loc.opName}'`;
}

/** An op's inputs do not fit its signature (dtype, shape, const-ness, missing or extra input). */
export class MilTypeError extends AnemllError {
  readonly opType: string;
  readonly opName: string;
  readonly param: string | undefined;
  readonly detail: string;
  constructor(loc: OpLocation, param: string | undefined, detail: string, options?: { cause?: unknown }) {
    super("E_MIL_TYPE", `${where(loc)}: ${param ? `${param} ` : ""}${detail}`, options);
    this.opType = loc.opType;
    this.opName = loc.opName;
    this.param = param;
    this.detail = detail;
  }
}

/** The op type is not defined in the registry (or not in the function's opset). */
export class MilUnknownOpError extends AnemllError {
  readonly opType: string;
  readonly opName: string;
  constructor(loc: OpLocation, detail = "is not a known MIL op") {
    super("E_MIL_UNKNOWN_OP", `${where(loc)}: op type '${loc.opType}' ${detail}`);
    this.opType = loc.opType;
    this.opName = loc.opName;
  }
}

/** A binding names a variable that is not visible where it is used. */
export class MilBindingError extends AnemllError {
  readonly opType: string;
  readonly opName: string;
  readonly param: string;
  readonly varName: string;
  constructor(loc: OpLocation, param: string, varName: string, detail = "is not defined before this op") {
    super("E_MIL_UNBOUND", `${where(loc)}: ${param} binds to '${varName}', which ${detail}`);
    this.opType = loc.opType;
    this.opName = loc.opName;
    this.param = param;
    this.varName = varName;
  }
}

/** A declared output type differs from the type the op infers. */
export class MilOutputTypeError extends AnemllError {
  readonly opType: string;
  readonly opName: string;
  readonly output: string;
  readonly declared: string;
  readonly inferred: string;
  constructor(loc: OpLocation, output: string, declared: string, inferred: string) {
    super(
      "E_MIL_OUTPUT_TYPE",
      `${where(loc)}: output '${output}' is declared ${declared} but the op infers ${inferred}`,
    );
    this.opType = loc.opType;
    this.opName = loc.opName;
    this.output = output;
    this.declared = declared;
    this.inferred = inferred;
  }
}

/** A program-level defect that is not about one op (names, outputs, functions). */
export class MilProgramError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_MIL_PROGRAM", message, options);
  }
}

/** The interpreter could not run (bad inputs, missing state, unloadable constant). */
export class MilRuntimeError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_MIL_RUNTIME", message, options);
  }
}

/** An op produced inf or NaN (raised in the interpreter's "throw" mode). */
export class MilNonFiniteError extends AnemllError {
  readonly opType: string;
  readonly opName: string;
  readonly output: string;
  constructor(loc: OpLocation, output: string, count: number, total: number) {
    super(
      "E_MIL_NON_FINITE",
      `${where(loc)}: output '${output}' has ${count} of ${total} values inf or NaN (first op to produce them)`,
    );
    this.opType = loc.opType;
    this.opName = loc.opName;
    this.output = output;
  }
}
