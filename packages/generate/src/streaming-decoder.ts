/** The part of a tokenizer the streaming decoder needs. */
export interface DecodesIds {
  decode(ids: ArrayLike<number>, options?: { skipSpecialTokens?: boolean }): string;
  isSpecial(id: number): boolean;
}

export interface StreamingDecoderOptions {
  /** Drop added tokens flagged `special` (e.g. `<|im_start|>`). Default false. */
  skipSpecialTokens?: boolean;
}

const REPLACEMENT = "\uFFFD";
/**
 * A UTF-8 character is at most 4 bytes and every token carries at least one, so a trailing U+FFFD
 * that survives this many held tokens is a real U+FFFD in the text, not half a character.
 */
const MAX_HELD_TOKENS = 8;

/**
 * Incremental detokenization for streaming.
 *
 * Byte-level BPE splits multi-byte characters across tokens (😊 is often two tokens), and decoding
 * a lone half gives U+FFFD. Decoding each token alone also loses context-dependent spacing in
 * decoders that strip a leading space. So the decoder re-decodes a small window: the tokens already
 * emitted last time (context) plus the ones not yet fully emitted (pending), and returns only the
 * new text after the context's text, holding back a trailing U+FFFD until the character completes.
 */
export class StreamingDecoder {
  private readonly tokenizer: DecodesIds;
  private readonly skipSpecial: boolean;
  /** Tokens whose text was fully emitted; decoded again only as left context. */
  private context: number[] = [];
  private contextLength = 0;
  /** Tokens with text not yet (fully) emitted. */
  private pending: number[] = [];
  /** Characters of decode(context ++ pending) already emitted. */
  private emitted = 0;

  constructor(tokenizer: DecodesIds, options: StreamingDecoderOptions = {}) {
    this.tokenizer = tokenizer;
    this.skipSpecial = options.skipSpecialTokens ?? false;
  }

  /** Adds one or more ids; returns the text that is now complete (possibly ""). */
  push(ids: number | ArrayLike<number>): string {
    let out = "";
    if (typeof ids === "number") return this.pushOne(ids);
    for (let i = 0; i < ids.length; i++) out += this.pushOne(ids[i]);
    return out;
  }

  /** Returns whatever is still held (an incomplete character becomes U+FFFD) and starts over. */
  flush(): string {
    const out = this.pending.length > 0 ? this.windowText().slice(this.emitted) : "";
    this.context = [];
    this.contextLength = 0;
    this.pending = [];
    this.emitted = 0;
    return out;
  }

  private pushOne(id: number): string {
    if (this.skipSpecial && this.tokenizer.isSpecial(id)) return "";
    if (this.pending.length === 0) this.emitted = this.contextLength;
    this.pending.push(id);
    const text = this.windowText();
    let end = text.length;
    if (this.pending.length < MAX_HELD_TOKENS) {
      while (end > this.emitted && text[end - 1] === REPLACEMENT) end--;
    }
    const out = end > this.emitted ? text.slice(this.emitted, end) : "";
    this.emitted = Math.max(this.emitted, end);
    if (end === text.length) {
      // Everything pending is out and ends on a whole character: it becomes the next context.
      this.context = this.pending;
      this.contextLength = this.tokenizer.decode(this.context, {
        skipSpecialTokens: this.skipSpecial,
      }).length;
      this.pending = [];
    }
    return out;
  }

  private windowText(): string {
    return this.tokenizer.decode(this.context.concat(this.pending), { skipSpecialTokens: this.skipSpecial });
  }
}
