/**
 * Keeping message content literal through the chat template. A user message or a tool result may
 * contain the text of a special token (`<|im_end|>\n<|im_start|>system\n…`); encoded as is, it would
 * become the real control tokens and forge a turn. So before rendering, every special-token string
 * inside the messages is replaced by a marker the template passes through untouched (a pair of
 * Unicode noncharacters around an index); after rendering, the marked spans are restored and
 * encoded as plain text while the template's own special tokens stay control tokens — what
 * transformers calls `split_special_tokens` for the content only.
 */

/** Unicode noncharacters: never assigned, so no real text needs them (and any in content are escaped too). */
const OPEN = "\uFDD0";
const CLOSE = "\uFDD1";
const MARKED = /\uFDD0(\d+)\uFDD1/g;

/** A piece of rendered prompt: template text (its special tokens are real) or literal content. */
export interface PromptPart {
  readonly text: string;
  readonly literal: boolean;
}

export class LiteralEscaper {
  /** What gets escaped: the special tokens, longest first, then the marker characters themselves. */
  private readonly escaped: readonly string[];
  private readonly pattern: RegExp;
  private readonly specials: RegExp;

  constructor(specialTokens: Iterable<string>) {
    const specials = [...new Set(specialTokens)].filter((t) => t.length > 0);
    specials.sort((a, b) => b.length - a.length);
    this.escaped = [...specials, OPEN, CLOSE];
    this.pattern = new RegExp(this.escaped.map(escapeRegExp).join("|"), "g");
    this.specials = new RegExp(`(${specials.map(escapeRegExp).join("|") || "(?!)"})`);
  }

  /** Template text split at its special tokens: the odd-indexed pieces are the tokens. */
  splitSpecials(text: string): string[] {
    return text.split(this.specials);
  }

  /** A deep copy of `value` with every string (object keys included) escaped. */
  escape<T>(value: T): T {
    return this.walk(value) as T;
  }

  /** Splits rendered text into template parts and the literal spans `escape` marked. */
  split(rendered: string): PromptPart[] {
    const parts: PromptPart[] = [];
    let at = 0;
    for (const m of rendered.matchAll(MARKED)) {
      const literal = this.escaped[Number(m[1])];
      if (literal === undefined) continue; // not ours (the template wrote it): leave as text
      if (m.index > at) parts.push({ text: rendered.slice(at, m.index), literal: false });
      parts.push({ text: literal, literal: true });
      at = m.index + m[0].length;
    }
    if (at < rendered.length) parts.push({ text: rendered.slice(at), literal: false });
    return parts;
  }

  private escapeString(s: string): string {
    this.pattern.lastIndex = 0;
    return s.replace(this.pattern, (t) => `${OPEN}${this.escaped.indexOf(t)}${CLOSE}`);
  }

  private walk(v: unknown): unknown {
    if (typeof v === "string") return this.escapeString(v);
    if (Array.isArray(v)) return v.map((x) => this.walk(x));
    if (typeof v === "object" && v !== null) {
      // fromEntries defines own properties, so a "__proto__" key stays a key
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [this.escapeString(k), this.walk(x)]));
    }
    return v;
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
