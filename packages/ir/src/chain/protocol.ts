/**
 * The per-token protocol of a converted chain, in one place: what a runner feeds each component
 * and what it does with the outputs, driven only by the roles in ComponentIO (see contract.ts).
 * runtime-ane's ChainRunner runs it over its backends; the converter's tests run it straight over
 * the interpreter. The buffers a package carries between steps (GDN conv/recurrent states, io KV
 * caches, Core ML states) are kept by the component, as its state.ts plan says: per step the
 * protocol feeds only hidden state, position and mask, and reads back hidden state or logits.
 */
import { f32ToF16Bits, InvalidArgumentError, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import {
  argmaxToken,
  ChainProtocolError,
  type ComponentIO,
  decodeMask,
  type IoTensor,
  ringMask,
  ringRow,
} from "./contract.js";
import { ropeCosSin } from "./rope.js";
import { hostInputs, isStateless, type StatePlan, statePlan } from "./state.js";

/** What a component keeps between steps (see ChainComponent.newState); the protocol resets and copies it. */
export interface ChainComponentState {
  /** Zeroes every kept buffer (sequence start); ordered before the next predict(). */
  reset(): void;
  /**
   * A copy of every kept buffer (KV caches: rows [0, rows), the others are zeros), taken after the
   * predictions asked for before.
   */
  snapshot(rows: number): Promise<ComponentSnapshot>;
  /** Puts a snapshot of a state of the same plan back, before the predictions asked for after. */
  restore(snapshot: ComponentSnapshot): Promise<void>;
}

/** A copy of one component's state; `bytes` is what it holds. */
export interface ComponentSnapshot {
  readonly bytes: number;
}

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
}

/** Float values as an input of `t`'s dtype (fp16 as bit patterns). */
export function floatTensor(t: IoTensor, values: Float32Array): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, Uint16Array.from(values, f32ToF16Bits));
  return tensor("f32", t.shape, values);
}

/** The lm_head's outputs merged over its vocabulary pieces. */
export function readHeadOutputs(head: ChainComponent, outputs: Record<string, Tensor>): HeadOutput {
  const { io, name } = head;
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
    if (!idxT || !valT || idxT.role.kind !== "argmax_idx") {
      throw new ChainProtocolError(name, "argmax outputs are not described");
    }
    const idx = out(idxT).data as Int32Array;
    const val = toFloat32(out(valT).dtype, out(valT).data);
    let best = 0;
    for (let i = 1; i < val.length; i++) if (val[i] > val[best]) best = i;
    return { top1: { id: argmaxToken(idxT.role.rowOffsets, idx, val), value: val[best] } };
  }
  const logits = new Float32Array(lm.vocab);
  for (const t of io.outputs) {
    if (t.role.kind === "logits") logits.set(toFloat32(out(t).dtype, out(t).data), t.role.rowOffset);
  }
  return { logits };
}

export interface ChainStepperOptions {
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
      const plan = statePlan(c.name, c.io);
      const hiddenOut = c.io.outputs.find((t) => t.role.kind === "hidden_out");
      if (!hiddenOut) throw new ChainProtocolError(c.name, "no output has the role hidden_out");
      return {
        c,
        inputs: hostInputs(c.io),
        hiddenOut,
        hostRope: c.io.inputs.some((t) => t.role.kind === "rope"),
        state: isStateless(plan) ? undefined : c.newState(plan),
      };
    });
    this.head = head;
  }

  /** Zeroes every state (sequence start). */
  reset(): void {
    for (const s of this.blocks) s.state?.reset();
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

  /**
   * The most positions this chain can step through with ring KV: any int32 position when every
   * super-block takes RoPE from the host, else ctx (older packages gather RoPE from a table of ctx
   * rows by the position input).
   */
  get positionLimit(): number {
    if (this.blocks.every((b) => b.hostRope)) return MAX_POSITIONS;
    return this.blocks[0]?.c.io.ctx ?? MAX_POSITIONS;
  }

  /**
   * Runs `token` at `position` (0 ≤ position < ctx; any position below positionLimit with ring
   * KV); the lm_head only when `withHead`.
   */
  async step(token: number, position: number, withHead: boolean): Promise<ChainStepResult> {
    const e = await this.embed.predict({
      [this.embed.io.inputs[0].name]: tensor("i32", [1, 1], Int32Array.of(token)),
    });
    const embedded = e[this.embed.io.outputs[0].name];
    if (!embedded) throw new ChainProtocolError(this.embed.name, "the package returned no embedding");
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
    if (!withHead) return { embedded, hidden: hiddens };
    const h = await this.head.predict({ [this.head.io.inputs[0].name]: hidden });
    return { embedded, hidden: hiddens, head: readHeadOutputs(this.head, h) };
  }
}
