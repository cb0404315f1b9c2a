import { AnemllError } from "@anemll-qwen35/core";

/** A tokenizer file (`tokenizer.json`, `tokenizer_config.json`, …) that must exist does not. */
export class MissingTokenizerFileError extends AnemllError {
  readonly file: string;
  constructor(file: string, why: string, options?: { cause?: unknown }) {
    super("E_TOKENIZER_FILE_MISSING", `${file}: ${why}`, options);
    this.file = file;
  }
}

/** A tokenizer file exists but is not what the Hugging Face format says it should be. */
export class MalformedTokenizerFileError extends AnemllError {
  readonly file: string;
  constructor(file: string, why: string, options?: { cause?: unknown }) {
    super("E_TOKENIZER_FILE_MALFORMED", `${file}: ${why}`, options);
    this.file = file;
  }
}

/** The chat template is missing, does not parse, or failed while rendering. */
export class ChatTemplateError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_CHAT_TEMPLATE", message, options);
  }
}

/**
 * Generation was asked for something the model cannot give, e.g. temperature sampling from a model
 * whose head returns only the arg-max token.
 */
export class UnsupportedSamplingError extends AnemllError {
  constructor(message: string) {
    super("E_UNSUPPORTED_SAMPLING", message);
  }
}
