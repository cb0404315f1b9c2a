/**
 * Test-only chain runner: embed → superblocks… → lm_head per token through the ir interpreter,
 * owning the GDN and KV buffers and building position + mask per step from the components'
 * ComponentIO roles alone — what a runtime does, with no knowledge of names beyond the roles.
 */

import { f16BitsToF32, f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { argmax } from "@anemll-qwen35/ir/checkpoint";
import { MilInterpreter, type MilState, type MlModel, type NonFiniteReport } from "@anemll-qwen35/ir/mil";
import { argmaxToken, type ComponentIO, decodeMask, type IoTensor } from "../src/graph/index.js";

export interface ChainPart {
  readonly model: MlModel;
  readonly io: ComponentIO;
}

export interface ChainParts {
  readonly embed: ChainPart;
  readonly superblocks: readonly ChainPart[];
  readonly lmHead: ChainPart;
}

export interface ChainOptions {
  readonly precision: "fp32" | "fp16";
  /** fp16 mode: flush subnormal results to zero, as the ANE does. */
  readonly flushSubnormals?: boolean;
}

export interface StepResult {
  /** Full-vocabulary logits (logits mode), else undefined. */
  readonly logits?: Float32Array;
  /** The greedy token. */
  readonly token: number;
  /** hidden_out of each superblocks package, in order (fp32 values). */
  readonly hidden: readonly Float32Array[];
  /** The embedding output. */
  readonly embedded: Float32Array;
  readonly nonFinite: readonly (NonFiniteReport & { component: string })[];
}

function zeros(t: IoTensor): Tensor {
  return t.dtype === "fp16"
    ? tensor("f16", t.shape)
    : t.dtype === "int32"
      ? tensor("i32", t.shape)
      : tensor("f32", t.shape);
}

function fromValues(t: IoTensor, values: Float32Array): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, Uint16Array.from(values, f32ToF16Bits));
  return tensor("f32", t.shape, values);
}

function values(t: Tensor): Float32Array {
  return toFloat32(t.dtype, t.data);
}

interface Stage {
  readonly part: ChainPart;
  readonly interp: MilInterpreter;
  /** Host buffers bound to this stage's inputs by name (GDN states, KV caches). */
  readonly buffers: Map<string, Tensor>;
  mlstate: MilState | undefined;
}

export class ReferenceChain {
  private readonly embed: Stage;
  private readonly blocks: Stage[];
  private readonly head: Stage;

  constructor(parts: ChainParts, opts: ChainOptions) {
    const stage = (part: ChainPart): Stage => ({
      part,
      interp: new MilInterpreter(part.model.program, {
        precision: opts.precision,
        flushSubnormals: opts.flushSubnormals,
        onNonFinite: "collect",
      }),
      buffers: new Map(),
      mlstate: undefined,
    });
    this.embed = stage(parts.embed);
    this.blocks = parts.superblocks.map(stage);
    this.head = stage(parts.lmHead);
    this.reset();
  }

  /** Zeroes every state (sequence start). */
  reset(): void {
    for (const s of this.blocks) {
      s.buffers.clear();
      for (const t of s.part.io.inputs) {
        const k = t.role.kind;
        if (k === "gdn_conv_in" || k === "gdn_rec_in" || k === "kv_cache") s.buffers.set(t.name, zeros(t));
      }
      s.mlstate = s.part.io.states.length ? s.interp.newState() : undefined;
    }
  }

  /** Runs one token at `position`. */
  step(token: number, position: number): StepResult {
    const nonFinite: (NonFiniteReport & { component: string })[] = [];
    const collect = (component: string, list: readonly NonFiniteReport[]) => {
      for (const r of list) nonFinite.push({ ...r, component });
    };

    // embed
    const e = this.embed.interp.run({ input_ids: tensor("i32", [1, 1], Int32Array.of(token)) });
    collect("embed", e.nonFinite);
    let hidden = e.outputs[this.embed.part.io.outputs[0].name];
    const embedded = values(hidden);

    // super-blocks
    const hiddens: Float32Array[] = [];
    for (const [i, s] of this.blocks.entries()) {
      const io = s.part.io;
      const inputs: Record<string, Tensor> = {};
      for (const t of io.inputs) {
        const role = t.role;
        if (role.kind === "hidden_in") inputs[t.name] = hidden;
        else if (role.kind === "position") inputs[t.name] = tensor("i32", [1], Int32Array.of(position));
        else if (role.kind === "mask")
          inputs[t.name] = fromValues(t, decodeMask(role.rule, io.ctx, position));
        else inputs[t.name] = s.buffers.get(t.name) as Tensor;
      }
      const r = s.interp.run(inputs, { state: s.mlstate });
      collect(`superblocks[${i}]`, r.nonFinite);
      for (const t of io.outputs) {
        const role = t.role;
        const out = r.outputs[t.name];
        if (role.kind === "hidden_out") hidden = out;
        else if (role.kind === "gdn_conv_out" || role.kind === "gdn_rec_out") s.buffers.set(role.next, out);
        else if (role.kind === "kv_new") writeRow(s.buffers.get(role.cache) as Tensor, out, position);
      }
      hiddens.push(values(hidden));
    }

    // lm_head
    const h = this.head.interp.run({ [this.head.part.io.inputs[0].name]: hidden });
    collect("lm_head", h.nonFinite);
    const lm = this.head.part.io.lmHead;
    if (!lm) throw new Error("lm_head io has no lmHead description");
    if (lm.argmax) {
      const idx = h.outputs.argmax_idx.data as Int32Array;
      const val = values(h.outputs.argmax_val);
      const offsets = this.head.part.io.outputs.find((t) => t.role.kind === "argmax_idx");
      const rowOffsets = offsets?.role.kind === "argmax_idx" ? offsets.role.rowOffsets : [];
      return { token: argmaxToken(rowOffsets, idx, val), hidden: hiddens, embedded, nonFinite };
    }
    const logits = new Float32Array(lm.vocab);
    for (const t of this.head.part.io.outputs) {
      if (t.role.kind === "logits") logits.set(values(h.outputs[t.name]), t.role.rowOffset);
    }
    return { logits, token: argmax(logits), hidden: hiddens, embedded, nonFinite };
  }
}

/** Writes `row` [1, Hkv, 1, hd] into `cache` [1, Hkv, ctx, hd] at row `position` (same dtype). */
function writeRow(cache: Tensor, row: Tensor, position: number): void {
  const [, heads, ctx, hd] = cache.shape;
  if (cache.dtype !== row.dtype) throw new Error(`kv row is ${row.dtype}, cache is ${cache.dtype}`);
  const dst = cache.data as Float32Array | Uint16Array;
  const src = row.data as Float32Array | Uint16Array;
  for (let h = 0; h < heads; h++) dst.set(src.subarray(h * hd, (h + 1) * hd), (h * ctx + position) * hd);
}

export interface RunResult {
  /** One row per step: prompt positions, then decode steps. */
  readonly logits: Float32Array[];
  /** Greedy tokens: [0] after the prompt, [i+1] after decode step i. */
  readonly tokens: number[];
  /** Top-1 of every step (prompt positions, then decode steps). */
  readonly top1: number[];
  /** Per step: hidden_out of each superblocks package. */
  readonly hidden: (readonly Float32Array[])[];
  readonly embedded: Float32Array[];
  readonly nonFinite: StepResult["nonFinite"][number][];
}

/**
 * Prompt then `decodeSteps` greedy steps. With `force`, decode step i feeds force[i] instead of
 * the model's own greedy token (teacher forcing, to compare distributions step by step).
 */
export function runChain(
  chain: ReferenceChain,
  prompt: readonly number[],
  decodeSteps: number,
  force?: readonly number[],
): RunResult {
  chain.reset();
  const out: RunResult = { logits: [], tokens: [], top1: [], hidden: [], embedded: [], nonFinite: [] };
  const record = (r: StepResult) => {
    out.top1.push(r.token);
    if (r.logits) out.logits.push(r.logits);
    out.hidden.push(r.hidden);
    out.embedded.push(r.embedded);
    out.nonFinite.push(...r.nonFinite);
  };
  let last: StepResult | undefined;
  for (const [p, t] of prompt.entries()) {
    last = chain.step(t, p);
    record(last);
  }
  out.tokens.push((last as StepResult).token);
  for (let i = 0; i < decodeSteps; i++) {
    const feed = force ? force[i] : out.tokens[i];
    const r = chain.step(feed, prompt.length + i);
    record(r);
    out.tokens.push(r.token);
  }
  return out;
}

export function f16Round(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}
