/**
 * ChainRunner: runs a converted chain (model.json + packages) one token at a time,
 * embed (read on the host) → super-block packages → lm_head, over a backend, with ir's chain protocol (ChainStepper:
 * positions and masks from the components' roles, split-head merge; the backend keeps each
 * package's state buffers),
 * and implements generate's StepModel so the shared text loop drives it.
 */
import { join } from "node:path";
import { AnemllError, InvalidArgumentError, type Tensor } from "@anemll-qwen35/core";
import {
  ContextOverflowError,
  SnapshotMismatchError,
  type StateSnapshot,
  type StepModel,
  type StepOptions,
  type StepOutput,
} from "@anemll-qwen35/generate";
import {
  type ChainManifest,
  ChainStepper,
  type ComponentSnapshot,
  readChainManifest,
  type StatePlan,
  type VerifyChainOptions,
  verifyChainPackages,
} from "@anemll-qwen35/ir/chain";
import type { Backend, ComponentState, LoadedComponent } from "./backend.js";
import { loadHostEmbedding } from "./host-embedding.js";
import { PrefillCheck, type PrefillCheckMode, type PrefillCheckResult } from "./prefill-check.js";

export interface LoadChainOptions {
  backend: Backend;
  /**
   * What happens when prompt + generated tokens exceed the context: "error" (default) throws
   * ContextOverflowError; "slide" restarts from the most recent tokens (GDN state cannot be
   * truncated, so the kept window is prefilled again); "ring" keeps going: KV row p mod ctx (past
   * `ringSinks` rows that keep the first tokens), so attention sees the sinks and the last
   * ctx − ringSinks tokens while the GatedDeltaNet layers keep their state over the whole history
   * (see the README on what that means for quality).
   */
  contextOverflow?: ContextOverflow;
  /** "slide": the fraction of the context kept when the window moves (default 0.5). */
  slideKeep?: number;
  /** "ring": KV rows that keep the first tokens for good (attention sinks; default 4). */
  ringSinks?: number;
  /**
   * Prompts through the super-block packages' prefill function, T tokens a call, when model.json
   * lists one (default true); false loads decode only and runs every token through it.
   */
  prefillFunction?: boolean;
  /**
   * On a backend that can tell where ops run (Core ML), whether the prefill function is checked
   * before it is trusted (prefill-check.ts): "recorded" (default) uses the verdict recorded beside
   * the model for these packages on this machine, else checks and records; "recheck" checks again;
   * "off" trusts model.json.
   */
  prefillCheck?: PrefillCheckMode;
  /**
   * Check every package against model.json's sha256 before loading (default true; digests are
   * cached by the packages' inodes, sizes, mtimes and ctimes, see ir/chain's verifyChainPackages).
   */
  verify?: boolean | Pick<VerifyChainOptions, "cacheFile">;
  onProgress?: (
    event:
      | { stage: "load"; component: string; index: number; total: number }
      | { stage: "verify"; component: string }
      /** The prefill check's verdict (once per load of a chain with a prefill function). */
      | { stage: "prefill-check"; result: PrefillCheckResult }
      /** Something the user should know that does not stop the load. */
      | { stage: "notice"; message: string },
  ) => void;
  signal?: AbortSignal;
}

export type ContextOverflow = "error" | "slide" | "ring";

export const DEFAULT_RING_SINKS = 4;

/**
 * Ring mode reached a position its packages cannot take: they read RoPE from a table with a row
 * per position up to ctx (chains converted before host-side RoPE).
 */
export class PositionLimitError extends AnemllError {
  readonly position: number;
  readonly limit: number;
  constructor(position: number, limit: number) {
    super(
      "E_POSITION_LIMIT",
      `position ${position} is past what this chain can encode (${limit} positions: its packages read RoPE ` +
        "from a table of ctx rows); ring mode past the context needs packages that take RoPE from the host " +
        "(convert the model again with a newer converter), or use --context-overflow slide",
    );
    this.position = position;
    this.limit = limit;
  }
}

/** A package of the chain is missing or disagrees with model.json. */
export class ChainLoadError extends AnemllError {
  readonly component: string;
  constructor(component: string, message: string, options?: { cause?: unknown }) {
    super("E_CHAIN_LOAD", `${component}: ${message}`, options);
    this.component = component;
  }
}

/** A ChainRunner's state: every super-block's buffers (KV rows written so far) and the tokens consumed. */
class ChainSnapshot implements StateSnapshot {
  readonly bytes: number;
  private blocks: readonly (ComponentSnapshot | undefined)[] | undefined;
  constructor(
    readonly owner: ChainRunner,
    readonly position: number,
    /** The tokens a slide would prefill again (slide mode only). */
    readonly history: Int32Array,
    blocks: readonly (ComponentSnapshot | undefined)[],
  ) {
    this.blocks = blocks;
    this.bytes = history.byteLength + blocks.reduce((n, b) => n + (b?.bytes ?? 0), 0);
  }
  /** The super-blocks' copies (undefined once disposed). */
  get states(): readonly (ComponentSnapshot | undefined)[] | undefined {
    return this.blocks;
  }
  dispose(): void {
    this.blocks = undefined;
  }
}

export class ChainRunner implements StepModel {
  readonly manifest: ChainManifest;
  readonly dir: string;
  readonly backend: Backend;
  readonly contextLength: number;
  readonly outputKind: "logits" | "top1";
  private checked: PrefillCheckResult | undefined;
  private readonly components: readonly LoadedComponent[];
  private readonly stepper: ChainStepper;
  private readonly overflow: ContextOverflow;
  private readonly slideKeep: number;
  /** Tokens consumed since reset. */
  private pos = 0;
  /** "slide": every token consumed since reset (to refill the window when sliding). */
  private history: number[] = [];
  private disposed = false;

  private constructor(
    dir: string,
    manifest: ChainManifest,
    backend: Backend,
    loaded: LoadedComponent[],
    o: LoadChainOptions,
  ) {
    this.dir = dir;
    this.manifest = manifest;
    this.backend = backend;
    this.outputKind = manifest.argmax ? "top1" : "logits";
    this.components = loaded;
    const parts = manifest.components.map((entry, i) => ({
      name: entry.name,
      io: entry.io,
      newState: (plan: StatePlan) => loaded[i].newState(plan),
      predict: (inputs: Record<string, Tensor>, state?: ComponentState, position?: number) =>
        loaded[i].predict(inputs, state, position),
      prefill: loaded[i].prefill,
    }));
    this.overflow = o.contextOverflow ?? "error";
    const sinks = o.ringSinks ?? DEFAULT_RING_SINKS;
    if (this.overflow === "ring" && (!Number.isInteger(sinks) || sinks < 0 || sinks >= manifest.ctx))
      throw new InvalidArgumentError(`ringSinks must be an integer in [0, ${manifest.ctx}), got ${sinks}`);
    this.stepper = new ChainStepper(parts[0], parts.slice(1, -1), parts[parts.length - 1], {
      ring: this.overflow === "ring" ? { sinks } : undefined,
    });
    // ring: as many positions as the packages can encode
    this.contextLength = this.overflow === "ring" ? this.stepper.positionLimit : manifest.ctx;
    this.slideKeep = o.slideKeep ?? 0.5;
  }

  /**
   * Reads model.json, checks the packages' digests and loads every package through the backend;
   * on a backend with a function-check seam, checks the prefill function first (prefillCheck).
   */
  static async load(dir: string, loadOptions: LoadChainOptions): Promise<ChainRunner> {
    let options = loadOptions;
    const manifest = await readChainManifest(dir);
    if (options.verify !== false) {
      await verifyChainPackages(dir, manifest, {
        ...(typeof options.verify === "object" ? options.verify : {}),
        onHash: (component) => options.onProgress?.({ stage: "verify", component }),
        signal: options.signal,
      });
    }
    const check =
      options.prefillFunction === false
        ? undefined
        : await PrefillCheck.open(
            dir,
            manifest,
            options.backend.functionCheck,
            options.prefillCheck ?? "recorded",
            (message) => options.onProgress?.({ stage: "notice", message }),
          );
    // a recorded fallback: the prefill functions are not loaded at all
    if (check?.recorded?.keep === false) options = { ...options, prefillFunction: false };
    const loaded: LoadedComponent[] = [];
    try {
      for (const [index, entry] of manifest.components.entries()) {
        options.signal?.throwIfAborted();
        options.onProgress?.({
          stage: "load",
          component: entry.name,
          index,
          total: manifest.components.length,
        });
        try {
          // the embedding table is read on the host (host-embedding.ts), not run on the backend
          if (entry.kind === "embed") {
            loaded.push(await loadHostEmbedding(join(dir, entry.file), entry.name, entry.function, entry.io));
            continue;
          }
          loaded.push(
            await options.backend.load(join(dir, entry.file), {
              name: entry.name,
              functionName: entry.function,
              io: entry.io,
              prefill: options.prefillFunction === false ? undefined : entry.prefill,
              sha256: entry.sha256,
              signal: options.signal,
            }),
          );
        } catch (err) {
          if ((err as Error).name === "AbortError") throw err;
          throw new ChainLoadError(entry.name, `could not load ${entry.file}: ${(err as Error).message}`, {
            cause: err,
          });
        }
      }
    } catch (err) {
      for (const c of loaded) c.dispose();
      throw err;
    }
    const runner = new ChainRunner(dir, manifest, options.backend, loaded, options);
    return check ? ChainRunner.checkPrefill(runner, check, options) : runner;
  }

  /**
   * The prefill check after the load (prefill-check.ts): the seam is told every function loaded,
   * one prefill call is timed against T decode steps, and on a fallback the chain is loaded again
   * without its prefill functions (their weight copies go); a recorded verdict needs none of it.
   */
  private static async checkPrefill(
    first: ChainRunner,
    check: PrefillCheck,
    options: LoadChainOptions,
  ): Promise<ChainRunner> {
    let runner = first;
    let result = check.recorded;
    const seam = options.backend.functionCheck;
    const T = runner.prefillTokens;
    if (!result && seam && T !== undefined) {
      try {
        for (const entry of runner.manifest.components) {
          if (entry.kind === "embed") continue; // read on the host
          const path = join(runner.dir, entry.file);
          const fn = { component: entry.name, sha256: entry.sha256 };
          const role = entry.kind === "lm_head" ? "head" : "decode";
          await check.functionLoaded(seam, path, { ...fn, functionName: entry.function, role });
          if (entry.prefill)
            await check.functionLoaded(seam, path, {
              ...fn,
              functionName: entry.prefill.function,
              role: "prefill",
            });
        }
        const stepper = runner.stepper;
        result = await check.decide(seam, T, {
          prefill: async () => {
            await stepper.prefill(new Array<number>(T).fill(0), 0, false);
          },
          decode: async (p) => {
            await stepper.step(0, p, false);
          },
          reset: () => stepper.reset(),
        });
      } catch (err) {
        runner.dispose();
        throw err;
      }
      if (!result.keep) {
        runner.dispose();
        runner = await ChainRunner.load(runner.dir, { ...options, prefillFunction: false, verify: false });
      }
    }
    if (result) {
      runner.checked = result;
      options.onProgress?.({ stage: "prefill-check", result });
    }
    return runner;
  }

  /** The prefill check's verdict at load (undefined where none ran: see LoadChainOptions.prefillCheck). */
  get prefillCheck(): PrefillCheckResult | undefined {
    return this.checked;
  }

  get position(): number {
    return this.pos;
  }

  reset(): void {
    this.pos = 0;
    this.history = [];
    this.stepper.reset();
  }

  /** Copies every super-block's state (KV caches up to the rows written) and the tokens consumed. */
  async snapshot(): Promise<StateSnapshot> {
    this.checkLive();
    const rows = Math.min(this.pos, this.manifest.ctx);
    return new ChainSnapshot(
      this,
      this.pos,
      Int32Array.from(this.history),
      await this.stepper.snapshot(rows),
    );
  }

  /** Puts back a snapshot this runner took; the next token continues from its position. */
  async restore(snapshot: StateSnapshot): Promise<void> {
    this.checkLive();
    if (!(snapshot instanceof ChainSnapshot) || snapshot.owner !== this)
      throw new SnapshotMismatchError("this snapshot was not taken from this chain");
    const states = snapshot.states;
    if (!states) throw new SnapshotMismatchError("this snapshot was disposed");
    await this.stepper.restore(states);
    this.pos = snapshot.position;
    this.history = Array.from(snapshot.history);
  }

  async prefill(ids: Int32Array | number[], opts: StepOptions = {}): Promise<StepOutput> {
    const tokens = Array.from(ids);
    if (tokens.length === 0) throw new AnemllError("E_EMPTY_PROMPT", "prefill needs at least one token");
    if (this.position + tokens.length > this.contextLength) {
      if (this.overflow === "ring")
        throw new PositionLimitError(this.position + tokens.length - 1, this.contextLength);
      if (this.overflow === "error")
        throw new ContextOverflowError(this.position + tokens.length, this.contextLength);
      // keep the most recent tokens that fit, leaving room to generate
      const all = [...this.history, ...tokens];
      const keep = Math.max(1, Math.floor(this.contextLength * this.slideKeep));
      this.reset();
      return this.consume(all.slice(-keep), opts);
    }
    return this.consume(tokens, opts);
  }

  async decode(id: number, opts: StepOptions = {}): Promise<StepOutput> {
    if (this.position >= this.contextLength) {
      if (this.overflow === "ring") throw new PositionLimitError(this.position, this.contextLength);
      if (this.overflow === "error") throw new ContextOverflowError(this.position + 1, this.contextLength);
      const keep = Math.max(1, Math.floor(this.contextLength * this.slideKeep) - 1);
      const window = this.history.slice(-keep);
      this.reset();
      await this.consume(window, opts, false);
    }
    return this.consume([id], opts);
  }

  /** Tokens per call of the packages' prefill function (undefined: token by token through decode). */
  get prefillTokens(): number | undefined {
    return this.stepper.prefillTokens;
  }

  /**
   * Runs tokens through the chain; the lm_head runs only for the last one (when wanted). With a
   * prefill function of T tokens, they go T at a time while T rows fit the context; a shorter
   * rest of at least T/8 tokens runs as one masked chunk (never padded with tokens: pad tokens
   * would change the GDN state; a masked chunk costs about a full one, so a few tokens go
   * through decode instead), the rest token by token through decode.
   */
  private async consume(tokens: number[], opts: StepOptions, wantOutput = true): Promise<StepOutput> {
    if (this.disposed) throw new AnemllError("E_DISPOSED", "the chain was disposed");
    const T = this.stepper.prefillTokens;
    let out: StepOutput | undefined;
    let i = 0;
    const minChunk = Math.max(2, Math.ceil((T ?? 0) / 8));
    // prefill writes T KV rows from the position on: only while they fit the converted ctx (in ring
    // mode the rest goes through decode, which wraps)
    while (T !== undefined && this.pos + T <= this.manifest.ctx) {
      const chunk = tokens.slice(i, i + T);
      if (chunk.length < minChunk) break;
      opts.signal?.throwIfAborted();
      i += chunk.length;
      const last = i === tokens.length;
      const r = await this.stepper.prefill(chunk, this.pos, wantOutput && last);
      this.pos += chunk.length;
      if (this.overflow === "slide") this.history.push(...chunk);
      out = r.head;
    }
    for (; i < tokens.length; i++) {
      opts.signal?.throwIfAborted();
      out = await this.step(tokens[i], wantOutput && i === tokens.length - 1);
    }
    return out ?? { logits: new Float32Array(0) };
  }

  private checkLive(): void {
    if (this.disposed) throw new AnemllError("E_DISPOSED", "the chain was disposed");
  }

  private async step(token: number, withHead: boolean): Promise<StepOutput | undefined> {
    this.checkLive();
    const r = await this.stepper.step(token, this.pos, withHead);
    this.pos++;
    if (this.overflow === "slide") this.history.push(token);
    return r.head;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const c of this.components) c.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
