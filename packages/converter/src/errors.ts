/** The converter's typed errors: bad options, models it does not cover, ANE limits, weights, interruptions. */
import { AnemllError } from "@anemll-qwen35/core";

/**
 * The checkpoint is a Qwen3.5 model these ANE graphs do not cover (today: the MoE models, whose
 * routed experts need a per-token top-k gather over hundreds of expert matrices — dynamic weight
 * selection that a static ANE program cannot express efficiently).
 */
export class UnsupportedModelError extends AnemllError {
  /** Where to run the model instead. */
  readonly alternative: string;
  readonly modelType: string;
  constructor(modelType: string, message: string, alternative = "@anemll-qwen35/runtime-mlx") {
    super("E_UNSUPPORTED_MODEL", message);
    this.modelType = modelType;
    this.alternative = alternative;
  }
}

/** A component spec or build option is out of range; names the field and what was expected. */
export class GraphOptionError extends AnemllError {
  readonly field: string;
  /** What is wrong, without the field name. */
  readonly detail: string;
  constructor(field: string, message: string) {
    super("E_GRAPH_OPTION", `${field}: ${message}`);
    this.field = field;
    this.detail = message;
  }
}

/**
 * A conv or matmul of a built component has a dimension the ANE cannot take (ane.ts ANE_MAX_DIM);
 * names the op, the operand, its shape and — for a weight — the checkpoint tensor.
 */
export class AneLimitError extends AnemllError {
  readonly op: string;
  readonly operand: string;
  readonly shape: readonly number[];
  readonly tensor: string | undefined;
  constructor(
    component: string,
    found: { op: string; opType: string; operand: string; shape: readonly number[]; tensor?: string },
    limit: number,
  ) {
    const what = found.tensor ? `weight of tensor "${found.tensor}"` : found.operand;
    super(
      "E_ANE_LIMIT",
      `${component}: ${found.opType} "${found.op}": ${what} [${found.shape.join(", ")}] has a dimension over the ANE's ${limit} limit` +
        (found.tensor
          ? " — split the projection (lm_head pieces: lmHeadMaxRows; MLP pieces: mlpMaxChannels)"
          : ""),
    );
    this.op = found.op;
    this.operand = found.operand;
    this.shape = found.shape;
    this.tensor = found.tensor;
  }
}

/** A conversion option is out of range or malformed; names the CLI flag (`option`) and what was expected. */
export class ConvertOptionError extends AnemllError {
  readonly option: string;
  constructor(option: string, message: string) {
    super("E_CONVERT_OPTION", `--${option} ${message}`);
    this.option = option;
  }
}

/** The conversion was stopped (its signal aborted); what was finished is kept for `resume`. */
export class ConvertInterruptedError extends AnemllError {
  /** The folder holding the finished packages and weights. */
  readonly partial: string;
  constructor(partial: string, finished: { components: number; weights: number }) {
    const kept =
      finished.components + finished.weights > 0
        ? `${finished.components} finished package(s) and ${finished.weights} finished weight(s) of the next are kept in ${partial}`
        : `the work so far is kept in ${partial}`;
    super(
      "E_INTERRUPTED",
      `conversion interrupted; ${kept} — run the same command with --resume to continue`,
    );
    this.partial = partial;
  }
}

/** Re-thrown around a weight that fails to encode, naming the tensor. */
export class WeightEncodingError extends AnemllError {
  readonly tensor: string;
  constructor(tensor: string, cause: unknown) {
    super("E_WEIGHT_ENCODING", `cannot encode weight "${tensor}": ${(cause as Error).message}`, { cause });
    this.tensor = tensor;
  }
}
