/**
 * The tokenizer files a conversion copies are checked first: a converted chain whose tokenizer does
 * not load, has no vocabulary, names an EOS id the model cannot emit, or whose chat template does
 * not render would convert "successfully" and fail (or silently drop the user's text) only when run.
 * Each problem is an AnemllError naming the file. The runtimes read the tokenizer from
 * tokenizer.json alone, so a checkpoint that has other tokenizer files but not that one is refused;
 * one with no tokenizer files at all (a synthetic checkpoint: weights and config) is converted
 * without a tokenizer, saying so — the runtimes then run on token ids or ask for --tokenizer.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { loadTokenizer } from "@anemll-qwen35/generate";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";

export class TokenizerCheckError extends AnemllError {
  readonly file: string;
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super("E_TOKENIZER_CHECK", `${file}: ${message}`, options);
    this.file = file;
  }
}

const PROBE = "Hello, world! 123";

/** Files of a Hugging Face tokenizer besides tokenizer.json: a checkpoint meant to carry one. */
const OTHER_TOKENIZER_FILES = [
  "tokenizer_config.json",
  "chat_template.jinja",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "tokenizer.model",
];

/**
 * Loads `dir`'s tokenizer as the runtimes will and tries it; throws TokenizerCheckError. `log` hears
 * that a checkpoint without any tokenizer files converts without one.
 */
export async function checkTokenizerFiles(
  dir: string,
  config: Qwen35Config,
  eosTokenIds: number[],
  log: (line: string) => void = () => {},
): Promise<void> {
  const tokenizerFile = join(dir, "tokenizer.json");
  if (!existsSync(tokenizerFile)) {
    const others = OTHER_TOKENIZER_FILES.filter((f) => existsSync(join(dir, f)));
    if (others.length > 0) {
      throw new TokenizerCheckError(
        tokenizerFile,
        `is missing, though the checkpoint has ${others.join(", ")}: the converted model would not run, ` +
          "since the runtimes read the tokenizer from tokenizer.json; copy it from the model's repository",
      );
    }
    log(
      `${dir} has no tokenizer files: converting without a tokenizer (run the result on token ids, or with --tokenizer DIR)`,
    );
    return;
  }
  const tok = await loadTokenizer(dir, { eosTokenIds }).catch((cause: Error) => {
    if (cause instanceof AnemllError) throw cause; // names its file already
    throw new TokenizerCheckError(tokenizerFile, `does not load: ${cause.message}`, { cause });
  });
  if (tok.vocabSize === 0) throw new TokenizerCheckError(tokenizerFile, "its vocabulary is empty");
  if (tok.vocabSize > config.vocabSize) {
    throw new TokenizerCheckError(
      tokenizerFile,
      `its ${tok.vocabSize} ids do not fit the model's vocab_size ${config.vocabSize}`,
    );
  }
  const ids = tok.encode(PROBE);
  if (ids.length === 0 || tok.decode(ids) !== PROBE) {
    throw new TokenizerCheckError(
      tokenizerFile,
      `does not round-trip text ("${PROBE}" → ${JSON.stringify(ids)} → "${tok.decode(ids)}"): the vocabulary or merges are broken`,
    );
  }
  for (const id of tok.eosTokenIds) {
    if (!Number.isInteger(id) || id < 0 || id >= config.vocabSize) {
      throw new TokenizerCheckError(
        join(dir, "tokenizer_config.json"),
        `end-of-sequence id ${id} is outside the model's vocabulary (0..${config.vocabSize - 1})`,
      );
    }
  }
  if (tok.chatTemplateSource === undefined) return;
  const templateFile = existsSync(join(dir, "chat_template.jinja"))
    ? join(dir, "chat_template.jinja")
    : join(dir, "tokenizer_config.json");
  try {
    const { text } = tok.encodeChat([{ role: "user", content: PROBE }]);
    if (!text.includes(PROBE))
      throw new Error(`the rendered prompt does not contain the message: ${JSON.stringify(text)}`);
  } catch (cause) {
    throw new TokenizerCheckError(
      templateFile,
      `the chat template does not render a message: ${(cause as Error).message}`,
      {
        cause,
      },
    );
  }
}
