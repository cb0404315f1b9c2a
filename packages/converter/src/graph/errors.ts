/** Typed errors of the graph builders. */
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
