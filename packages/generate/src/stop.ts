import { InvalidArgumentError } from "@anemll-qwen35/core";

/** What a piece of streamed text turned into after stop-string matching. */
export interface StopMatch {
  /** Text that is safe to show: it can no longer become part of a stop string. */
  emit: string;
  /** A stop string was found; `emit` holds the text before it and nothing after it counts. */
  stopped: boolean;
  /** The stop string that matched, when `stopped`. */
  stopString?: string;
}

/**
 * Matches stop strings on the decoded text stream. A stop string may arrive split over several
 * tokens ("<|" + "END" + "|>"), so text that could still be the start of one is held back until it
 * either completes the stop string (then it is dropped) or can no longer do so (then it is emitted).
 */
export class StopStringMatcher {
  private readonly stops: string[];
  private held = "";
  private done = false;

  constructor(stopStrings: readonly string[] = []) {
    for (const s of stopStrings) {
      if (typeof s !== "string" || s.length === 0) {
        throw new InvalidArgumentError(`stop strings must be non-empty strings, got ${JSON.stringify(s)}`);
      }
    }
    this.stops = [...new Set(stopStrings)];
  }

  get stopped(): boolean {
    return this.done;
  }

  push(text: string): StopMatch {
    if (this.done) return { emit: "", stopped: true };
    if (this.stops.length === 0) return { emit: text, stopped: false };
    const buf = this.held + text;

    // The earliest occurrence of any stop string wins.
    let at = -1;
    let which = "";
    for (const s of this.stops) {
      const i = buf.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = s;
      }
    }
    if (at >= 0) {
      this.done = true;
      this.held = "";
      return { emit: buf.slice(0, at), stopped: true, stopString: which };
    }

    const keep = partialSuffix(buf, this.stops);
    this.held = buf.slice(buf.length - keep);
    return { emit: buf.slice(0, buf.length - keep), stopped: false };
  }

  /** At the end of generation, held text was not a stop string after all. */
  flush(): string {
    const out = this.done ? "" : this.held;
    this.held = "";
    return out;
  }
}

/**
 * Length of the longest suffix of `buf` that is a proper prefix of one of `needles`: the text that
 * must be held back because the next piece of the stream may complete a needle.
 */
export function partialSuffix(buf: string, needles: readonly string[]): number {
  let best = 0;
  for (const s of needles) {
    for (let len = Math.min(s.length - 1, buf.length); len > best; len--) {
      if (buf.endsWith(s.slice(0, len))) {
        best = len;
        break;
      }
    }
  }
  return best;
}

export interface StopRulesOptions {
  /** Token ids that end generation (not part of the output). */
  eosTokenIds?: Iterable<number>;
  /** Strings that end generation when they appear in the decoded text (not part of the output). */
  stopStrings?: readonly string[];
  /** The most tokens to generate, an EOS token included. */
  maxTokens?: number;
}

/** The three ways a generation ends on its own: an EOS id, a stop string, or the token budget. */
export class StopRules {
  readonly maxTokens: number;
  private readonly eos: Set<number>;
  private readonly stopStrings: readonly string[];

  constructor(options: StopRulesOptions = {}) {
    this.eos = new Set(options.eosTokenIds ?? []);
    this.stopStrings = options.stopStrings ?? [];
    this.maxTokens = options.maxTokens ?? Number.POSITIVE_INFINITY;
    if (!(this.maxTokens >= 1) || (Number.isFinite(this.maxTokens) && !Number.isInteger(this.maxTokens))) {
      throw new InvalidArgumentError(`maxTokens must be an integer >= 1, got ${options.maxTokens}`);
    }
    new StopStringMatcher(this.stopStrings); // validate early
  }

  isEos(id: number): boolean {
    return this.eos.has(id);
  }

  /** True once `generated` tokens have been produced and no more are allowed. */
  reachedMaxTokens(generated: number): boolean {
    return generated >= this.maxTokens;
  }

  /** A fresh matcher for one generation's text stream. */
  matcher(): StopStringMatcher {
    return new StopStringMatcher(this.stopStrings);
  }
}
