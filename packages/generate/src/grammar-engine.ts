/**
 * The structured-generation engine: xgrammar (MLC, Apache-2.0) through its WebAssembly build on
 * npm, `@mlc-ai/web-xgrammar`. It compiles a JSON Schema, an EBNF grammar or a "structural tag"
 * (a composition of both with fixed strings, as tool calls need) against a tokenizer's vocabulary,
 * and then gives, token by token, the bitmask of the ids that may come next.
 *
 * This file is the only place that touches the engine: it loads it, builds one vocabulary per
 * Tokenizer, keeps compiled grammars in a small LRU, and wraps the matcher (`TokenMatcher`).
 */
import { readFileSync } from "node:fs";
import nodeModule, { createRequire } from "node:module";
import type * as Xg from "@mlc-ai/web-xgrammar";
import { GrammarError } from "./errors.js";
import type { JsonSchema } from "./json-schema.js";
import type { Tokenizer } from "./tokenizer.js";

type XgModule = typeof Xg;

/** A piece of a structural tag (xgrammar's formats, plus `json`: compact JSON for a schema). */
export type TagFormat =
  | { type: "const_string"; value: string }
  | { type: "regex"; pattern: string }
  | { type: "grammar"; grammar: string }
  | { type: "json"; schema: JsonSchema }
  | { type: "any_text" }
  | { type: "sequence"; elements: TagFormat[] }
  | { type: "or"; elements: TagFormat[] }
  | { type: "tag"; begin: string; content: TagFormat; end: string }
  | { type: "triggered_tags"; triggers: string[]; tags: TagItem[]; stop_after_first?: boolean }
  | {
      type: "tags_with_separator";
      tags: TagItem[];
      separator: string;
      at_least_one?: boolean;
      stop_after_first?: boolean;
    };
export type TagItem = Extract<TagFormat, { type: "tag" }>;

/** What to compile. JSON is always compact: one line, `", "` and `": "` between items, no free whitespace. */
export type GrammarSpec =
  | { kind: "json_schema"; schema: JsonSchema }
  | { kind: "ebnf"; grammar: string }
  | { kind: "structural_tag"; format: TagFormat };

/** Compiled grammars kept per tokenizer (each holds its token-mask cache: ~1-20 MB on 248k ids). */
const COMPILED_CACHE_SIZE = 32;

/** Added tokens that constrained text may contain: the tool-call markers the grammars write. */
const TEXT_ADDED_TOKENS = new Set(["<tool_call>", "</tool_call>"]);

/**
 * Tokens holding a control character other than \n and \r: web-xgrammar 0.1.27 lets them into
 * JSON strings (its masks admit bytes 0x00-0x1f that its own grammar forbids; the tests found
 * "\u0005" in a string), so they are never produced under a constraint. In byte-level BPE, bytes
 * 0x00-0x20 are written as U+0100-U+0120 (GPT-2's byte map): \n is U+010A, \r U+010D.
 */
function hasControlToken(token: string, byteLevel: boolean): boolean {
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i) - (byteLevel ? 0x100 : 0);
    if (c >= 0 && c < 0x20 && c !== 0x0a && c !== 0x0d) return true;
  }
  return !byteLevel && /<0x(0[0-9BCEF]|1[0-9A-F])>/.test(token); // byte-fallback pieces
}

let instance: Promise<Engine> | undefined;

/** The process's engine instance, loaded on first use (a fresh one after the last one aborted). */
async function engine(): Promise<Engine> {
  instance ??= Engine.load().catch((err: unknown) => {
    instance = undefined;
    throw err;
  });
  return instance;
}

class Engine {
  /** What the engine printed to stderr while `capturing` (its error messages). */
  private captured: string[] | undefined;
  private readonly vocabularies = new WeakMap<Tokenizer, Promise<Vocabulary>>();
  private broken = false;

  private constructor(readonly xg: XgModule) {}

  /**
   * The package's lib/index.js is a UMD bundle inside a `"type": "module"` package, so Node's ESM
   * loader refuses it (`require is not defined`); it is evaluated as the CommonJS it is. Its
   * WebAssembly is inlined; its error messages go to a console.error bound when it first starts,
   * which is why a forwarding hook is in place then.
   */
  static async load(): Promise<Engine> {
    const require = createRequire(import.meta.url);
    let file: string;
    try {
      file = require.resolve("@mlc-ai/web-xgrammar/lib/index.js");
    } catch (err) {
      throw new GrammarError("constrained decoding needs @mlc-ai/web-xgrammar, which is not installed", {
        cause: err,
      });
    }
    const Module = nodeModule as unknown as {
      new (
        id: string,
      ): { filename: string; paths: string[]; exports: unknown; _compile(src: string, file: string): void };
      _nodeModulePaths(dir: string): string[];
    };
    const m = new Module(file);
    m.filename = file;
    m.paths = Module._nodeModulePaths(file);
    m._compile(readFileSync(file, "utf8"), file);
    const engine = new Engine(m.exports as XgModule);
    const original = console.error;
    console.error = (...args: unknown[]) => {
      if (engine.captured) engine.captured.push(args.map(String).join(" "));
      else original(...args);
    };
    try {
      // any call starts the WebAssembly module
      (await engine.xg.TokenizerInfo.createTokenizerInfo(["a"], "raw")).dispose();
    } finally {
      console.error = original;
    }
    return engine;
  }

  /**
   * Runs `fn` in the engine; its failures become GrammarError with the engine's own message. An
   * abort (a fatal check in the C++ code) leaves the WebAssembly instance unusable: the next call
   * loads a fresh one.
   */
  async call<T>(what: string, fn: () => Promise<T> | T): Promise<T> {
    if (this.broken) throw new GrammarError(`${what}: the grammar engine stopped; retry`);
    this.captured = [];
    try {
      return await fn();
    } catch (err) {
      const said = this.captured
        .filter((l) => l !== "Aborted()")
        .map((l) => l.replace(/^\[FATAL\] \S+: /, ""))
        .join("; ");
      if (err instanceof Error && err.message.startsWith("Aborted(")) {
        this.broken = true;
        instance = undefined;
      }
      const detail = said || (typeof err === "number" ? "the engine rejected it" : String(err));
      throw new GrammarError(`${what}: ${detail}`, { cause: err });
    } finally {
      this.captured = undefined;
    }
  }

  vocabulary(tokenizer: Tokenizer): Promise<Vocabulary> {
    let v = this.vocabularies.get(tokenizer);
    if (!v) {
      v = Vocabulary.build(this, tokenizer);
      this.vocabularies.set(tokenizer, v);
      v.catch(() => this.vocabularies.delete(tokenizer));
    }
    return v;
  }
}

/** One tokenizer's vocabulary in the engine, its compiler, and the grammars compiled for it. */
class Vocabulary {
  private readonly compiled = new Map<string, Promise<Xg.CompiledGrammar>>();

  private constructor(
    private readonly engine: Engine,
    private readonly compiler: Xg.GrammarCompiler,
    readonly size: number,
  ) {}

  static async build(engine: Engine, tokenizer: Tokenizer): Promise<Vocabulary> {
    const size = tokenizer.vocabSize;
    const encoded: string[] = new Array(size);
    const kind = vocabType(tokenizer.definition.tokenizerJson);
    for (let id = 0; id < size; id++) {
      const token = tokenizer.idToToken(id) ?? "";
      // "" marks a special token for the engine: never allowed inside constrained text (EOS is
      // allowed where the grammar ends, through the matcher's stop tokens)
      const special = tokenizer.addedTokens.has(token) && !TEXT_ADDED_TOKENS.has(token);
      encoded[id] = special || hasControlToken(token, kind === "byte_level") ? "" : token;
    }
    const { xg } = engine;
    return engine.call("building the grammar engine's vocabulary", async () => {
      const info = await xg.TokenizerInfo.createTokenizerInfo(encoded, kind, false, size, [
        ...tokenizer.eosTokenIds,
      ]);
      // the engine's own cache has no size limit; this class keeps a bounded one instead
      const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false);
      return new Vocabulary(engine, compiler, size);
    });
  }

  /** The compiled grammar for `spec`, from the LRU or compiled now. */
  async compile(spec: GrammarSpec): Promise<Xg.CompiledGrammar> {
    const key = JSON.stringify(spec);
    let hit = this.compiled.get(key);
    if (hit) {
      this.compiled.delete(key);
      this.compiled.set(key, hit); // most recently used last
      return hit;
    }
    hit = this.engine.call(`compiling the ${spec.kind.replace("_", " ")}`, () => this.compileNow(spec));
    this.compiled.set(key, hit);
    hit.catch(() => this.compiled.delete(key));
    while (this.compiled.size > COMPILED_CACHE_SIZE) {
      const [oldest, grammar] = this.compiled.entries().next().value as [string, Promise<Xg.CompiledGrammar>];
      this.compiled.delete(oldest);
      grammar.then(
        (g) => g.dispose(),
        () => {},
      );
    }
    return hit;
  }

  private async compileNow(spec: GrammarSpec): Promise<Xg.CompiledGrammar> {
    const xg = this.engine.xg;
    switch (spec.kind) {
      case "json_schema":
        return this.compiler.compileJSONSchema(JSON.stringify(spec.schema), false, -1);
      case "ebnf":
        return this.compiler.compileGrammar(spec.grammar);
      case "structural_tag": {
        const format = await resolveJson(xg, spec.format);
        return this.compiler.compileStructuralTag({ type: "structural_tag", format } as Xg.StructuralTag);
      }
    }
  }

  async matcher(spec: GrammarSpec, stopTokenIds: readonly number[]): Promise<TokenMatcher> {
    const grammar = await this.compile(spec);
    const m = await this.engine.call("starting the grammar matcher", () =>
      this.engine.xg.GrammarMatcher.createGrammarMatcher(grammar, [...stopTokenIds]),
    );
    return new TokenMatcher(m, this.size);
  }
}

/** Replaces `json` leaves by the compact EBNF the engine writes for their schema. */
async function resolveJson(xg: XgModule, f: TagFormat): Promise<unknown> {
  switch (f.type) {
    case "json": {
      const g = await xg.Grammar.fromJSONSchema(JSON.stringify(f.schema), false, -1);
      try {
        return { type: "grammar", grammar: g.toString() };
      } finally {
        g.dispose();
      }
    }
    case "sequence":
    case "or":
      return { ...f, elements: await Promise.all(f.elements.map((e) => resolveJson(xg, e))) };
    case "tag":
      return { ...f, content: await resolveJson(xg, f.content) };
    case "triggered_tags":
    case "tags_with_separator":
      return { ...f, tags: await Promise.all(f.tags.map((t) => resolveJson(xg, t))) };
    default:
      return f;
  }
}

/** xgrammar's vocabulary kinds, from the tokenizer's decoder (as xgrammar's own detection). */
function vocabType(json: Record<string, unknown>): "byte_level" | "byte_fallback" | "raw" {
  const decoder = json.decoder as { type?: string; decoders?: { type?: string }[] } | null | undefined;
  const types = decoder?.type === "Sequence" ? (decoder.decoders ?? []).map((d) => d.type) : [decoder?.type];
  if (types.includes("ByteLevel")) return "byte_level";
  if (types.includes("ByteFallback")) return "byte_fallback";
  return "raw";
}

/**
 * Where a grammar stands in the text generated so far, token by token: `mask()` gives the ids
 * that may come next, `accept(id)` moves on. `rollback(n)` undoes the last n accepted tokens
 * (no limit), so speculative decoding can check drafted tokens one by one and step back to the
 * first rejected one.
 */
export class TokenMatcher {
  private disposed = false;

  /** @internal made by `compileConstraint` */
  constructor(
    private readonly m: Xg.GrammarMatcher,
    /** The width of the masks: the tokenizer's vocabulary size. */
    readonly vocabSize: number,
  ) {}

  /** One bit per id (bit i of word i >> 5): set = allowed next. */
  mask(): Promise<Int32Array> {
    return this.m.getNextTokenBitmask();
  }

  /** Moves past `id`; false (and no change) when the grammar does not allow it here. */
  accept(id: number): boolean {
    return this.m.acceptToken(id);
  }

  /** Moves past `text` (e.g. the part of a tool call the prompt already wrote); false if not allowed. */
  acceptText(text: string): boolean {
    return text.length === 0 || this.m._acceptString(text);
  }

  /** Undoes the last `tokens` accepted tokens. */
  rollback(tokens: number): void {
    this.m.rollBack(tokens);
  }

  /** True once a stop token was accepted where the grammar may end. */
  get terminated(): boolean {
    return this.m.isTerminated();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.m.dispose();
  }
}

/**
 * Compiles `spec` for `tokenizer` (cached) and returns a fresh matcher at its start. EOS is allowed
 * exactly where the grammar may end; `stopTokenIds` are those EOS ids. Throws GrammarError when the
 * engine cannot compile it.
 */
export async function compileConstraint(
  tokenizer: Tokenizer,
  spec: GrammarSpec,
  stopTokenIds: readonly number[] = tokenizer.eosTokenIds,
): Promise<TokenMatcher> {
  const e = await engine();
  const vocab = await e.vocabulary(tokenizer);
  return vocab.matcher(spec, stopTokenIds);
}

/**
 * `logits` with every id the mask does not allow set to -Infinity, written into `out` (a scratch
 * row the caller keeps). Ids at or past the mask's width stay as they are: the sampler never picks
 * ids beyond the tokenizer's vocabulary.
 */
export function applyTokenMask(logits: Float32Array, mask: Int32Array, out?: Float32Array): Float32Array {
  const row = out && out.length === logits.length ? out : new Float32Array(logits.length);
  const n = logits.length;
  const words = Math.min(mask.length, n >> 5);
  const NEG = Number.NEGATIVE_INFINITY;
  row.set(logits); // one native copy; then only the refused ids are written
  let w = 0;
  while (w < words) {
    const bits = mask[w];
    if (bits === -1) {
      w++;
      continue;
    }
    if (bits === 0) {
      // refused words come in runs under a grammar: one native fill for a long run
      let end = w + 1;
      while (end < words && mask[end] === 0) end++;
      if (end - w >= 8) row.fill(NEG, w << 5, end << 5);
      else for (let i = w << 5; i < end << 5; i++) row[i] = NEG;
      w = end;
      continue;
    }
    const base = w << 5;
    for (let x = ~bits; x !== 0; x &= x - 1) row[base + 31 - Math.clz32(x & -x)] = NEG;
    w++;
  }
  for (let i = words << 5; i < n; i++) {
    const k = i >> 5;
    if (k < mask.length && ((mask[k] >>> (i & 31)) & 1) === 0) row[i] = NEG;
  }
  return row;
}
