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
  type ChainComponent,
  type ChainManifest,
  type ChainManifestComponent,
  ChainStepper,
  type ComponentSnapshot,
  chainBuckets,
  chainFunctions,
  DECODE_FAMILY,
  hiddenRow,
  MtpHead,
  PREFILL_FAMILY,
  type PrefillFunction,
  readChainManifest,
  ringRow,
  type StatePlan,
  VERIFY_FAMILY,
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
   * Unload the prefill functions once a prompt is in (default false): only the decode functions
   * stay resident while generating (Core ML keeps a weight copy per loaded function), and the
   * next prompt loads them again (bench's bucket-cost script measures that reload).
   */
  dropPrefill?: boolean;
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
      | { stage: "load"; component: string; index: number; total: number; bucket?: number }
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

/** The super-block functions loaded now: one bucket's decode (and prefill) functions, and their stepper. */
interface Resident {
  /** Index into the chain's buckets. */
  readonly bucket: number;
  readonly prefill: boolean;
  readonly loaded: readonly LoadedComponent[];
  readonly stepper: ChainStepper;
}

const part = (name: string, io: ChainComponent["io"], c: LoadedComponent): ChainComponent => ({
  name,
  io,
  newState: (plan: StatePlan) => c.newState(plan),
  predict: (inputs: Record<string, Tensor>, state?: ComponentState, position?: number) =>
    c.predict(inputs, state, position),
  prefill: c.prefill,
  verify: c.verify,
});

/**
 * Runs a chain over its context buckets: the super-block packages' functions of the smallest
 * bucket that holds the tokens are the only ones loaded; moving to another bucket copies the
 * state over (KV rows written so far, GDN states) and unloads the old functions before loading
 * the new ones, so no more than one bucket's functions are ever resident and nothing is prefilled
 * again.
 */
export class ChainRunner implements SpeculativeStepModel {
  readonly manifest: ChainManifest;
  readonly dir: string;
  readonly backend: Backend;
  readonly contextLength: number;
  readonly outputKind: "logits" | "top1";
  /** The context buckets, ascending (the last one is the chain's ctx). */
  readonly buckets: readonly number[];
  private readonly embed: LoadedComponent;
  private readonly head: LoadedComponent;
  private readonly options: LoadChainOptions;
  private checked: PrefillCheckResult | undefined;
  private readonly overflow: ContextOverflow;
  private readonly slideKeep: number;
  private readonly ring: { readonly sinks: number } | undefined;
  private readonly T: number | undefined;
  private resident: Resident;
  /** A speculating chain: its MTP head and what it has yet to see. */
  private readonly mtp?: MtpHead;
  /** The bucket indices a speculating chain can run at: those with verify functions (all, in
   * chains converted with one verify per bucket; the largest only, before that). */
  private readonly verifyBuckets: readonly number[];
  private readonly mtpComponent?: LoadedComponent;
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
    embed: LoadedComponent,
    head: LoadedComponent,
    resident: Resident,
    o: LoadChainOptions,
    mtp?: { entry: ChainManifestComponent; loaded: LoadedComponent },
  ) {
    this.dir = dir;
    this.manifest = manifest;
    this.backend = o.backend;
    this.outputKind = manifest.argmax ? "top1" : "logits";
    this.buckets = chainBuckets(manifest);
    this.embed = embed;
    this.head = head;
    this.options = o;
    this.resident = resident;
    this.overflow = o.contextOverflow ?? "error";
    this.ring = ringOf(manifest, o);
    this.T = ChainRunner.prefillOf(manifest, o);
    // ring: as many positions as the packages can encode
    this.contextLength = this.overflow === "ring" ? resident.stepper.positionLimit : manifest.ctx;
    this.slideKeep = o.slideKeep ?? 0.5;
    this.verifyBuckets = verifyBucketsOf(manifest);
    if (mtp) {
      this.mtpComponent = mtp.loaded;
      this.mtp = new MtpHead(
        {
          name: mtp.entry.name,
          io: mtp.entry.io,
          newState: (plan: StatePlan) => mtp.loaded.newState(plan),
          predict: (inputs, state, position) => mtp.loaded.predict(inputs, state, position),
        },
        this.ring?.sinks ?? 0,
      );
    }
  }

  /** Tokens per prefill call when every super-block package has a prefill function and it is wanted. */
  private static prefillOf(manifest: ChainManifest, o: LoadChainOptions): number | undefined {
    if (o.prefillFunction === false) return undefined;
    const sizes = new Set(
      manifest.components
        .filter((c) => c.kind === "superblocks")
        .map((c) => chainFunctions(c, manifest.ctx).find((f) => f.family === PREFILL_FAMILY)?.tokens),
    );
    return sizes.size === 1 ? [...sizes][0] : undefined;
  }

  /**
   * Reads model.json, checks the packages' digests, loads the embedding, the lm_head and the
   * super-block functions of the smallest bucket (the others load when a conversation needs them);
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
    ringOf(manifest, options);
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
    const entries = manifest.components;
    const loaded: LoadedComponent[] = [];
    let runner: ChainRunner;
    try {
      // the embedding table is read on the host (host-embedding.ts), not run on the backend
      const first = entries[0];
      options.onProgress?.({ stage: "load", component: first.name, index: 0, total: entries.length });
      loaded.push(
        await loadEntry(first, () =>
          loadHostEmbedding(join(dir, first.file), first.name, first.function, first.io),
        ),
      );
      const last = entries.length - 1;
      options.onProgress?.({
        stage: "load",
        component: entries[last].name,
        index: last,
        total: entries.length,
      });
      const spec = speculativeOf(manifest, options);
      if (spec) {
        const missing = entries.find((c) => c.kind !== "embed" && !c.verify);
        if (missing)
          throw new ChainLoadError(missing.name, "model.json lists an MTP head but no verify function here");
      }
      loaded.push(await loadEntry(entries[last], () => loadFunction(dir, manifest, entries[last], options)));
      const T = ChainRunner.prefillOf(manifest, options);
      // a speculating chain starts at the smallest bucket with verify functions
      const b = spec ? verifyBucketsOf(manifest)[0] : 0;
      const resident = await residentAt(dir, manifest, loaded[0], loaded[1], b, T !== undefined, options);
      loaded.push(...resident.loaded);
      let mtp: { entry: ChainManifestComponent; loaded: LoadedComponent } | undefined;
      if (spec) {
        const entry = spec.mtp;
        options.onProgress?.({
          stage: "load",
          component: entry.name,
          index: entries.length,
          total: entries.length + 1,
        });
        const c = await loadEntry(entry, () =>
          options.backend.load(join(dir, entry.file), {
            name: entry.name,
            functionName: entry.function,
            io: entry.io,
            sha256: entry.sha256,
            signal: options.signal,
          }),
        );
        loaded.push(c);
        mtp = { entry, loaded: c };
      }
      runner = new ChainRunner(dir, manifest, loaded[0], loaded[1], resident, options, mtp);
    } catch (err) {
      for (const c of loaded) c.dispose();
      throw err;
    }
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
        // every function a conversation may load: each bucket's decode and prefill
        for (const entry of runner.manifest.components) {
          if (entry.kind === "embed") continue; // read on the host
          const path = join(runner.dir, entry.file);
          const fn = { component: entry.name, sha256: entry.sha256 };
          if (entry.kind === "lm_head") {
            await check.functionLoaded(seam, path, { ...fn, functionName: entry.function, role: "head" });
            continue;
          }
          for (const f of chainFunctions(entry, runner.manifest.ctx)) {
            const role =
              f.family === PREFILL_FAMILY ? "prefill" : f.family === DECODE_FAMILY ? "decode" : undefined;
            if (role) await check.functionLoaded(seam, path, { ...fn, functionName: f.function, role });
          }
        }
        const stepper = runner.resident.stepper;
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
    return this.mtp ? (this.manifest.speculative?.draftTokens ?? 0) : 0;
  }

  get position(): number {
    return this.pos;
  }

  /** The context bucket whose functions are loaded now. */
  get bucket(): number {
    return this.buckets[this.resident.bucket];
  }

  /** Whether the super-block packages' prefill functions are loaded now. */
  get prefillLoaded(): boolean {
    return this.resident.prefill;
  }

  reset(): void {
    this.pos = 0;
    this.history = [];
    this.resident.stepper.reset();
    this.mtp?.state.reset();
    this.headCommitted = 0;
    this.trail = [];
    this.pending = undefined;
  }

  /** Copies every super-block's state (KV caches up to the rows written) and the tokens consumed. */
  async snapshot(): Promise<StateSnapshot> {
    this.checkLive();
    const rows = Math.min(this.pos, this.bucket);
    const head = this.mtp && {
      cache: await this.mtp.state.snapshot(Math.min(this.headCommitted, this.manifest.ctx)),
      committed: this.headCommitted,
      trail: [...this.trail],
      selection: this.resident.stepper.selection,
    };
    return new ChainSnapshot(
      this,
      this.pos,
      Int32Array.from(this.history),
      await this.resident.stepper.snapshot(rows),
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
    // the bucket that holds the snapshot's rows; what is resident now is overwritten
    const stepper = await this.ensure(this.bucketFor(snapshot.position), this.resident.prefill, false);
    await stepper.restore(states);
    this.pos = snapshot.position;
    this.history = Array.from(snapshot.history);
    this.pending = undefined;
    const head = snapshot.head;
    if (this.mtp && head) {
      await this.mtp.state.restore(head.cache);
      this.headCommitted = head.committed;
      this.trail = [...head.trail];
      stepper.selection = head.selection;
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
    if (this.mtp && this.verifyFits()) {
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
    return this.T;
  }

  /**
   * The smallest bucket (index) holding `end` tokens; the largest past it (ring KV). A speculating
   * chain picks among the buckets with verify functions.
   */
  private bucketFor(end: number): number {
    const candidates = this.mtp ? this.verifyBuckets : this.buckets.map((_, i) => i);
    return candidates.find((i) => this.buckets[i] >= end) ?? this.buckets.length - 1;
  }

  /**
   * Makes bucket `b`'s functions (with the prefill functions when `prefill`) the resident ones: the
   * state moves over (`transfer`: the rows written so far), the old functions are unloaded first.
   */
  private async ensure(b: number, prefill: boolean, transfer = true): Promise<ChainStepper> {
    const want = prefill && this.T !== undefined;
    const r = this.resident;
    if (r.bucket === b && r.prefill === want) return r.stepper;
    const snap =
      transfer && this.pos > 0 ? await r.stepper.snapshot(Math.min(this.pos, this.bucket)) : undefined;
    // the state the next call starts from: the kept one, or a row of the last verify (speculating)
    const selection = r.stepper.selection;
    for (const c of r.loaded) c.dispose();
    this.resident = await residentAt(this.dir, this.manifest, this.embed, this.head, b, want, this.options);
    if (snap) {
      await this.resident.stepper.restore(snap);
      this.resident.stepper.selection = selection;
    }
    return this.resident.stepper;
  }

  /**
   * Runs tokens through the chain in the smallest bucket that holds them all; the lm_head runs
   * only for the last one (when wanted). With a prefill function of T tokens, they go T at a time;
   * a chunk is cut short where the cache ends (the window, or with ring KV the wrap) or the tokens
   * do, and runs masked (never padded with tokens: pad tokens would change the GDN state). A lone
   * token, or one whose chunk the backend cannot write there (ChainStepper.canPrefill), goes through
   * decode.
   */
  private async consume(tokens: number[], opts: StepOptions, wantOutput = true): Promise<StepOutput> {
    this.checkLive();
    const T = this.T;
    // a backend that writes all T KV rows of a chunk (Core ML, io KV) gets a bucket with room for
    // the last chunk's T rows, so that the prompt's tail is a chunk too (below the largest bucket)
    const whole = T !== undefined && tokens.length >= 2 && this.resident.stepper.writesWholeChunks;
    // a speculating chain also leaves room for the verify call that follows (k + 1 rows)
    const room = this.mtp ? (this.resident.stepper.verifyTokens ?? 0) : 0;
    const end = this.pos + (whole ? Math.ceil(tokens.length / T) * T : tokens.length) + room;
    const b = this.bucketFor(end);
    const ctx = this.buckets[b];
    const batched = T !== undefined && tokens.length >= 2;
    // a speculating chain keeps its prefill functions loaded (they serve every prompt it is given)
    const keepPrefill = this.mtp !== undefined || (this.resident.prefill && !this.options.dropPrefill);
    const stepper = await this.ensure(b, batched || keepPrefill);
    let out: StepOutput | undefined;
    let i = 0;
    while (i < tokens.length) {
      opts.signal?.throwIfAborted();
      const row = this.ring ? ringRow(ctx, this.ring.sinks, this.pos) : this.pos;
      const n = T === undefined ? 1 : Math.min(T, tokens.length - i, ctx - row);
      const last = i + n === tokens.length;
      if (n >= 2 && stepper.canPrefill(this.pos, n)) {
        const chunk = tokens.slice(i, i + n);
        const r = await stepper.prefill(chunk, this.pos, wantOutput && last);
        this.record(chunk, r.hidden[r.hidden.length - 1]);
        out = r.head;
        i += n;
      } else if (this.mtp && this.verifyFits() && this.pos + (stepper.verifyTokens as number) <= ctx) {
        // speculating: the rest goes through verify calls, every row accepted (decode is not loaded)
        const chunk = tokens.slice(i, i + (stepper.verifyTokens as number));
        const hiddens = await stepper.verify(chunk, this.pos);
        stepper.accept(chunk.length);
        const lastRows = hiddens[hiddens.length - 1];
        this.record(chunk, lastRows);
        i += chunk.length;
        if (wantOutput && i === tokens.length)
          out = await stepper.runHead(hiddenRow(lastRows, chunk.length - 1));
      } else {
        out = await this.step(stepper, tokens[i], wantOutput && i === tokens.length - 1);
        i++;
      }
    }
    if (batched && this.options.dropPrefill && !this.mtp) await this.ensure(b, false);
    return out ?? { logits: new Float32Array(0) };
  }

  private checkLive(): void {
    if (this.disposed) throw new AnemllError("E_DISPOSED", "the chain was disposed");
  }

  private async step(
    stepper: ChainStepper,
    token: number,
    withHead: boolean,
  ): Promise<StepOutput | undefined> {
    const r = await stepper.step(token, this.pos, withHead);
    this.record([token], r.hidden[r.hidden.length - 1]);
    return r.head;
  }

  /** Whether a verify call's k + 1 rows fit the context from the current position. */
  private verifyFits(): boolean {
    const T = this.resident.stepper.verifyTokens;
    return T !== undefined && this.pos + T <= this.manifest.ctx;
  }

  /**
   * A speculating chain: the tokens just consumed at [pos, pos + n) with the last super-block's
   * hidden state of them ([1, D, 1, ≥ n]), kept until the MTP head has seen them; advances pos.
   */
  private record(tokens: readonly number[], hidden: Tensor): void {
    for (const [j, token] of tokens.entries()) {
      if (this.mtp) this.trail.push({ position: this.pos, token, hidden: hiddenRow(hidden, j) });
      this.pos++;
    }
    if (this.overflow === "slide") this.history.push(...tokens);
  }

  private speculating(): MtpHead {
    this.checkLive();
    if (!this.mtp)
      throw new AnemllError(
        "E_SPECULATIVE_UNSUPPORTED",
        this.manifest.speculative
          ? "this chain was loaded without speculative: true (load it with the MTP head to draft)"
          : "this chain was converted without an MTP head (no mtp.* tensors in the checkpoint, or --no-mtp)",
      );
    return this.mtp;
  }

  /** The head's cache catches up with the trunk: the pairs (hidden_t, token t+1) for t < pos − 1. */
  private async catchUpHead(head: MtpHead, opts: StepOptions): Promise<void> {
    const byPos = new Map(this.trail.map((r) => [r.position, r]));
    for (let t = this.headCommitted; t < this.pos - 1; t++) {
      opts.signal?.throwIfAborted();
      const h = byPos.get(t);
      const next = byPos.get(t + 1);
      if (!h || !next) throw new AnemllError("E_CHAIN_STATE", `the MTP head lost the trunk's row ${t}`);
      await head.step(h.hidden, await this.resident.stepper.embedToken(next.token), 0, t);
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
        await this.resident.stepper.embedToken(token),
        i === 0 ? 0 : 1,
        this.pos - 1 + i,
      );
      const [out] = await this.resident.stepper.runHeadRows([hidden], [1]);
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
    const T = this.resident.stepper.verifyTokens as number;
    if (ids.length < 1 || ids.length > T)
      throw new InvalidArgumentError(
        `verify takes 1 … ${T} ids (next and up to ${T - 1} drafts), got ${ids.length}`,
      );
    if (this.pending) throw new AnemllError("E_CHAIN_STATE", "verify before accept() of the last verify");
    opts.signal?.throwIfAborted();
    if (this.verifyFits()) {
      // the bucket grows when the k + 1 rows pass its end (the state moves over, selection too)
      const stepper =
        this.pos + T > this.bucket
          ? await this.ensure(this.bucketFor(this.pos + T), true)
          : this.resident.stepper;
      const hiddens = await stepper.verify(ids, this.pos);
      const last = hiddens[hiddens.length - 1];
      const rows = ids.map((_, j) => hiddenRow(last, j));
      const outputs = await stepper.runHeadRows(rows, new Array(rows.length).fill(0));
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
      this.resident.stepper.accept(n);
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
    for (const c of [this.embed, ...this.resident.loaded, this.head]) c.dispose();
    this.mtpComponent?.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}

/** Ring KV's sinks, checked against the context. */
function ringOf(manifest: ChainManifest, o: LoadChainOptions): { sinks: number } | undefined {
  if (o.contextOverflow !== "ring") return undefined;
  const sinks = o.ringSinks ?? DEFAULT_RING_SINKS;
  if (!Number.isInteger(sinks) || sinks < 0 || sinks >= manifest.ctx)
    throw new InvalidArgumentError(`ringSinks must be an integer in [0, ${manifest.ctx}), got ${sinks}`);
  return { sinks };
}

/** model.json's MTP head and verify size when the chain is loaded to speculate and has one. */
function speculativeOf(manifest: ChainManifest, o: LoadChainOptions): ChainManifest["speculative"] {
  return o.speculative ? manifest.speculative : undefined;
}

/** The bucket indices at which every super-block package has a verify function. */
function verifyBucketsOf(manifest: ChainManifest): number[] {
  const blocks = manifest.components.filter((c) => c.kind === "superblocks");
  return chainBuckets(manifest).flatMap((ctx, i) =>
    blocks.every((c) =>
      chainFunctions(c, manifest.ctx).some((f) => f.family === VERIFY_FAMILY && f.ctx === ctx),
    )
      ? [i]
      : [],
  );
}

/** Loads one component, naming it in the error. */
async function loadEntry(
  entry: ChainManifestComponent,
  load: () => Promise<LoadedComponent>,
): Promise<LoadedComponent> {
  try {
    return await load();
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ChainLoadError(entry.name, `could not load ${entry.file}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** A package's function `family` at bucket `ctx` (with the prefill function of that bucket, when asked). */
function loadFunction(
  dir: string,
  manifest: ChainManifest,
  entry: ChainManifestComponent,
  options: LoadChainOptions,
  ctx?: number,
  prefill = false,
): Promise<LoadedComponent> {
  const table = ctx === undefined ? undefined : chainFunctions(entry, ctx);
  const at = (family: string) => table?.find((f) => f.family === family && f.ctx === ctx);
  const decode = at(DECODE_FAMILY) ?? { function: entry.function, io: entry.io };
  const pf = prefill ? at(PREFILL_FAMILY) : undefined;
  // speculating: the verify function (the bucket's; lm_head's one) serves as the decode step
  // (decode loads only if needed)
  const vf = ctx === undefined ? entry.verify : at(VERIFY_FAMILY);
  const verify: PrefillFunction | undefined =
    speculativeOf(manifest, options) && vf
      ? { function: vf.function, tokens: vf.tokens, io: vf.io }
      : undefined;
  return options.backend.load(join(dir, entry.file), {
    name: entry.name,
    functionName: decode.function,
    io: decode.io,
    prefill: pf && { function: pf.function, tokens: pf.tokens, io: pf.io },
    verify,
    lazyMain: verify !== undefined,
    sha256: entry.sha256,
    signal: options.signal,
  });
}

/** Loads every super-block package's functions at bucket index `b`, and a stepper over them. */
async function residentAt(
  dir: string,
  manifest: ChainManifest,
  embed: LoadedComponent,
  head: LoadedComponent,
  b: number,
  prefill: boolean,
  o: LoadChainOptions,
): Promise<Resident> {
  const ctx = chainBuckets(manifest)[b];
  const entries = manifest.components;
  const loaded: LoadedComponent[] = [];
  try {
    for (const [index, entry] of entries.entries()) {
      if (entry.kind !== "superblocks") continue;
      o.signal?.throwIfAborted();
      o.onProgress?.({ stage: "load", component: entry.name, index, total: entries.length, bucket: ctx });
      // the table's ctx of an old model.json is the chain's ctx (one bucket)
      loaded.push(await loadEntry(entry, () => loadFunction(dir, manifest, entry, o, ctx, prefill)));
    }
  } catch (err) {
    for (const c of loaded) c.dispose();
    throw err;
  }
  const blocks = entries.filter((e) => e.kind === "superblocks");
  const ioAt = (entry: ChainManifestComponent) =>
    chainFunctions(entry, manifest.ctx).find((f) => f.family === DECODE_FAMILY && f.ctx === ctx)?.io ??
    entry.io;
  const first = entries[0];
  const last = entries[entries.length - 1];
  const stepper = new ChainStepper(
    part(first.name, first.io, embed),
    blocks.map((e, i) => part(e.name, ioAt(e), loaded[i])),
    part(last.name, last.io, head),
    { ring: ringOf(manifest, o), headRows: speculativeOf(manifest, o) !== undefined },
  );
  return { bucket: b, prefill, loaded, stepper };
}
