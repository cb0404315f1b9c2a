/**
 * The per-token protocol of a converted chain, in one place: what a runner feeds each component
 * and what it does with the outputs, driven only by the roles in ComponentIO (see contract.ts).
 * runtime-ane's ChainRunner runs it over its backends; the converter's tests run it straight over
 * the interpreter. The buffers a package carries between steps (GDN conv/recurrent states, io KV
 * caches, Core ML states) are kept by the component, as its state.ts plan says: per step the
 * protocol feeds only hidden state, position and mask, and reads back hidden state or logits.
 */
import { f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { argmaxToken, ChainProtocolError, type ComponentIO, decodeMask, type IoTensor } from "./contract.js";
import { ropeCosSin } from "./rope.js";
import { hostInputs, isStateless, type StatePlan, statePlan } from "./state.js";

/** What a component keeps between steps (see ChainComponent.newState); the protocol only resets it. */
export interface ChainComponentState {
  /** Zeroes every kept buffer (sequence start); ordered before the next predict(). */
  reset(): void;
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

interface Block {
  readonly c: ChainComponent;
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

/** embed → super-blocks → lm_head for one token at a time; each super-block keeps its own state. */
export class ChainStepper {
  private readonly embed: ChainComponent;
  private readonly blocks: Block[];
  private readonly head: ChainComponent;

  constructor(embed: ChainComponent, superblocks: readonly ChainComponent[], head: ChainComponent) {
    this.embed = embed;
    this.blocks = superblocks.map((c) => {
      const plan = statePlan(c.name, c.io);
      const hiddenOut = c.io.outputs.find((t) => t.role.kind === "hidden_out");
      if (!hiddenOut) throw new ChainProtocolError(c.name, "no output has the role hidden_out");
      return {
        c,
        inputs: hostInputs(c.io),
        hiddenOut,
        state: isStateless(plan) ? undefined : c.newState(plan),
      };
    });
    this.head = head;
  }

  /** Zeroes every state (sequence start). */
  reset(): void {
    for (const s of this.blocks) s.state?.reset();
  }

  /** Runs `token` at `position` (0 ≤ position < ctx); the lm_head only when `withHead`. */
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
      const inputs: Record<string, Tensor> = {};
      for (const t of s.inputs) {
        const role = t.role;
        if (role.kind === "hidden_in") inputs[t.name] = hidden;
        else if (role.kind === "position") inputs[t.name] = tensor("i32", t.shape, Int32Array.of(position));
        else if (role.kind === "rope") {
          const { cos, sin } = ropeCosSin(role, [position]);
          inputs[t.name] = floatTensor(t, role.part === "cos" ? cos : sin);
        } else if (role.kind === "mask")
          inputs[t.name] = floatTensor(t, decodeMask(role.rule, io.ctx, position));
        else
          throw new ChainProtocolError(
            s.c.name,
            `input ${t.name} (role ${role.kind}) is not the host's to feed`,
          );
      }
      const r = await s.c.predict(inputs, s.state, position);
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
