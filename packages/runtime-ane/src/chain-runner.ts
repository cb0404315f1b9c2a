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
  type SpeculativeStepModel,
  type StateSnapshot,
  type StepOptions,
  type StepOutput,
} from "@anemll-qwen35/generate";
import {
  type ChainManifest,
  type ChainManifestComponent,
  ChainStepper,
  type ComponentSnapshot,
  hiddenRow,
  MtpHead,
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
   * Speculative decoding with the chain's MTP head (model.json's `speculative`; default false):
   * loads the head's package and every super-block and lm_head package's verify function, which
   * then also serves as the decode step — resident per super-block package: prefill + verify
   * (decode is loaded only when the chain reaches the last k positions of its context, or ring
   * rows past it, where k + 1 rows no longer fit); lm_head: verify only. Without a head in the
   * conversion the chain loads as usual and maxDraftTokens is 0.
   */
  speculative?: boolean;
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

/** What a speculating chain keeps for its MTP head: its cache, and the trunk's rows it has yet to see. */
interface HeadSnapshot {
  readonly cache: ComponentSnapshot;
  readonly committed: number;
  readonly trail: readonly TrailRow[];
  readonly selection: number;
}

/** A consumed token and the last super-block's hidden row [1, D, 1, 1] at its position. */
interface TrailRow {
  readonly position: number;
  readonly token: number;
  readonly hidden: Tensor;
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
    /** A speculating chain's MTP head. */
    readonly head?: HeadSnapshot,
  ) {
    this.blocks = blocks;
    this.bytes =
      history.byteLength +
      blocks.reduce((n, b) => n + (b?.bytes ?? 0), 0) +
      (head ? head.cache.bytes + head.trail.reduce((n, r) => n + r.hidden.data.byteLength, 0) : 0);
  }
  /** The super-blocks' copies (undefined once disposed). */
  get states(): readonly (ComponentSnapshot | undefined)[] | undefined {
    return this.blocks;
  }
  dispose(): void {
    this.blocks = undefined;
  }
}

export class ChainRunner implements SpeculativeStepModel {
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
  /** A speculating chain: its MTP head and what it has yet to see. */
  private readonly head?: MtpHead;
  private readonly headComponent?: LoadedComponent;
  /** Head cache slots filled with (trunk hidden_t, token t+1): t < committed. */
  private headCommitted = 0;
  /** Consumed tokens with their trunk hidden rows, from position headCommitted − 1 on. */
  private trail: TrailRow[] = [];
  /** The last verify, until accept() commits a prefix of it. */
  private pending?:
    | { readonly kind: "rows"; readonly ids: readonly number[]; readonly rows: readonly Tensor[] }
    | { readonly kind: "replay"; readonly ids: readonly number[]; readonly before: StateSnapshot };
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
    head?: { entry: ChainManifestComponent; loaded: LoadedComponent },
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
      verify: loaded[i].verify,
    }));
    this.overflow = o.contextOverflow ?? "error";
    const sinks = o.ringSinks ?? DEFAULT_RING_SINKS;
    if (this.overflow === "ring" && (!Number.isInteger(sinks) || sinks < 0 || sinks >= manifest.ctx))
      throw new InvalidArgumentError(`ringSinks must be an integer in [0, ${manifest.ctx}), got ${sinks}`);
    this.stepper = new ChainStepper(parts[0], parts.slice(1, -1), parts[parts.length - 1], {
      ring: this.overflow === "ring" ? { sinks } : undefined,
      headRows: head !== undefined,
    });
    if (head) {
      this.headComponent = head.loaded;
      this.head = new MtpHead(
        {
          name: head.entry.name,
          io: head.entry.io,
          newState: (plan: StatePlan) => head.loaded.newState(plan),
          predict: (inputs, state, position) => head.loaded.predict(inputs, state, position),
        },
        this.overflow === "ring" ? sinks : 0,
      );
    }
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
    const spec = options.speculative ? manifest.speculative : undefined;
    let head: { entry: ChainManifestComponent; loaded: LoadedComponent } | undefined;
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
          // speculating: the verify function serves as the decode step (decode loads only if needed)
          const verify = spec ? entry.verify : undefined;
          loaded.push(
            await options.backend.load(join(dir, entry.file), {
              name: entry.name,
              functionName: entry.function,
              io: entry.io,
              prefill: options.prefillFunction === false ? undefined : entry.prefill,
              verify,
              lazyMain: verify !== undefined,
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
      if (spec) {
        const entry = spec.mtp;
        options.onProgress?.({
          stage: "load",
          component: entry.name,
          index: loaded.length,
          total: loaded.length + 1,
        });
        try {
          const c = await options.backend.load(join(dir, entry.file), {
            name: entry.name,
            functionName: entry.function,
            io: entry.io,
            sha256: entry.sha256,
            signal: options.signal,
          });
          head = { entry, loaded: c };
        } catch (err) {
          if ((err as Error).name === "AbortError") throw err;
          throw new ChainLoadError(entry.name, `could not load ${entry.file}: ${(err as Error).message}`, {
            cause: err,
          });
        }
        const missing = manifest.components.find((c) => c.kind !== "embed" && !c.verify);
        if (missing)
          throw new ChainLoadError(missing.name, "model.json lists an MTP head but no verify function here");
      }
    } catch (err) {
      for (const c of loaded) c.dispose();
      head?.loaded.dispose();
      throw err;
    }
    const runner = new ChainRunner(dir, manifest, options.backend, loaded, options, head);
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

  /** The most drafts one verify call takes: k of the conversion when speculating, else 0. */
  get maxDraftTokens(): number {
    return this.head ? (this.manifest.speculative?.draftTokens ?? 0) : 0;
  }

  get position(): number {
    return this.pos;
  }

  reset(): void {
    this.pos = 0;
    this.history = [];
    this.stepper.reset();
    this.head?.state.reset();
    this.headCommitted = 0;
    this.trail = [];
    this.pending = undefined;
  }

  /** Copies every super-block's state (KV caches up to the rows written) and the tokens consumed. */
  async snapshot(): Promise<StateSnapshot> {
    this.checkLive();
    const rows = Math.min(this.pos, this.manifest.ctx);
    const head = this.head && {
      cache: await this.head.state.snapshot(Math.min(this.headCommitted, this.manifest.ctx)),
      committed: this.headCommitted,
      trail: [...this.trail],
      selection: this.stepper.selection,
    };
    return new ChainSnapshot(
      this,
      this.pos,
      Int32Array.from(this.history),
      await this.stepper.snapshot(rows),
      head,
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
    this.pending = undefined;
    const head = snapshot.head;
    if (this.head && head) {
      await this.head.state.restore(head.cache);
      this.headCommitted = head.committed;
      this.trail = [...head.trail];
      this.stepper.selection = head.selection;
    }
  }

  async prefill(ids: Int32Array | number[], opts: StepOptions = {}): Promise<StepOutput> {
    // a verify not accepted is dropped: the state is where it was before it
    const dropped = this.pending;
    this.pending = undefined;
    if (dropped?.kind === "replay") await this.restore(dropped.before);
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
    // speculating: the verify function is the decode step while its rows fit the context
    if (this.head && this.verifyFits()) {
      const [out] = await this.verify([id], opts);
      await this.accept(1, opts);
      return out;
    }
    return this.decodeOne(id, opts);
  }

  /** One token through the decode function (sliding or wrapping past the context as configured). */
  private async decodeOne(id: number, opts: StepOptions): Promise<StepOutput> {
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
      this.record(chunk, r.hidden[r.hidden.length - 1]);
      out = r.head;
    }
    for (; i < tokens.length; i++) {
      opts.signal?.throwIfAborted();
      // speculating: the rest goes through verify calls, every row accepted (decode is not loaded)
      if (this.head && this.verifyFits()) {
        const chunk = tokens.slice(i, i + (this.stepper.verifyTokens as number));
        const hiddens = await this.stepper.verify(chunk, this.pos);
        this.stepper.accept(chunk.length);
        const last = hiddens[hiddens.length - 1];
        this.record(chunk, last);
        i += chunk.length - 1;
        if (wantOutput && i === tokens.length - 1)
          out = await this.stepper.runHead(hiddenRow(last, chunk.length - 1));
        continue;
      }
      out = await this.step(tokens[i], wantOutput && i === tokens.length - 1);
    }
    return out ?? { logits: new Float32Array(0) };
  }

  /** Whether a verify call's k + 1 rows fit the context from the current position. */
  private verifyFits(): boolean {
    const T = this.stepper.verifyTokens;
    return T !== undefined && this.pos + T <= this.manifest.ctx;
  }

  /**
   * A speculating chain: the tokens just consumed at [pos, pos + n) with the last super-block's
   * hidden state of them ([1, D, 1, ≥ n]), kept until the MTP head has seen them; advances pos.
   */
  private record(tokens: readonly number[], hidden: Tensor): void {
    for (const [j, token] of tokens.entries()) {
      if (this.head) this.trail.push({ position: this.pos, token, hidden: hiddenRow(hidden, j) });
      this.pos++;
    }
    if (this.overflow === "slide") this.history.push(...tokens);
  }

  private checkLive(): void {
    if (this.disposed) throw new AnemllError("E_DISPOSED", "the chain was disposed");
  }

  private async step(token: number, withHead: boolean): Promise<StepOutput | undefined> {
    this.checkLive();
    const r = await this.stepper.step(token, this.pos, withHead);
    this.record([token], r.hidden[r.hidden.length - 1]);
    return r.head;
  }

  private speculating(): MtpHead {
    this.checkLive();
    if (!this.head)
      throw new AnemllError(
        "E_SPECULATIVE_UNSUPPORTED",
        this.manifest.speculative
          ? "this chain was loaded without speculative: true (load it with the MTP head to draft)"
          : "this chain was converted without an MTP head (no mtp.* tensors in the checkpoint, or --no-mtp)",
      );
    return this.head;
  }

  /** The head's cache catches up with the trunk: the pairs (hidden_t, token t+1) for t < pos − 1. */
  private async catchUpHead(head: MtpHead, opts: StepOptions): Promise<void> {
    const byPos = new Map(this.trail.map((r) => [r.position, r]));
    for (let t = this.headCommitted; t < this.pos - 1; t++) {
      opts.signal?.throwIfAborted();
      const h = byPos.get(t);
      const next = byPos.get(t + 1);
      if (!h || !next) throw new AnemllError("E_CHAIN_STATE", `the MTP head lost the trunk's row ${t}`);
      await head.step(h.hidden, await this.stepper.embedToken(next.token), 0, t);
    }
    this.headCommitted = Math.max(this.headCommitted, this.pos - 1);
    this.trail = this.trail.filter((r) => r.position >= this.pos - 1);
  }

  /**
   * Drafts `gamma` tokens after `next` (the token chosen from the last output, not yet consumed)
   * with the MTP head applied recursively; the trunk's state does not move. Step 0 is the head's
   * entry for (hidden of the last consumed token, next) — kept; the later steps' entries are
   * provisional and rewritten from the trunk's hidden states once their tokens are accepted.
   */
  async draft(
    next: number,
    gamma: number,
    pick: (out: StepOutput, i: number) => number,
    opts: StepOptions = {},
  ): Promise<{ ids: number[]; outputs: StepOutput[] }> {
    const head = this.speculating();
    const k = this.maxDraftTokens;
    if (!Number.isInteger(gamma) || gamma < 1 || gamma > k)
      throw new InvalidArgumentError(
        `gamma must be an integer from 1 to ${k} (this chain's drafts per verify), got ${gamma}`,
      );
    if (this.pos === 0) throw new InvalidArgumentError("draft needs a consumed token (prefill first)");
    if (this.pending) throw new AnemllError("E_CHAIN_STATE", "draft before accept() of the last verify");
    await this.catchUpHead(head, opts);
    const last = this.trail.find((r) => r.position === this.pos - 1);
    if (!last) throw new AnemllError("E_CHAIN_STATE", "the MTP head lost the trunk's last row");
    const ids: number[] = [];
    const outputs: StepOutput[] = [];
    let hidden = last.hidden;
    let token = next;
    for (let i = 0; i < gamma; i++) {
      opts.signal?.throwIfAborted();
      hidden = await head.step(
        hidden,
        await this.stepper.embedToken(token),
        i === 0 ? 0 : 1,
        this.pos - 1 + i,
      );
      const [out] = await this.stepper.runHeadRows([hidden], [1]);
      outputs.push(out);
      token = pick(out, i);
      ids.push(token);
    }
    this.headCommitted = this.pos;
    return { ids, outputs };
  }

  /**
   * Scores [next, ...drafts] in one call of every package's verify function (rows past them
   * masked); row j is the trunk's output after ids[0..j]. Nothing is committed until accept().
   * Where the k + 1 rows do not fit the context (its last k positions, ring rows past it) the ids
   * go through decode one by one and accept() rolls back to a snapshot (same outputs, more calls).
   */
  async verify(ids: number[], opts: StepOptions = {}): Promise<StepOutput[]> {
    this.speculating();
    const T = this.stepper.verifyTokens as number;
    if (ids.length < 1 || ids.length > T)
      throw new InvalidArgumentError(
        `verify takes 1 … ${T} ids (next and up to ${T - 1} drafts), got ${ids.length}`,
      );
    if (this.pending) throw new AnemllError("E_CHAIN_STATE", "verify before accept() of the last verify");
    opts.signal?.throwIfAborted();
    if (this.verifyFits()) {
      const hiddens = await this.stepper.verify(ids, this.pos);
      const last = hiddens[hiddens.length - 1];
      const rows = ids.map((_, j) => hiddenRow(last, j));
      const outputs = await this.stepper.runHeadRows(rows, new Array(rows.length).fill(0));
      this.pending = { kind: "rows", ids: [...ids], rows };
      return outputs;
    }
    const before = await this.snapshot();
    const outputs: StepOutput[] = [];
    for (const id of ids) outputs.push(await this.decodeOne(id, opts));
    this.pending = { kind: "replay", ids: [...ids], before };
    return outputs;
  }

  /** Commits the first n ids of the last verify; nothing advances past a rejected token. */
  async accept(n: number, opts: StepOptions = {}): Promise<void> {
    this.speculating();
    const p = this.pending;
    if (!p) throw new AnemllError("E_CHAIN_STATE", "accept() without a verify");
    if (!Number.isInteger(n) || n < 1 || n > p.ids.length)
      throw new InvalidArgumentError(
        `accept takes 1 … ${p.ids.length} (the ids of the last verify), got ${n}`,
      );
    this.pending = undefined;
    if (p.kind === "rows") {
      this.stepper.accept(n);
      for (const [j, token] of p.ids.slice(0, n).entries()) {
        this.trail.push({ position: this.pos, token, hidden: p.rows[j] });
        this.pos++;
      }
      if (this.overflow === "slide") this.history.push(...p.ids.slice(0, n));
      return;
    }
    if (n === p.ids.length) return;
    await this.restore(p.before);
    p.before.dispose();
    for (const id of p.ids.slice(0, n)) await this.decodeOne(id, opts);
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const c of this.components) c.dispose();
    this.headComponent?.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
