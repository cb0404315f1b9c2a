/**
 * The per-token protocol of a converted chain, in one place: what a runner feeds each component
 * and what it does with the outputs, driven only by the roles in ComponentIO (see contract.ts).
 * runtime-ane's ChainRunner runs it over its backends; the converter's tests run it straight over
 * the interpreter. The buffers a package carries between steps (GDN conv/recurrent states, io KV
 * caches, Core ML states) are kept by the component, as its state.ts plan says: per step the
 * protocol feeds only hidden state, position and mask, and reads back hidden state or logits.
 */
import { f32ToF16Bits, InvalidArgumentError, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import type { ChainComponentState, ComponentSnapshot } from "./component-state.js";
import {
  argmaxToken,
  ChainProtocolError,
  type ComponentIO,
  decodeMask,
  type IoTensor,
  kvWriteBound,
  prefillChunkInputs,
  prefillMask,
  ringMask,
  ringPrefillMask,
  ringRow,
} from "./contract.js";
import { ropeCosSin } from "./rope.js";
import { hostInputs, isStateless, type StatePlan, statePlan } from "./state.js";

/** One loaded component as the protocol drives it. */
export interface ChainComponent {
  readonly name: string;
  readonly io: ComponentIO;
  /** A state that keeps the buffers of `plan` (zeros) and the package's Core ML states. */
  newState(plan: StatePlan): ChainComponentState;
  /**
   * One step. `inputs`: what the host feeds. With `state`, the component binds the kept buffers
   * itself and keeps the state outputs (they are not returned); `position` is the first cache row
   * this step writes.
   */
  predict(
    inputs: Record<string, Tensor>,
    state?: ChainComponentState,
    position?: number,
  ): Promise<Record<string, Tensor>>;
  /** The package's prefill function, run on the same state (see contract.ts). */
  readonly prefill?: ChainPrefill;
  /** A chain with an MTP head: the package's verify function (k + 1 rows), on the same state. */
  readonly verify?: ChainPrefill;
}

/** A component's batched function: `tokens` positions a call over the decode function's state. */
export interface ChainPrefill {
  readonly io: ComponentIO;
  readonly tokens: number;
  /**
   * The backend keeps only the `rows` KV rows a short chunk holds (io KV), so a chunk may end at
   * the last cache row; without it all T rows are written (position + T must fit the cache).
   */
  readonly partialRows?: boolean;
  predict(
    inputs: Record<string, Tensor>,
    state: ChainComponentState | undefined,
    position: number,
    rows?: number,
  ): Promise<Record<string, Tensor>>;
}

export interface ChainPrefillResult {
  /** hidden_out [1, D, 1, T] of each super-block package, in order (rows ≥ the chunk's count unused). */
  readonly hidden: readonly Tensor[];
  /** The lm_head's output for the chunk's last token, when asked for. */
  readonly head?: HeadOutput;
}

/** What the lm_head gives for one position: the full row of logits, or the arg-max pair of an argmax head. */
export type HeadOutput = { logits: Float32Array } | { top1: { id: number; value: number } };

export interface ChainStepResult {
  /** The embedding output. */
  readonly embedded: Tensor;
  /** hidden_out of each super-block package, in order (the last one feeds the lm_head). */
  readonly hidden: readonly Tensor[];
  /** Present when the step ran the lm_head. */
  readonly head?: HeadOutput;
}

/** Positions a chain with host RoPE can take (the position input is int32). */
export const MAX_POSITIONS = 2 ** 31 - 1;

interface Block {
  readonly c: ChainComponent;
  /** Takes RoPE as inputs (role "rope"); its position input is then only the mlstate KV row. */
  readonly hostRope: boolean;
  readonly inputs: readonly IoTensor[];
  readonly hiddenOut: IoTensor;
  readonly state: ChainComponentState | undefined;
  /** The prefill function's host inputs and hidden output. */
  readonly prefill?: BlockFunction;
  /** The verify function's (a chain with an MTP head). */
  readonly verify?: BlockFunction;
  /** Whether decode / prefill take `select` (older MTP conversions) or need the row committed first. */
  readonly selects: { readonly decode: boolean; readonly prefill: boolean };
}

const hasSelect = (io: ComponentIO) => io.inputs.some((t) => t.role.kind === "row_select");

interface BlockFunction {
  readonly f: ChainPrefill;
  readonly inputs: readonly IoTensor[];
  readonly hiddenOut: IoTensor;
}

/** One-hot [n] with a 1 at `i`. */
function oneHot(n: number, i: number): Float32Array {
  const v = new Float32Array(n);
  v[i] = 1;
  return v;
}

const hiddenOutOf = (name: string, io: ComponentIO) => {
  const t = io.outputs.find((o) => o.role.kind === "hidden_out");
  if (!t) throw new ChainProtocolError(name, "no output has the role hidden_out");
  return t;
};

/** Row `i` of a channels-first hidden state [1, D, 1, T] as [1, D, 1, 1] (same dtype). */
export function hiddenRow(h: Tensor, i: number): Tensor {
  const [, D, , T] = h.shape;
  const Ctor = h.data.constructor as new (n: number) => Tensor["data"];
  const out = new Ctor(D);
  for (let d = 0; d < D; d++) out[d] = h.data[d * T + i] as never;
  return { dtype: h.dtype, shape: [1, D, 1, 1], data: out } as Tensor;
}

/**
 * Rows [1, D, 1, 1] (1 ≤ n ≤ T of them) as a channels-first [1, D, 1, T], the last row repeated
 * after them. Not zeros: on an fp16 datapath that flushes subnormals, a norm's ε can be 0 and a
 * zero row gives 0·rsqrt(0) = NaN, which 0·x masks do not stop. A copy of a real row keeps every
 * padded value finite; `valid` keeps those rows out of the GDN state, the mask out of every query
 * of a real token.
 */
export function hiddenRows(rows: readonly Tensor[], tokens: number): Tensor {
  const n = rows.length;
  if (n < 1 || n > tokens)
    throw new InvalidArgumentError(`a prefill chunk of ${tokens} holds 1 … ${tokens} rows, not ${n}`);
  const D = rows[0].shape[1];
  const Ctor = rows[0].data.constructor as new (n: number) => Tensor["data"];
  const out = new Ctor(D * tokens);
  for (let d = 0; d < D; d++) {
    const at = d * tokens;
    for (let i = 0; i < n; i++) out[at + i] = rows[i].data[d] as never;
    out.fill(rows[n - 1].data[d] as never, at + n, at + tokens);
  }
  return { dtype: rows[0].dtype, shape: [1, D, 1, tokens], data: out } as Tensor;
}

/** Float values as an input of `t`'s dtype (fp16 as bit patterns). */
export function floatTensor(t: IoTensor, values: Float32Array): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, Uint16Array.from(values, f32ToF16Bits));
  return tensor("f32", t.shape, values);
}

/** The lm_head's outputs merged over its vocabulary pieces. */
export function readHeadOutputs(head: ChainComponent, outputs: Record<string, Tensor>): HeadOutput {
  return readHeadRow(head.name, head.io, outputs, 0);
}

/**
 * Row `row` of an lm_head function's outputs merged over its vocabulary pieces: logits [T, rows_i]
 * or argmax pairs [T, k] of the verify function ([1, rows_i] / [k] of the one-row function).
 */
export function readHeadRow(
  name: string,
  io: ComponentIO,
  outputs: Record<string, Tensor>,
  row: number,
): HeadOutput {
  const lm = io.lmHead;
  if (!lm) throw new ChainProtocolError(name, "model.json describes no lm_head split");
  const out = (t: IoTensor) => {
    const v = outputs[t.name];
    if (!v) throw new ChainProtocolError(name, `the package did not return output ${t.name}`);
    return v;
  };
  if (lm.argmax) {
    const idxT = io.outputs.find((t) => t.role.kind === "argmax_idx");
    const valT = io.outputs.find((t) => t.role.kind === "argmax_val");
    if (!idxT || !valT || idxT.role.kind !== "argmax_idx")
      throw new ChainProtocolError(name, "argmax outputs are not described");
    const k = idxT.role.rowOffsets.length;
    const idx = (out(idxT).data as Int32Array).subarray(row * k, (row + 1) * k);
    const val = toFloat32(out(valT).dtype, out(valT).data).subarray(row * k, (row + 1) * k);
    let best = 0;
    for (let i = 1; i < k; i++) if (val[i] > val[best]) best = i;
    return { top1: { id: argmaxToken(idxT.role.rowOffsets, idx, val), value: val[best] } };
  }
  const logits = new Float32Array(lm.vocab);
  for (const t of io.outputs) {
    if (t.role.kind !== "logits") continue;
    const v = toFloat32(out(t).dtype, out(t).data);
    logits.set(v.subarray(row * t.role.rows, (row + 1) * t.role.rows), t.role.rowOffset);
  }
  return { logits };
}

export interface ChainStepperOptions {
  /**
   * Score every hidden row with the lm_head's verify function (a speculating chain loads only
   * that one: the vocabulary is resident once).
   */
  readonly headRows?: boolean;
  /**
   * Ring-buffer KV past the context (see ringRow / ringMask): the token at position p writes KV
   * row ringRow(ctx, sinks, p) and sees the sinks and the most recent ctx − sinks tokens; the
   * GatedDeltaNet states carry on over the whole history.
   */
  readonly ring?: { readonly sinks: number };
}

/** embed → super-blocks → lm_head for one token at a time; each super-block keeps its own state. */
export class ChainStepper {
  private readonly embed: ChainComponent;
  private readonly blocks: Block[];
  private readonly head: ChainComponent;
  private readonly ring: { readonly sinks: number } | undefined;

  constructor(
    embed: ChainComponent,
    superblocks: readonly ChainComponent[],
    head: ChainComponent,
    o: ChainStepperOptions = {},
  ) {
    this.ring = o.ring;
    this.embed = embed;
    this.blocks = superblocks.map((c) => {
      // with an MTP head the state is the verify's: its kept states plus the per-row states
      const plan = statePlan(c.name, c.verify?.io ?? c.io);
      if (c.verify) statePlan(c.name, c.io); // the roles of every function pair up
      if (c.prefill) statePlan(c.name, c.prefill.io);
      const fn = (f: ChainPrefill | undefined) =>
        f && { f, inputs: hostInputs(f.io), hiddenOut: hiddenOutOf(c.name, f.io) };
      return {
        c,
        inputs: hostInputs(c.io),
        hiddenOut: hiddenOutOf(c.name, c.io),
        hostRope: c.io.inputs.some((t) => t.role.kind === "rope"),
        selects: {
          decode: hasSelect(c.io),
          prefill: c.prefill !== undefined && hasSelect(c.prefill.io),
        },
        state: isStateless(plan) ? undefined : c.newState(plan),
        prefill: fn(c.prefill),
        verify: fn(c.verify),
      };
    });
    const rows = new Set(this.blocks.map((b) => b.verify?.f.tokens));
    this.verifyTokens = rows.size === 1 ? [...rows][0] : undefined;
    this.headRows = o.headRows ?? false;
    this.head = head;
    const sizes = new Set(this.blocks.map((b) => b.prefill?.f.tokens));
    const T = sizes.size === 1 ? [...sizes][0] : undefined;
    this.prefillTokens = T;
  }

  /** Tokens per prefill call when every super-block package has a prefill function of that size. */
  readonly prefillTokens: number | undefined;
  /** Rows per verify call when every super-block package has a verify function of that size. */
  readonly verifyTokens: number | undefined;
  private readonly headRows: boolean;
  /**
   * Which state the next call starts from (every function's `select`): 0 the kept state, j + 1 row
   * j of the last verify's per-row states (accept() sets it).
   */
  selection = 0;

  /** Zeroes every state (sequence start). */
  reset(): void {
    for (const s of this.blocks) s.state?.reset();
    this.selection = 0;
  }

  /**
   * Commits the first n rows of the last verify: the next call, whichever function, starts from
   * row n − 1's states (its KV rows are already written; the rows past it are masked until
   * overwritten).
   */
  accept(n: number): void {
    const T = this.verifyTokens;
    if (T === undefined || !Number.isInteger(n) || n < 1 || n > T)
      throw new InvalidArgumentError(`accept takes 1 … ${T ?? 0} rows of a verify, not ${n}`);
    this.selection = n;
  }

  /**
   * Before a decode or prefill call: where that function has no `select` input (packages converted
   * with select in the verify function only), commit the accepted verify row into the kept states
   * on the host side; `kvRows` is the KV rows written so far.
   */
  private async commitSelection(which: "decode" | "prefill", kvRows: number): Promise<void> {
    if (this.selection === 0) return;
    const row = this.selection - 1;
    await Promise.all(
      this.blocks.map((s) => (s.selects[which] ? undefined : s.state?.selectRow(row, kvRows))),
    );
    if (this.blocks.every((s) => !s.selects[which])) this.selection = 0;
  }

  /** The select input of a function with one (one-hot of `selection`). */
  private selectInput(t: IoTensor): Tensor {
    return floatTensor(t, oneHot(t.shape[0], this.selection));
  }

  /** A copy of every super-block's state (KV caches up to row `rows`), in order. */
  async snapshot(rows: number): Promise<(ComponentSnapshot | undefined)[]> {
    return Promise.all(this.blocks.map((s) => s.state?.snapshot(rows)));
  }

  /** Puts back what snapshot() returned (of this stepper's components). */
  async restore(snapshots: readonly (ComponentSnapshot | undefined)[]): Promise<void> {
    if (snapshots.length !== this.blocks.length)
      throw new InvalidArgumentError(
        `a snapshot of ${snapshots.length} super-block states cannot be restored into ${this.blocks.length}`,
      );
    await Promise.all(
      this.blocks.map(async (s, i) => {
        const snap = snapshots[i];
        if (!s.state || !snap) {
          if (s.state || snap)
            throw new InvalidArgumentError(`${s.c.name}: the snapshot does not match its state`);
          return;
        }
        await s.state.restore(snap);
      }),
    );
  }

  /** The KV rows written before `position` (all of the cache once a ring has wrapped). */
  private keptRows(position: number): number {
    const ctx = this.blocks[0]?.c.io.ctx ?? position;
    return Math.min(position, ctx);
  }

  /**
   * The most positions this chain can step through with ring KV: any int32 position when every
   * super-block takes RoPE from the host, else ctx (older packages gather RoPE from a table of ctx
   * rows by the position input).
   */
  get positionLimit(): number {
    if (this.blocks.every((b) => b.hostRope)) return MAX_POSITIONS;
    return this.blocks[0]?.c.io.ctx ?? MAX_POSITIONS;
  }

  /** The embedding of one token (the embed component's output). */
  async embedToken(token: number): Promise<Tensor> {
    const e = await this.embed.predict({
      [this.embed.io.inputs[0].name]: tensor("i32", [1, 1], Int32Array.of(token)),
    });
    const embedded = e[this.embed.io.outputs[0].name];
    if (!embedded) throw new ChainProtocolError(this.embed.name, "the package returned no embedding");
    return embedded;
  }

  /**
   * Runs n ≤ prefillTokens tokens at positions [position, position + n) through every
   * super-block's prefill function, one call each (a short chunk is masked and its hidden rows
   * padded with copies of the last one — hiddenRows — never with tokens); the lm_head runs for the
   * last token when `withHead`. The chunk's KV rows must fit the cache without wrapping (ring KV:
   * rows ringRow(position) … + n − 1 below ctx; see canPrefill).
   */
  async prefill(tokens: readonly number[], position: number, withHead: boolean): Promise<ChainPrefillResult> {
    const T = this.prefillTokens;
    if (T === undefined)
      throw new ChainProtocolError("chain", "the super-block packages have no common prefill function");
    await this.commitSelection("prefill", this.keptRows(position));
    const hiddens = await this.chunk("prefill", tokens, position, T);
    if (!withHead) return { hidden: hiddens };
    const last = hiddens[hiddens.length - 1];
    return { hidden: hiddens, head: await this.runHead(hiddenRow(last, tokens.length - 1)) };
  }

  /**
   * Runs up to verifyTokens tokens at [position, position + n) through every super-block's verify
   * function (rows past n masked): returns each package's hidden_out [1, D, 1, T]. The states stay
   * where they were until accept(m) picks the end of row m − 1. Needs position + T ≤ ctx.
   */
  async verify(tokens: readonly number[], position: number): Promise<readonly Tensor[]> {
    const T = this.verifyTokens;
    if (T === undefined)
      throw new ChainProtocolError("chain", "the super-block packages have no common verify function");
    const hiddens = await this.chunk("verify", tokens, position, T);
    this.selection = 0; // the kept state is now the verify's start; its rows are the candidates
    return hiddens;
  }

  /** `tokens` through every super-block's prefill or verify function (T rows a call). */
  private async chunk(
    which: "prefill" | "verify",
    tokens: readonly number[],
    position: number,
    T: number,
  ): Promise<Tensor[]> {
    const n = tokens.length;
    if (n < 1 || n > T) throw new InvalidArgumentError(`a ${which} call takes 1 … ${T} tokens, not ${n}`);
    const rows: Tensor[] = [];
    for (const t of tokens) rows.push(await this.embedToken(t));
    let hidden = hiddenRows(rows, T);
    const hiddens: Tensor[] = [];
    for (const s of this.blocks) {
      const p = s[which] as BlockFunction;
      const io = p.f.io;
      const row = this.ring ? ringRow(io.ctx, this.ring.sinks, position) : position;
      const inputs: Record<string, Tensor> = {};
      let chunk: ReturnType<typeof prefillChunkInputs> | undefined;
      const chunkInputs = () => {
        const kernel = io.inputs.find((t) => t.role.kind === "conv_pick")?.shape[1];
        chunk ??= prefillChunkInputs(T, n, kernel === undefined ? 1 : kernel - T + 1);
        return chunk;
      };
      for (const t of p.inputs) {
        const role = t.role;
        if (role.kind === "hidden_in") inputs[t.name] = hidden;
        else if (role.kind === "position") inputs[t.name] = tensor("i32", t.shape, Int32Array.of(row));
        else if (role.kind === "kv_write") inputs[t.name] = tensor("i32", t.shape, kvWriteBound(role, row));
        else if (role.kind === "rope") {
          const { cos, sin } = ropeCosSin(
            role,
            Array.from({ length: T }, (_, i) => position + i),
          );
          inputs[t.name] = floatTensor(t, role.part === "cos" ? cos : sin);
        } else if (role.kind === "mask")
          inputs[t.name] = floatTensor(
            t,
            this.ring
              ? ringPrefillMask(io.ctx, this.ring.sinks, T, position)
              : prefillMask(io.ctx, T, position, n),
          );
        else if (role.kind === "valid") inputs[t.name] = floatTensor(t, chunkInputs().valid);
        else if (role.kind === "conv_pick") inputs[t.name] = floatTensor(t, chunkInputs().convPick);
        else if (role.kind === "row_select") inputs[t.name] = this.selectInput(t);
        else
          throw new ChainProtocolError(
            s.c.name,
            `${which} input ${t.name} (role ${role.kind}) is not the host's to feed`,
          );
      }
      const r = await p.f.predict(inputs, s.state, row, n);
      const v = r[p.hiddenOut.name];
      if (!v)
        throw new ChainProtocolError(s.c.name, `the ${which} function did not return ${p.hiddenOut.name}`);
      hidden = v;
      hiddens.push(v);
    }
    if (which === "prefill") this.selection = 0;
    return hiddens;
  }

  /**
   * True when some super-block's prefill function writes all T io KV rows of every chunk (a
   * backend without partialRows): a chunk then needs T free cache rows, not just its own.
   */
  get writesWholeChunks(): boolean {
    return this.blocks.some((s) => {
      const f = s.prefill?.f;
      return f !== undefined && !f.partialRows && f.io.outputs.some((t) => t.role.kind === "kv_new");
    });
  }

  /**
   * Whether a chunk of n tokens at `position` can run through prefill() without touching KV rows
   * it must not: its rows stay inside the cache without wrapping, and where every T rows are
   * written (mlstate KV, or a backend without partialRows) they stay inside the KV store and,
   * with ring KV past ctx, the chunk is full (its T rows replace only tokens that left the window).
   */
  canPrefill(position: number, n: number): boolean {
    const T = this.prefillTokens;
    if (T === undefined || n < 1 || n > T) return false;
    return this.blocks.every((s) => {
      const f = (s.prefill as NonNullable<Block["prefill"]>).f;
      const ctx = f.io.ctx;
      const row = this.ring ? ringRow(ctx, this.ring.sinks, position) : position;
      if (row + n > ctx) return false;
      const kv = f.io.states.find((t) => t.role.kind === "kv_state");
      if (!kv && f.partialRows) return true;
      if (this.ring !== undefined && position >= ctx && n < T) return false;
      return row + T <= (kv ? kv.shape[2] : ctx);
    });
  }

  /** The lm_head on one hidden row [1, D, 1, 1] (through its verify function with headRows). */
  async runHead(hidden: Tensor): Promise<HeadOutput> {
    if (this.headRows) return (await this.runHeadRows([hidden], [0]))[0];
    const h = await this.head.predict({ [this.head.io.inputs[0].name]: hidden });
    return readHeadOutputs(this.head, h);
  }

  /**
   * The lm_head's verify function on up to its T rows [1, D, 1, 1] in one call; normed[i] = 1 for a
   * row that is the MTP head's output (already normed), 0 for the trunk's. One output per row.
   */
  async runHeadRows(rows: readonly Tensor[], normed: readonly number[]): Promise<HeadOutput[]> {
    const f = this.head.verify;
    if (!f) throw new ChainProtocolError(this.head.name, "the lm_head has no verify function");
    const T = f.tokens;
    if (rows.length < 1 || rows.length > T)
      throw new InvalidArgumentError(
        `the lm_head's verify function scores 1 … ${T} rows, not ${rows.length}`,
      );
    const inputs: Record<string, Tensor> = {};
    for (const t of f.io.inputs) {
      if (t.role.kind === "hidden_in") inputs[t.name] = hiddenRows(rows, T);
      else if (t.role.kind === "normed")
        inputs[t.name] = floatTensor(
          t,
          Float32Array.from({ length: T }, (_, i) => normed[i] ?? 0),
        );
      else
        throw new ChainProtocolError(
          this.head.name,
          `verify input ${t.name} (role ${t.role.kind}) is not the host's to feed`,
        );
    }
    const out = await f.predict(inputs, undefined, 0);
    return rows.map((_, i) => readHeadRow(this.head.name, f.io, out, i));
  }

  /**
   * Runs `token` at `position` (0 ≤ position < ctx; any position below positionLimit with ring
   * KV); the lm_head only when `withHead`.
   */
  async step(token: number, position: number, withHead: boolean): Promise<ChainStepResult> {
    await this.commitSelection("decode", this.keptRows(position));
    const embedded = await this.embedToken(token);
    let hidden = embedded;
    const hiddens: Tensor[] = [];
    for (const s of this.blocks) {
      const io = s.c.io;
      const row = this.ring ? ringRow(io.ctx, this.ring.sinks, position) : position;
      const inputs: Record<string, Tensor> = {};
      for (const t of s.inputs) {
        const role = t.role;
        if (role.kind === "hidden_in") inputs[t.name] = hidden;
        else if (role.kind === "position")
          // host RoPE: the mlstate KV row; older packages also gather RoPE by it (positionLimit)
          inputs[t.name] = tensor("i32", t.shape, Int32Array.of(s.hostRope ? row : position));
        else if (role.kind === "kv_write") inputs[t.name] = tensor("i32", t.shape, kvWriteBound(role, row));
        else if (role.kind === "rope") {
          // RoPE by the token's own position, wherever its KV row is
          const { cos, sin } = ropeCosSin(role, [position]);
          inputs[t.name] = floatTensor(t, role.part === "cos" ? cos : sin);
        } else if (role.kind === "mask")
          inputs[t.name] = floatTensor(
            t,
            this.ring
              ? ringMask(role.rule, io.ctx, this.ring.sinks, position)
              : decodeMask(role.rule, io.ctx, position),
          );
        else if (role.kind === "row_select") inputs[t.name] = this.selectInput(t);
        else
          throw new ChainProtocolError(
            s.c.name,
            `input ${t.name} (role ${role.kind}) is not the host's to feed`,
          );
      }
      const r = await s.c.predict(inputs, s.state, row);
      const v = r[s.hiddenOut.name];
      if (!v) throw new ChainProtocolError(s.c.name, `the package did not return output ${s.hiddenOut.name}`);
      hidden = v;
      hiddens.push(hidden);
    }
    this.selection = 0;
    if (!withHead) return { embedded, hidden: hiddens };
    return { embedded, hidden: hiddens, head: await this.runHead(hidden) };
  }
}
