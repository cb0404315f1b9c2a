/**
 * The buffers a super-block package carries from one step to the next, read off its roles
 * (contract.ts), and kept by the backend that runs it, not by the host: Core ML keeps them on the
 * native side as IOSurface-backed ping-pong pairs, the reference backend as host tensors
 * (HostState below). Per step only what the host must choose crosses into a backend (hidden state,
 * position, mask) and only what it must read comes back (hidden state, logits or the top-1 pair).
 */
import { f32ToF16Bits, InvalidArgumentError, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import type { ChainComponentState, ComponentSnapshot } from "./component-state.js";
import { ChainProtocolError, type ComponentIO, type IoTensor } from "./contract.js";

/** Step t's `output` is step t+1's `input` (GDN conv window and recurrent state). */
export interface CarriedBuffer {
  readonly input: IoTensor;
  readonly output: IoTensor;
}

/**
 * `output` ([1, H, T, d]) is written into `input` ([1, H, ctx, d]) at rows [position, position + T)
 * of axis 2 (io KV: this step's keys or values into the cache).
 */
export interface RowWrittenBuffer {
  readonly input: IoTensor;
  readonly output: IoTensor;
}

export interface StatePlan {
  /** The component's name (for errors). */
  readonly component: string;
  readonly carried: readonly CarriedBuffer[];
  readonly rowWritten: readonly RowWrittenBuffer[];
  /** Core ML states the package declares (mlstate KV); the component's state holds them too. */
  readonly coreStates: readonly IoTensor[];
}

/** The sequence axis of a KV cache, along which rows are written. */
export const KV_ROW_AXIS = 2;

const HOST_INPUTS = new Set([
  "input_ids",
  "hidden_in",
  "position",
  "rope",
  "mask",
  "valid",
  "conv_pick",
  "kv_write",
  "row_select",
  "embedding",
  "normed",
]);

/** Inputs the host feeds every step; every other input is a kept buffer. */
export function hostInputs(io: ComponentIO): readonly IoTensor[] {
  return io.inputs.filter((t) => HOST_INPUTS.has(t.role.kind));
}

/** Outputs that go back to the host (hidden state, logits, arg-max pair). */
export function hostOutputs(io: ComponentIO): readonly IoTensor[] {
  const kept = new Set(["gdn_conv_out", "gdn_rec_out", "gdn_rows_out", "kv_new"]);
  return io.outputs.filter((t) => !kept.has(t.role.kind));
}

/** The kept buffers of a component, from its roles; throws when the roles do not pair up. */
export function statePlan(component: string, io: ComponentIO): StatePlan {
  const inputs = new Map(io.inputs.map((t) => [t.name, t]));
  const paired = new Set<string>();
  const pair = (output: IoTensor, inputName: string, kinds: readonly string[]) => {
    const input = inputs.get(inputName);
    if (!input || !kinds.includes(input.role.kind)) {
      throw new ChainProtocolError(
        component,
        `output ${output.name} (${output.role.kind}) names input ${inputName}, which is not a ${kinds.join(" or ")} input`,
      );
    }
    if (paired.has(inputName))
      throw new ChainProtocolError(component, `input ${inputName} is fed by two outputs`);
    paired.add(inputName);
    return input;
  };
  const carried: CarriedBuffer[] = [];
  const rowWritten: RowWrittenBuffer[] = [];
  for (const output of io.outputs) {
    const role = output.role;
    if (role.kind === "gdn_conv_out") {
      carried.push({ input: pair(output, role.next, ["gdn_conv_in"]), output });
    } else if (role.kind === "gdn_rec_out") {
      carried.push({ input: pair(output, role.next, ["gdn_rec_in"]), output });
    } else if (role.kind === "gdn_rows_out") {
      carried.push({ input: pair(output, role.next, ["gdn_rows_in"]), output });
    } else if (role.kind === "kv_new") {
      const input = pair(output, role.cache, ["kv_cache"]);
      if (input.shape.length !== 4 || output.shape.length !== 4 || output.shape[KV_ROW_AXIS] > io.ctx) {
        throw new ChainProtocolError(
          component,
          `${output.name} [${output.shape.join(", ")}] cannot be written into ${input.name} [${input.shape.join(", ")}]`,
        );
      }
      rowWritten.push({ input, output });
    }
  }
  for (const t of io.inputs) {
    // the last verify's per-row states: every function of the package reads them, only the verify
    // function writes them (as `<name>_out`)
    if (t.role.kind === "gdn_rows_in" && !paired.has(t.name)) {
      const { layer, part } = t.role;
      const role = { kind: "gdn_rows_out", layer, part, next: t.name } as const;
      carried.push({ input: t, output: { name: `${t.name}_out`, dtype: t.dtype, shape: t.shape, role } });
      continue;
    }
    if (!HOST_INPUTS.has(t.role.kind) && !paired.has(t.name)) {
      throw new ChainProtocolError(component, `no output feeds input ${t.name} (role ${t.role.kind})`);
    }
  }
  return { component, carried, rowWritten, coreStates: io.states };
}

/**
 * The plan's per-row GDN state buffers (a verify's gdn{L}_{conv,rec}_rows, [k + 1, …]) with the
 * kept buffer each row commits into (gdn{L}_conv / gdn{L}_rec, [1, …]), as indices into `carried`.
 */
export function rowStatePairs(plan: StatePlan): { readonly rows: number; readonly kept: number }[] {
  const pairs: { rows: number; kept: number }[] = [];
  for (const [i, b] of plan.carried.entries()) {
    const role = b.input.role;
    if (role.kind !== "gdn_rows_in") continue;
    const want = role.part === "conv" ? "gdn_conv_in" : "gdn_rec_in";
    const kept = plan.carried.findIndex(
      (k) => k.input.role.kind === want && "layer" in k.input.role && k.input.role.layer === role.layer,
    );
    if (kept < 0)
      throw new ChainProtocolError(
        plan.component,
        `${b.input.name} has no kept state of layer ${role.layer}`,
      );
    pairs.push({ rows: i, kept });
  }
  return pairs;
}

/** True when the component keeps nothing between steps (embed, lm_head). */
export function isStateless(plan: StatePlan): boolean {
  return plan.carried.length === 0 && plan.rowWritten.length === 0 && plan.coreStates.length === 0;
}

function zeros(t: IoTensor): Tensor {
  if (t.dtype === "int32") return tensor("i32", t.shape);
  return tensor(t.dtype === "fp16" ? "f16" : "f32", t.shape);
}

/**
 * Writes `rows` ([1, H, T, d]; its first `count` rows, default all) into `cache` ([1, H, ctx, d])
 * from row `position`, converting the dtype.
 */
export function writeRows(cache: Tensor, rows: Tensor, position: number, count?: number): number {
  const [, heads, ctx, d] = cache.shape;
  const T = rows.shape[KV_ROW_AXIS];
  const t = count ?? T;
  if (position < 0 || position + t > ctx) {
    throw new RangeError(`rows [${position}, ${position + t}) are outside the cache's ${ctx} rows`);
  }
  const src = toFloat32(rows.dtype, rows.data);
  for (let h = 0; h < heads; h++) {
    const base = (h * ctx + position) * d;
    const from = h * T * d;
    if (cache.dtype === "f16") {
      const dst = cache.data as Uint16Array;
      for (let i = 0; i < t * d; i++) dst[base + i] = f32ToF16Bits(src[from + i]);
    } else {
      (cache.data as Float32Array).set(src.subarray(from, from + t * d), base);
    }
  }
  return heads * t * d * cache.data.BYTES_PER_ELEMENT;
}

/** Rows [0, rows) of `cache` ([1, H, ctx, d]) as a [1, H, rows, d] tensor of its dtype (a copy). */
export function readRows(cache: Tensor, rows: number): Tensor {
  const [one, heads, ctx, d] = cache.shape;
  if (!Number.isInteger(rows) || rows < 0 || rows > ctx) {
    throw new RangeError(`rows [0, ${rows}) are outside the cache's ${ctx} rows`);
  }
  const out = tensor(cache.dtype, [one, heads, rows, d]);
  const src = cache.data as Uint16Array | Float32Array;
  const dst = out.data as Uint16Array | Float32Array;
  for (let h = 0; h < heads; h++) dst.set(src.subarray(h * ctx * d, (h * ctx + rows) * d), h * rows * d);
  return out;
}

/** What HostState.snapshot() copies: every kept buffer (KV caches up to `rows`) and the core state. */
export interface HostSnapshot<Core> extends ComponentSnapshot {
  readonly rows: number;
  readonly buffers: ReadonlyMap<string, Tensor>;
  readonly core: Core;
  readonly bytes: number;
}

/**
 * The state plan kept as host tensors, for backends that run on host memory (the reference
 * interpreter): a carried output replaces its input by reference (ping-pong without a copy), rows
 * are written into the cache. `core` is the backend's own state for `coreStates` (the
 * interpreter's MilState), made again on reset.
 */
export class HostState<Core = undefined> implements ChainComponentState {
  private readonly buffers = new Map<string, Tensor>();
  private coreState!: Core;

  /**
   * @param newCore makes the backend's own state (zeros)
   * @param coreCopies copies it and counts its bytes (for snapshot / restore; without it, a state
   *   with a core cannot be copied)
   */
  constructor(
    readonly plan: StatePlan,
    private readonly newCore: () => Core,
    private readonly coreCopies?: { copy: (core: Core) => Core; bytes: (core: Core) => number },
  ) {
    this.reset();
  }

  get core(): Core {
    return this.coreState;
  }

  /** Zeroes every buffer (sequence start). */
  reset(): void {
    for (const b of [...this.plan.carried, ...this.plan.rowWritten])
      this.buffers.set(b.input.name, zeros(b.input));
    this.coreState = this.newCore();
  }

  /**
   * A copy of every buffer: carried ones whole, KV caches up to row `rows` (the rows written so
   * far; the others are zeros), the core state through `copyCore`.
   */
  async snapshot(rows: number): Promise<HostSnapshot<Core>> {
    return this.copy(rows);
  }

  async restore(s: ComponentSnapshot): Promise<void> {
    this.put(s as HostSnapshot<Core>);
  }

  /** snapshot(), synchronously. */
  copy(rows: number): HostSnapshot<Core> {
    const buffers = new Map<string, Tensor>();
    let bytes = 0;
    const keep = (name: string, t: Tensor) => {
      buffers.set(name, t);
      bytes += t.data.byteLength;
    };
    for (const b of this.plan.carried) {
      const t = this.buffers.get(b.input.name) as Tensor;
      keep(b.input.name, tensor(t.dtype, t.shape, t.data.slice()));
    }
    for (const b of this.plan.rowWritten)
      keep(b.input.name, readRows(this.buffers.get(b.input.name) as Tensor, rows));
    const core = this.copiedCore(this.coreState);
    if (core !== undefined && this.coreCopies) bytes += this.coreCopies.bytes(core);
    return { rows, buffers, core, bytes };
  }

  /** restore(), synchronously; copies the snapshot again, so it stays usable. */
  put(s: HostSnapshot<Core>): void {
    if (!(s.buffers instanceof Map) || s.buffers.size !== this.buffers.size)
      throw new ChainProtocolError(this.plan.component, "the snapshot is not of this state's plan");
    for (const b of this.plan.carried) {
      const t = s.buffers.get(b.input.name) as Tensor;
      this.buffers.set(b.input.name, tensor(t.dtype, t.shape, t.data.slice()));
    }
    for (const b of this.plan.rowWritten) {
      const cache = zeros(b.input);
      writeRows(cache, s.buffers.get(b.input.name) as Tensor, 0);
      this.buffers.set(b.input.name, cache);
    }
    this.coreState = this.copiedCore(s.core);
  }

  private copiedCore(core: Core): Core {
    if (core === undefined) return core;
    if (!this.coreCopies)
      throw new ChainProtocolError(this.plan.component, "this state's core state cannot be copied");
    return this.coreCopies.copy(core);
  }

  /**
   * The kept buffers by the name of the output carried into them: a backend may write a step's
   * carried outputs into them in place (after reading its inputs), so that keeping them is free.
   */
  carriedTargets(): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const b of this.plan.carried) out[b.output.name] = this.buffers.get(b.input.name) as Tensor;
    return out;
  }

  /**
   * The host's inputs plus the kept buffers, by input name (only those named in `inputs` when
   * given: the function's own, where the plan holds buffers another function reads).
   */
  bind(host: Record<string, Tensor>, inputs?: ReadonlySet<string>): Record<string, Tensor> {
    const all: Record<string, Tensor> = { ...host };
    for (const [name, t] of this.buffers) if (!inputs || inputs.has(name)) all[name] = t;
    return all;
  }

  async selectRow(row: number): Promise<void> {
    for (const { rows, kept } of rowStatePairs(this.plan)) {
      const from = this.buffers.get(this.plan.carried[rows].input.name) as Tensor;
      const to = this.buffers.get(this.plan.carried[kept].input.name) as Tensor;
      const n = to.data.length;
      if (from.data.length < (row + 1) * n)
        throw new InvalidArgumentError(`row ${row} is outside ${this.plan.carried[rows].input.name}`);
      // same dtype on both sides (one plan, one graph dtype): a typed-array copy of the row
      (to.data as Float32Array).set((from.data as Float32Array).subarray(row * n, (row + 1) * n));
    }
  }

  /**
   * Keeps the state outputs of a step at `position` and returns the others, with the bytes copied
   * to keep them (the rows written into caches, the first `rows` of them when given; carried
   * outputs move without a copy).
   */
  keep(
    outputs: Record<string, Tensor>,
    position: number | undefined,
    rows?: number,
  ): { outputs: Record<string, Tensor>; copied: number } {
    const rest: Record<string, Tensor> = { ...outputs };
    let copied = 0;
    const take = (t: IoTensor) => {
      const v = rest[t.name];
      if (!v)
        throw new ChainProtocolError(this.plan.component, `the package did not return output ${t.name}`);
      delete rest[t.name];
      return v;
    };
    for (const b of this.plan.carried) {
      // the verify function's per-row states: only it returns them (decode and prefill keep them as they are)
      if (b.output.role.kind === "gdn_rows_out" && !(b.output.name in rest)) continue;
      this.buffers.set(b.input.name, take(b.output));
    }
    for (const b of this.plan.rowWritten) {
      if (position === undefined)
        throw new ChainProtocolError(this.plan.component, `${b.output.name} needs the step's position`);
      copied += writeRows(this.buffers.get(b.input.name) as Tensor, take(b.output), position, rows);
    }
    return { outputs: rest, copied };
  }
}
