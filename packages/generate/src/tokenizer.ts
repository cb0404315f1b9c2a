import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { type ApplyChatTemplateOptions, type ChatMessage, ChatTemplate } from "./chat-template.js";
import { ChatTemplateError, MalformedTokenizerFileError, MissingTokenizerFileError } from "./errors.js";
import { LiteralEscaper } from "./literal-text.js";
import { StreamingDecoder, type StreamingDecoderOptions } from "./streaming-decoder.js";

export interface LoadTokenizerOptions {
  /**
   * End-of-sequence ids the model defines beyond the tokenizer's own `eos_token`, e.g. Qwen3.5's
   * `config.text_config.eos_token_id` (248044, `<|endoftext|>`) next to `<|im_end|>` (248046).
   */
  eosTokenIds?: Iterable<number>;
}

export interface TokenizerFromJsonOptions extends LoadTokenizerOptions {
  /** Jinja source of the chat template, when it does not live inside `tokenizer_config.json`. */
  chatTemplate?: string;
  /** Where the JSON came from, for error messages. */
  source?: string;
}

/** What `Tokenizer.fromJSON` needs to build a tokenizer again (e.g. in a worker thread). */
export interface TokenizerDefinition {
  readonly tokenizerJson: Record<string, unknown>;
  readonly tokenizerConfig: Record<string, unknown>;
  readonly options: TokenizerFromJsonOptions;
}

/** Text every tokenizer must encode and decode without failing (probed on load). */
const PROBE = "Hello, world! 123 \u00e9\u4e16 \n";

interface AddedTokenJson {
  id: number;
  content: string;
  special?: boolean;
  single_word?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  normalized?: boolean;
}

/**
 * A Hugging Face `tokenizer.json` tokenizer (Qwen3.5: byte-level BPE, 248,044 merges-built ids plus
 * 33 added tokens) run through `@huggingface/tokenizers`, with the metadata generation needs: EOS
 * ids, added-token ids by name and the chat template. Never prepends a BOS (Qwen3.5 has none).
 */
export class Tokenizer {
  /** Ids that end generation: `eos_token` of tokenizer_config, generation_config's, and the caller's. */
  readonly eosTokenIds: readonly number[];
  /** Jinja source of the chat template, if the tokenizer folder has one. */
  readonly chatTemplateSource: string | undefined;
  /** One more than the largest id the tokenizer can decode. */
  readonly vocabSize: number;
  /** The inputs of `fromJSON` that rebuild this tokenizer (plain data: it can go to a worker). */
  readonly definition: TokenizerDefinition;

  private readonly hf: HfTokenizer;
  /** The same tokenizer without its special added tokens: encodes their text as plain text. */
  private plain: HfTokenizer | undefined;
  private escaper: LiteralEscaper | undefined;
  private longestToken: number | undefined;
  private readonly json: Record<string, unknown>;
  private readonly addedList: readonly AddedTokenJson[];
  private readonly added = new Map<string, number>();
  private readonly specialIds = new Set<number>();
  private readonly eosSet: Set<number>;
  private readonly cleanUpSpaces: boolean;
  private readonly config: Record<string, unknown>;
  private template: ChatTemplate | undefined;

  private constructor(
    hf: HfTokenizer,
    json: Record<string, unknown>,
    addedTokens: AddedTokenJson[],
    config: Record<string, unknown>,
    eosTokenIds: number[],
    chatTemplateSource: string | undefined,
    source: string | undefined,
  ) {
    this.hf = hf;
    this.json = json;
    this.addedList = addedTokens;
    this.config = config;
    for (const t of addedTokens) {
      this.added.set(t.content, t.id);
      if (t.special) this.specialIds.add(t.id);
    }
    this.eosSet = new Set(eosTokenIds);
    this.eosTokenIds = [...this.eosSet];
    this.chatTemplateSource = chatTemplateSource;
    this.vocabSize = hf.model?.vocab.length ?? 0;
    this.definition = {
      tokenizerJson: json,
      tokenizerConfig: config,
      options: { eosTokenIds: this.eosTokenIds, chatTemplate: chatTemplateSource, source },
    };
    // Byte-level BPE decodes exactly; the library's default (true) would glue " ." and " 's".
    this.cleanUpSpaces = config.clean_up_tokenization_spaces === true;
  }

  /**
   * Builds a tokenizer from already-parsed `tokenizer.json` and `tokenizer_config.json` objects.
   * Added tokens that only `tokenizer_config.json`'s `added_tokens_decoder` lists (Qwen3.5 keeps 7
   * of its 33 there) are merged in so that they encode and decode as single tokens.
   */
  static fromJSON(
    tokenizerJson: unknown,
    tokenizerConfig: unknown = {},
    options: TokenizerFromJsonOptions = {},
  ): Tokenizer {
    const source = options.source ?? "tokenizer.json";
    const configSource = options.source
      ? join(options.source, "..", "tokenizer_config.json")
      : "tokenizer_config.json";
    if (!isRecord(tokenizerJson)) throw new MalformedTokenizerFileError(source, "expected a JSON object");
    if (!isRecord(tokenizerJson.model) || !isRecord(tokenizerJson.model.vocab)) {
      throw new MalformedTokenizerFileError(source, 'expected "model.vocab" to be an object of token → id');
    }
    // with no vocabulary every text would encode to nothing: the prompt would vanish silently
    if (Object.keys(tokenizerJson.model.vocab).length === 0)
      throw new MalformedTokenizerFileError(source, '"model.vocab" is empty');
    checkMerges(tokenizerJson.model.merges, source);
    if (!isRecord(tokenizerConfig))
      throw new MalformedTokenizerFileError(configSource, "expected a JSON object");

    const addedTokens = readAddedTokens(tokenizerJson.added_tokens ?? [], source);
    const known = new Set(addedTokens.map((t) => t.id));
    if (tokenizerConfig.added_tokens_decoder !== undefined) {
      if (!isRecord(tokenizerConfig.added_tokens_decoder)) {
        throw new MalformedTokenizerFileError(configSource, '"added_tokens_decoder" must be an object');
      }
      for (const [key, value] of Object.entries(tokenizerConfig.added_tokens_decoder)) {
        const id = Number(key);
        if (!Number.isInteger(id) || !isRecord(value) || typeof value.content !== "string") {
          throw new MalformedTokenizerFileError(
            configSource,
            `added_tokens_decoder["${key}"] must map an integer id to {content: string, …}`,
          );
        }
        if (known.has(id)) continue;
        addedTokens.push({ ...(value as Omit<AddedTokenJson, "id">), id, content: value.content });
        known.add(id);
      }
    }
    addedTokens.sort((a, b) => a.id - b.id);

    // Every component key must exist for the library; null means "none" in the HF format.
    const json: Record<string, unknown> = { ...tokenizerJson, added_tokens: addedTokens };
    for (const key of ["normalizer", "pre_tokenizer", "post_processor", "decoder"]) json[key] ??= null;

    let hf: HfTokenizer;
    try {
      hf = new HfTokenizer(json, tokenizerConfig);
      // the library reads most of its config lazily: a first encode and decode surface its errors now
      const probe = hf.encode(PROBE, { add_special_tokens: false }).ids;
      if (probe.length > 0) hf.decode(probe);
    } catch (err) {
      throw new MalformedTokenizerFileError(
        source,
        `could not build the tokenizer: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }

    const eos: number[] = [];
    const eosName = tokenName(tokenizerConfig.eos_token);
    if (eosName !== undefined) {
      const id = hf.token_to_id(eosName);
      if (id === undefined) {
        throw new MalformedTokenizerFileError(
          configSource,
          `eos_token "${eosName}" is not in the vocabulary`,
        );
      }
      eos.push(id);
    }
    for (const id of options.eosTokenIds ?? []) eos.push(id);

    let template = options.chatTemplate;
    if (template === undefined) template = templateFromConfig(tokenizerConfig.chat_template, configSource);
    return new Tokenizer(hf, json, addedTokens, tokenizerConfig, eos, template, options.source);
  }

  /** Text → ids. Added tokens (`<|im_start|>`, `<think>`, …) written in the text become their ids. */
  encode(text: string): number[] {
    if (text.length === 0) return [];
    return this.library("encode", () => this.hf.encode(text, { add_special_tokens: false }).ids);
  }

  /** Runs a @huggingface/tokenizers call; its failures (a broken tokenizer.json) become typed errors. */
  private library<T>(what: string, call: () => T): T {
    try {
      return call();
    } catch (err) {
      if (err instanceof AnemllError) throw err;
      throw new MalformedTokenizerFileError(
        this.definition.options.source ?? "tokenizer.json",
        `the tokenizer failed to ${what}: ${(err as Error)?.message ?? String(err)}`,
        { cause: err },
      );
    }
  }

  /**
   * Ids → text. Ids the tokenizer does not know (the padded embedding rows 248,077..248,319 of
   * Qwen3.5) have no text and are dropped. A multi-byte character cut at the end shows as U+FFFD;
   * use `StreamingDecoder` for token-by-token output.
   */
  decode(ids: ArrayLike<number>, options: { skipSpecialTokens?: boolean } = {}): string {
    const known: number[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (id >= 0 && id < this.vocabSize && this.hf.id_to_token(id) !== undefined) known.push(id);
    }
    if (known.length === 0) return "";
    return this.library("decode", () =>
      this.hf.decode(known, {
        skip_special_tokens: options.skipSpecialTokens ?? false,
        clean_up_tokenization_spaces: this.cleanUpSpaces,
      }),
    );
  }

  /**
   * The most characters one token stands for (Qwen3.5: 128), so a text of n characters needs at
   * least n / maxTokenChars tokens: a bound that refuses an oversized prompt without encoding it.
   */
  get maxTokenChars(): number {
    if (this.longestToken === undefined) {
      let longest = 1;
      for (let id = 0; id < this.vocabSize; id++)
        longest = Math.max(longest, this.hf.id_to_token(id)?.length ?? 0);
      this.longestToken = longest;
    }
    return this.longestToken;
  }

  /** The id of a token by its text (`"<|im_end|>"` → 248046), or undefined. */
  tokenId(token: string): number | undefined {
    return this.added.get(token) ?? this.hf.token_to_id(token);
  }

  /** The token text of an id (byte-level form for BPE ids, e.g. `"Ġthe"`), or undefined. */
  idToToken(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  /** Added tokens by content → id (Qwen3.5: the 33 ids 248044..248076). */
  get addedTokens(): ReadonlyMap<string, number> {
    return this.added;
  }

  /** True for added tokens flagged `special` (skipped by `decode(…, {skipSpecialTokens: true})`). */
  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }

  isEos(id: number): boolean {
    return this.eosSet.has(id);
  }

  /** A decoder that turns ids pushed one at a time into text, never splitting a character. */
  streamingDecoder(options: StreamingDecoderOptions = {}): StreamingDecoder {
    return new StreamingDecoder(this, options);
  }

  /** The parsed chat template; throws `ChatTemplateError` when the tokenizer folder has none. */
  get chatTemplate(): ChatTemplate {
    if (this.template) return this.template;
    if (this.chatTemplateSource === undefined) {
      throw new ChatTemplateError(
        "this tokenizer has no chat template (looked for chat_template.jinja and tokenizer_config.json's " +
          '"chat_template"); pass a raw `prompt` instead of `messages`',
      );
    }
    this.template = new ChatTemplate(this.chatTemplateSource, {
      bosToken: tokenName(this.config.bos_token),
      eosToken: tokenName(this.config.eos_token),
      padToken: tokenName(this.config.pad_token),
    });
    return this.template;
  }

  /**
   * Renders chat messages to the prompt text (`add_generation_prompt` defaults to true). For the
   * prompt's ids use `encodeChat`: encoding this text would turn special-token text inside the
   * messages into control tokens.
   */
  applyChatTemplate(messages: ChatMessage[], options: ApplyChatTemplateOptions = {}): string {
    return this.chatTemplate.render(messages, options);
  }

  /**
   * Renders and encodes chat messages. Special tokens the template writes (`<|im_start|>`, …) are
   * control tokens; the same text inside message content, tool results, tool specs or arguments is
   * encoded as plain text, so untrusted content cannot forge a turn. `suffix` is trusted text
   * appended to the rendered prompt (e.g. the start of a forced tool call).
   */
  encodeChat(
    messages: ChatMessage[],
    options: ApplyChatTemplateOptions & { suffix?: string } = {},
  ): { ids: number[]; text: string } {
    const { suffix = "", ...render } = options;
    this.escaper ??= new LiteralEscaper(this.addedList.filter((t) => t.special).map((t) => t.content));
    const esc = this.escaper;
    const rendered =
      this.chatTemplate.render(esc.escape(messages), {
        ...render,
        tools: esc.escape(render.tools),
        extra: esc.escape(render.extra),
      }) + suffix;
    const parts = esc.split(rendered);
    const text = parts.map((p) => p.text).join("");
    if (!parts.some((p) => p.literal)) return { ids: this.encode(text), text };
    return { ids: this.encodeParts(parts), text };
  }

  /**
   * Template parts keep their special tokens; the text between them, literal spans included, is
   * encoded in one piece by the tokenizer without special tokens (so BPE sees the same runs of text
   * it would for a prompt without escapes).
   */
  private encodeParts(parts: readonly { text: string; literal: boolean }[]): number[] {
    const byContent = new Map(this.addedList.filter((t) => t.special).map((t) => [t.content, t]));
    const esc = this.escaper as LiteralEscaper;
    this.plain ??= this.library(
      "build",
      () =>
        new HfTokenizer(
          { ...this.json, added_tokens: this.addedList.filter((t) => !t.special) },
          this.config,
        ),
    );
    const plain = this.plain;
    const ids: number[] = [];
    let text = "";
    let rstrip = false;
    const flush = () => {
      if (text.length > 0)
        for (const id of plain.encode(text, { add_special_tokens: false }).ids) ids.push(id);
      text = "";
    };
    for (const part of parts) {
      const pieces = part.literal ? [part.text] : esc.splitSpecials(part.text);
      for (const [i, piece] of pieces.entries()) {
        const token = !part.literal && i % 2 === 1 ? byContent.get(piece) : undefined;
        if (token === undefined) {
          text += rstrip ? piece.trimStart() : piece;
          rstrip = rstrip && piece.trim() === "";
          continue;
        }
        if (token.lstrip) text = text.trimEnd();
        flush();
        ids.push(token.id);
        rstrip = token.rstrip === true;
      }
    }
    flush();
    return ids;
  }
}

/**
 * Loads `tokenizer.json` (required), `tokenizer_config.json` (optional), `chat_template.jinja`
 * (optional; newer Hugging Face repos keep the template there instead of in tokenizer_config) and
 * `generation_config.json` (optional; its `eos_token_id` joins the EOS ids) from a folder.
 */
export async function loadTokenizer(dir: string, options: LoadTokenizerOptions = {}): Promise<Tokenizer> {
  const tokenizerPath = join(dir, "tokenizer.json");
  const tokenizerJson = await readJson(tokenizerPath, true);
  const configPath = join(dir, "tokenizer_config.json");
  const config = (await readJson(configPath, false)) ?? {};
  const templatePath = join(dir, "chat_template.jinja");
  const chatTemplate = await readText(templatePath);

  const eos = [...(options.eosTokenIds ?? [])];
  const genPath = join(dir, "generation_config.json");
  const gen = await readJson(genPath, false);
  if (gen !== undefined) {
    if (!isRecord(gen)) throw new MalformedTokenizerFileError(genPath, "expected a JSON object");
    const e = gen.eos_token_id;
    const ids = e === undefined || e === null ? [] : Array.isArray(e) ? e : [e];
    for (const id of ids) {
      if (!Number.isInteger(id)) {
        throw new MalformedTokenizerFileError(
          genPath,
          `eos_token_id must be an integer or a list of them, got ${e}`,
        );
      }
      eos.push(id as number);
    }
  }

  return Tokenizer.fromJSON(tokenizerJson, config, {
    eosTokenIds: eos,
    chatTemplate,
    source: tokenizerPath,
  });
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

async function readJson(path: string, required: boolean): Promise<unknown> {
  const text = await readText(path);
  if (text === undefined) {
    if (required)
      throw new MissingTokenizerFileError(path, "not found (a Hugging Face tokenizer folder needs it)");
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new MalformedTokenizerFileError(path, `not valid JSON: ${(err as Error).message}`, { cause: err });
  }
}

function readAddedTokens(value: unknown, source: string): AddedTokenJson[] {
  if (!Array.isArray(value)) throw new MalformedTokenizerFileError(source, '"added_tokens" must be an array');
  return value.map((t, i) => {
    if (!isRecord(t) || !Number.isInteger(t.id) || typeof t.content !== "string") {
      throw new MalformedTokenizerFileError(
        source,
        `added_tokens[${i}] must have an integer "id" and a string "content"`,
      );
    }
    return { ...(t as unknown as AddedTokenJson) };
  });
}

/**
 * BPE merges are pairs of tokens, written "a b" (older files) or ["a", "b"]; the library would fail
 * on anything else with its own TypeError ("x.split is not a function"), naming no entry.
 */
function checkMerges(merges: unknown, source: string): void {
  if (merges === undefined) return;
  if (!Array.isArray(merges)) {
    throw new MalformedTokenizerFileError(source, `"model.merges" must be a list, got ${shortJson(merges)}`);
  }
  merges.forEach((m, i) => {
    const pair =
      typeof m === "string"
        ? m.split(" ")
        : Array.isArray(m) && m.every((t) => typeof t === "string")
          ? (m as string[])
          : [];
    if (pair.length !== 2 || pair.some((t) => t === "")) {
      throw new MalformedTokenizerFileError(
        source,
        `model.merges[${i}] must be a pair of tokens ("a b" or ["a", "b"]), got ${shortJson(m)}`,
      );
    }
  });
}

const shortJson = (v: unknown): string => {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
};

/** tokenizer_config stores special tokens either as a string or as an AddedToken-like object. */
function tokenName(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (isRecord(value) && typeof value.content === "string") return value.content;
  return undefined;
}

function templateFromConfig(value: unknown, source: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return value;
  // Older multi-template form: [{name: "default", template: "…"}, {name: "tool_use", …}].
  if (Array.isArray(value)) {
    const named = value.filter(isRecord);
    const pick = named.find((t) => t.name === "default") ?? named[0];
    if (pick && typeof pick.template === "string") return pick.template;
  }
  throw new MalformedTokenizerFileError(
    source,
    '"chat_template" must be a string or a list of {name, template}',
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
