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

/**
 * A JSON Schema given for constrained decoding uses a keyword the engine does not enforce exactly
 * (see SUPPORTED_SCHEMA_KEYWORDS). `where` names the schema (`jsonSchema`,
 * `tools[0].function.parameters`), `path` the place inside it, `keyword` the offending keyword.
 */
export class UnsupportedSchemaError extends AnemllError {
  readonly where: string;
  readonly path: readonly (string | number)[];
  readonly keyword: string | undefined;
  /** What is wrong, without the place (the message is `place: reason`). */
  readonly reason: string;
  constructor(
    where: string,
    path: readonly (string | number)[],
    keyword: string | undefined,
    reason: string,
  ) {
    super("E_UNSUPPORTED_SCHEMA", `${schemaPlace(where, path)}: ${reason}`);
    this.where = where;
    this.path = path;
    this.keyword = keyword;
    this.reason = reason;
  }
}

/** `where` + `path` as a field name: `jsonSchema.properties.tags.items`. */
export function schemaPlace(where: string, path: readonly (string | number)[]): string {
  let s = where;
  for (const p of path)
    s += typeof p === "number" ? `[${p}]` : /^[A-Za-z_$][\w$]*$/.test(p) ? `.${p}` : `[${JSON.stringify(p)}]`;
  return s;
}

/** A grammar (or a schema turned into one) that the structured-generation engine could not compile. */
export class GrammarError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_GRAMMAR", message, options);
  }
}

/**
 * `speculative: "mtp"` asked of a model that cannot speculate: no MTP head in the conversion or
 * checkpoint, or a head that returns only its top-1 token while the sampling needs its logits.
 */
export class SpeculativeUnsupportedError extends AnemllError {
  constructor(message: string) {
    super("E_SPECULATIVE_UNSUPPORTED", message);
  }
}
