/**
 * The tokenizer files a conversion copies are checked first: a converted chain whose tokenizer does
 * not load, has no vocabulary, names an EOS id the model cannot emit, or whose chat template does
 * not render would convert "successfully" and fail (or silently drop the user's text) only when run.
 * Each problem is an AnemllError naming the file. A checkpoint without tokenizer.json (a synthetic
 * one) is converted without a tokenizer; the runtimes then ask for --tokenizer.
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

/** Loads `dir`'s tokenizer as the runtimes will and tries it; throws TokenizerCheckError. */
export async function checkTokenizerFiles(
  dir: string,
  config: Qwen35Config,
  eosTokenIds: number[],
): Promise<void> {
  const tokenizerFile = join(dir, "tokenizer.json");
  if (!existsSync(tokenizerFile)) return;
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
