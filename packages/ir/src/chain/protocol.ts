/**
 * The per-token protocol of a converted chain, in one place: what a runner feeds each component
 * and what it does with the outputs, driven only by the roles in ComponentIO (see contract.ts).
 * runtime-ane's ChainRunner runs it over its backends; the converter's tests run it straight over
 * the interpreter. Buffers it owns: GDN conv/recurrent states and io KV caches (zeros at sequence
 * start), one Core ML state per mlstate component.
 */
import { AnemllError, f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { argmaxToken, type ComponentIO, decodeMask, type IoTensor } from "./contract.js";

/** A component state (Core ML MLState or the interpreter's); the protocol only resets it. */
export interface ChainComponentState {
  reset(): void;
}

/** One loaded component as the protocol drives it. */
export interface ChainComponent {
  readonly name: string;
  readonly io: ComponentIO;
  newState(): ChainComponentState;
  predict(inputs: Record<string, Tensor>, state?: ChainComponentState): Promise<Record<string, Tensor>>;
}

/** What the lm_head gives for one position: the full row of logits, or the arg-max pair of an argmax head. */
export type HeadOutput = { logits: Float32Array } | { top1: { id: number; value: number } };

/** A component broke the contract (an output it promised is missing, an input has no buffer). */
export class ChainProtocolError extends AnemllError {
  readonly component: string;
  constructor(component: string, message: string) {
    super("E_CHAIN_PROTOCOL", `${component}: ${message}`);
    this.component = component;
  }
}

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
  /** Host buffers bound to inputs by name: GDN states and io KV caches. */
  readonly buffers: Map<string, Tensor>;
  state: ChainComponentState | undefined;
}

function zeros(t: IoTensor): Tensor {
  if (t.dtype === "int32") return tensor("i32", t.shape);
  return tensor(t.dtype === "fp16" ? "f16" : "f32", t.shape);
}

function maskTensor(t: IoTensor, values: Float32Array): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, Uint16Array.from(values, f32ToF16Bits));
  return tensor("f32", t.shape, values);
}

/** Writes `row` ([1, H, 1, d]) into `cache` ([1, H, ctx, d]) at `position`, converting the dtype. */
function writeKvRow(cache: Tensor, row: Tensor, position: number): void {
  const [, heads, ctx, d] = cache.shape;
  const src = toFloat32(row.dtype, row.data);
  for (let h = 0; h < heads; h++) {
    const base = (h * ctx + position) * d;
    if (cache.dtype === "f16") {
      const dst = cache.data as Uint16Array;
      for (let i = 0; i < d; i++) dst[base + i] = f32ToF16Bits(src[h * d + i]);
    } else {
      (cache.data as Float32Array).set(src.subarray(h * d, (h + 1) * d), base);
    }
  }
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

/** embed → super-blocks → lm_head for one token at a time, owning every buffer the roles name. */
export class ChainStepper {
  private readonly embed: ChainComponent;
  private readonly blocks: Block[];
  private readonly head: ChainComponent;

  constructor(embed: ChainComponent, superblocks: readonly ChainComponent[], head: ChainComponent) {
    this.embed = embed;
    this.blocks = superblocks.map((c) => ({ c, buffers: new Map(), state: undefined }));
    this.head = head;
    this.reset();
  }

  /** Zeroes every state (sequence start). */
  reset(): void {
    for (const s of this.blocks) {
      s.buffers.clear();
      for (const t of s.c.io.inputs) {
        const k = t.role.kind;
        if (k === "gdn_conv_in" || k === "gdn_rec_in" || k === "kv_cache") s.buffers.set(t.name, zeros(t));
      }
      if (s.c.io.states.length) {
        if (s.state) s.state.reset();
        else s.state = s.c.newState();
      }
    }
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
      for (const t of io.inputs) {
        const role = t.role;
        if (role.kind === "hidden_in") inputs[t.name] = hidden;
        else if (role.kind === "position") inputs[t.name] = tensor("i32", t.shape, Int32Array.of(position));
        else if (role.kind === "mask")
          inputs[t.name] = maskTensor(t, decodeMask(role.rule, io.ctx, position));
        else {
          const buf = s.buffers.get(t.name);
          if (!buf)
            throw new ChainProtocolError(s.c.name, `no buffer for input ${t.name} (role ${role.kind})`);
          inputs[t.name] = buf;
        }
      }
      const r = await s.c.predict(inputs, s.state);
      for (const t of io.outputs) {
        const role = t.role;
        const v = r[t.name];
        if (!v) throw new ChainProtocolError(s.c.name, `the package did not return output ${t.name}`);
        if (role.kind === "hidden_out") hidden = v;
        else if (role.kind === "gdn_conv_out" || role.kind === "gdn_rec_out") s.buffers.set(role.next, v);
        else if (role.kind === "kv_new") writeKvRow(s.buffers.get(role.cache) as Tensor, v, position);
      }
      hiddens.push(hidden);
    }
    if (!withHead) return { embedded, hidden: hiddens };
    const h = await this.head.predict({ [this.head.io.inputs[0].name]: hidden });
    return { embedded, hidden: hiddens, head: readHeadOutputs(this.head, h) };
  }
}
