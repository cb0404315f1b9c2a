import { AnemllError } from "@anemll-qwen35/core";

/** A model could not be opened: no such folder, an unknown layout, a backend that is unavailable here. */
export class ModelLoadError extends AnemllError {
  /** The reference the caller gave (a folder or `hf:owner/name`). */
  readonly model: string;
  constructor(model: string, message: string, options?: { cause?: unknown }) {
    super("E_MODEL_LOAD", `${model}: ${message}`, options);
    this.model = model;
  }
}
