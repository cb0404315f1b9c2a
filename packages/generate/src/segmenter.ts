import { partialSuffix } from "./stop.js";

/**
 * Splits the model's text stream into what a chat UI shows apart: thinking (between <think> and
 * </think>), the answer, and tool-call blocks (between <tool_call> and </tool_call>).
 *
 * Qwen3.5's template frames thinking as `<think>\n…\n</think>\n\n answer` and puts a blank line
 * before each `<tool_call>`. That framing whitespace is dropped so that the streamed pieces join to
 * exactly the final `thinking` / `text`: thinking is trimmed on both sides, the answer loses leading
 * whitespace after </think> or </tool_call> and trailing whitespace before <tool_call>.
 */

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";
export const TOOL_CALL_OPEN = "<tool_call>";
export const TOOL_CALL_CLOSE = "</tool_call>";

export type Segment =
  | { kind: "text"; text: string }
  | { kind: "thinking"; text: string }
  /** A complete `<tool_call>` block's body. */
  | { kind: "tool_call"; body: string; closed: true }
  /** Generation ended inside a `<tool_call>` block. */
  | { kind: "tool_call"; body: string; closed: false };

/** `literal`: an answer held to a schema or grammar, taken as it is (no markers read inside it). */
type Mode = "text" | "thinking" | "tool_call" | "literal";

const MARKERS: Record<Mode, readonly string[]> = {
  literal: [],
  // A stray </think> in the answer (the prompt opened <think> without us seeing it) is dropped too.
  text: [THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN],
  thinking: [THINK_CLOSE],
  tool_call: [TOOL_CALL_CLOSE],
};

export class Segmenter {
  private mode: Mode;
  /** Text not yet classified: it may be the start of a marker. */
  private buf = "";
  /** Trailing whitespace held until we know whether a marker follows it. */
  private heldSpace = "";
  /** Drop leading whitespace until the first non-space character of this segment. */
  private stripLeading: boolean;
  private toolBody = "";

  private readonly answerMode: "text" | "literal";

  /**
   * `startInThinking`: the prompt already opened `<think>` (Qwen3.5's thinking generation prompt).
   * `literalAnswer`: the answer (after any thinking) is text held to a schema or grammar; markers
   * written inside it (a JSON string saying "<tool_call>") are text.
   */
  constructor(options: { startInThinking?: boolean; literalAnswer?: boolean } = {}) {
    this.answerMode = options.literalAnswer ? "literal" : "text";
    this.mode = options.startInThinking ? "thinking" : this.answerMode;
    this.stripLeading = this.mode === "thinking";
  }

  push(text: string): Segment[] {
    const out: Segment[] = [];
    this.buf += text;
    for (;;) {
      const hit = earliest(this.buf, MARKERS[this.mode]);
      if (hit) {
        this.content(this.buf.slice(0, hit.at), out);
        this.buf = this.buf.slice(hit.at + hit.marker.length);
        this.enter(hit.marker, out);
        continue;
      }
      const keep = partialSuffix(this.buf, MARKERS[this.mode]);
      this.content(this.buf.slice(0, this.buf.length - keep), out);
      this.buf = this.buf.slice(this.buf.length - keep);
      return out;
    }
  }

  /** End of generation: release held text; an open tool call is reported as unterminated. */
  finish(): Segment[] {
    const out: Segment[] = [];
    this.content(this.buf, out);
    this.buf = "";
    if ((this.mode === "text" || this.mode === "literal") && this.heldSpace)
      out.push({ kind: "text", text: this.heldSpace });
    if (this.mode === "tool_call") out.push({ kind: "tool_call", body: this.toolBody, closed: false });
    this.heldSpace = "";
    this.toolBody = "";
    return out;
  }

  private enter(marker: string, out: Segment[]): void {
    this.heldSpace = ""; // framing whitespace before a marker is not content
    if (this.mode === "tool_call") {
      out.push({ kind: "tool_call", body: this.toolBody, closed: true });
      this.toolBody = "";
      this.mode = "text";
    } else if (marker === THINK_OPEN) {
      this.mode = "thinking";
    } else if (marker === TOOL_CALL_OPEN) {
      this.mode = "tool_call";
      return;
    } else {
      this.mode = this.answerMode; // </think>
    }
    this.stripLeading = true;
  }

  private content(text: string, out: Segment[]): void {
    if (text.length === 0) return;
    if (this.mode === "tool_call") {
      this.toolBody += text;
      return;
    }
    if (this.stripLeading) {
      text = text.trimStart();
      if (text.length === 0) return;
      this.stripLeading = false;
    }
    const all = this.heldSpace + text;
    const body = all.trimEnd();
    this.heldSpace = all.slice(body.length);
    if (body.length > 0) out.push({ kind: this.mode === "thinking" ? "thinking" : "text", text: body });
  }
}

function earliest(buf: string, markers: readonly string[]): { at: number; marker: string } | undefined {
  let best: { at: number; marker: string } | undefined;
  for (const m of markers) {
    const at = buf.indexOf(m);
    if (at >= 0 && (!best || at < best.at)) best = { at, marker: m };
  }
  return best;
}
