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
  constructor(field: string, message: string) {
    super("E_GRAPH_OPTION", `${field}: ${message}`);
    this.field = field;
  }
}
