/**
 * ChainRunner: runs a converted chain (model.json + packages) one token at a time,
 * embed → super-block packages → lm_head, over a backend. It owns every state buffer (GDN conv and
 * recurrent states, KV caches as host buffers or Core ML states), builds position and mask for each
 * step from the components' declared roles, merges a split lm_head, and implements generate's
 * StepModel so the shared text loop drives it.
 */
import { join } from "node:path";
import { AnemllError, f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import {
  ContextOverflowError,
  type StepModel,
  type StepOptions,
  type StepOutput,
} from "@anemll-qwen35/generate";
import {
  argmaxToken,
  type ChainManifest,
  type ChainManifestComponent,
  decodeMask,
  type IoTensor,
  readChainManifest,
} from "@anemll-qwen35/ir/chain";
import type { Backend, ComponentState, LoadedComponent } from "./backend.js";

export interface LoadChainOptions {
  backend: Backend;
  /**
   * What happens when prompt + generated tokens exceed the context: "error" (default) throws
   * ContextOverflowError; "slide" restarts from the most recent tokens (GDN state cannot be
   * truncated, so the kept window is prefilled again).
   */
  contextOverflow?: "error" | "slide";
  /** "slide": the fraction of the context kept when the window moves (default 0.5). */
  slideKeep?: number;
  onProgress?: (event: { stage: "load"; component: string; index: number; total: number }) => void;
  signal?: AbortSignal;
}

/** A package of the chain is missing or disagrees with model.json. */
export class ChainLoadError extends AnemllError {
  readonly component: string;
  constructor(component: string, message: string, options?: { cause?: unknown }) {
    super("E_CHAIN_LOAD", `${component}: ${message}`, options);
    this.component = component;
  }
}

interface Stage {
  readonly entry: ChainManifestComponent;
  readonly loaded: LoadedComponent;
  /** Host buffers bound to inputs by name: GDN states and io KV caches. */
  readonly buffers: Map<string, Tensor>;
  state: ComponentState | undefined;
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

export class ChainRunner implements StepModel {
  readonly manifest: ChainManifest;
  readonly dir: string;
  readonly backend: Backend;
  readonly contextLength: number;
  readonly outputKind: "logits" | "top1";
  private readonly embed: Stage;
  private readonly blocks: Stage[];
  private readonly head: Stage;
  private readonly overflow: "error" | "slide";
  private readonly slideKeep: number;
  /** Every token consumed since reset (needed to refill the window when sliding). */
  private history: number[] = [];
  private disposed = false;

  private constructor(
    dir: string,
    manifest: ChainManifest,
    backend: Backend,
    stages: Stage[],
    o: LoadChainOptions,
  ) {
    this.dir = dir;
    this.manifest = manifest;
    this.backend = backend;
    this.contextLength = manifest.ctx;
    this.outputKind = manifest.argmax ? "top1" : "logits";
    this.embed = stages[0];
    this.blocks = stages.slice(1, -1);
    this.head = stages[stages.length - 1];
    this.overflow = o.contextOverflow ?? "error";
    this.slideKeep = o.slideKeep ?? 0.5;
    this.resetBuffers();
  }

  /** Reads model.json and loads every package through the backend. */
  static async load(dir: string, options: LoadChainOptions): Promise<ChainRunner> {
    const manifest = await readChainManifest(dir);
    const stages: Stage[] = [];
    try {
      for (const [index, entry] of manifest.components.entries()) {
        options.signal?.throwIfAborted();
        options.onProgress?.({
          stage: "load",
          component: entry.name,
          index,
          total: manifest.components.length,
        });
        let loaded: LoadedComponent;
        try {
          loaded = await options.backend.load(join(dir, entry.file), {
            name: entry.name,
            functionName: entry.function,
            io: entry.io,
            sha256: entry.sha256,
            signal: options.signal,
          });
        } catch (err) {
          if ((err as Error).name === "AbortError") throw err;
          throw new ChainLoadError(entry.name, `could not load ${entry.file}: ${(err as Error).message}`, {
            cause: err,
          });
        }
        stages.push({ entry, loaded, buffers: new Map(), state: undefined });
      }
    } catch (err) {
      for (const s of stages) s.loaded.dispose();
      throw err;
    }
    return new ChainRunner(dir, manifest, options.backend, stages, options);
  }

  get position(): number {
    return this.history.length;
  }

  reset(): void {
    this.history = [];
    this.resetBuffers();
  }

  private resetBuffers(): void {
    for (const s of this.blocks) {
      s.buffers.clear();
      for (const t of s.entry.io.inputs) {
        const k = t.role.kind;
        if (k === "gdn_conv_in" || k === "gdn_rec_in" || k === "kv_cache") s.buffers.set(t.name, zeros(t));
      }
      if (s.entry.io.states.length) {
        if (s.state) s.state.reset();
        else s.state = s.loaded.newState();
      }
    }
  }

  async prefill(ids: Int32Array | number[], opts: StepOptions = {}): Promise<StepOutput> {
    const tokens = Array.from(ids);
    if (tokens.length === 0) throw new AnemllError("E_EMPTY_PROMPT", "prefill needs at least one token");
    if (this.position + tokens.length > this.contextLength) {
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
      if (this.overflow === "error") throw new ContextOverflowError(this.position + 1, this.contextLength);
      const keep = Math.max(1, Math.floor(this.contextLength * this.slideKeep) - 1);
      const window = this.history.slice(-keep);
      this.reset();
      await this.consume(window, opts, false);
    }
    return this.consume([id], opts);
  }

  /** Runs tokens through the chain; the lm_head runs only for the last one (when wanted). */
  private async consume(tokens: number[], opts: StepOptions, wantOutput = true): Promise<StepOutput> {
    let out: StepOutput | undefined;
    for (const [i, token] of tokens.entries()) {
      opts.signal?.throwIfAborted();
      const last = i === tokens.length - 1;
      out = await this.step(token, wantOutput && last);
    }
    return out ?? { logits: new Float32Array(0) };
  }

  private async step(token: number, withHead: boolean): Promise<StepOutput | undefined> {
    if (this.disposed) throw new AnemllError("E_DISPOSED", "the chain was disposed");
    const position = this.history.length;
    const e = await this.embed.loaded.predict({
      [this.embed.entry.io.inputs[0].name]: tensor("i32", [1, 1], Int32Array.of(token)),
    });
    let hidden = e[this.embed.entry.io.outputs[0].name];
    for (const s of this.blocks) {
      const io = s.entry.io;
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
            throw new ChainLoadError(s.entry.name, `no buffer for input ${t.name} (role ${role.kind})`);
          inputs[t.name] = buf;
        }
      }
      const r = await s.loaded.predict(inputs, s.state);
      for (const t of io.outputs) {
        const role = t.role;
        const v = r[t.name];
        if (!v) throw new ChainLoadError(s.entry.name, `the package did not return output ${t.name}`);
        if (role.kind === "hidden_out") hidden = v;
        else if (role.kind === "gdn_conv_out" || role.kind === "gdn_rec_out") s.buffers.set(role.next, v);
        else if (role.kind === "kv_new") writeKvRow(s.buffers.get(role.cache) as Tensor, v, position);
      }
    }
    this.history.push(token);
    if (!withHead) return undefined;
    return this.runHead(hidden);
  }

  private async runHead(hidden: Tensor): Promise<StepOutput> {
    const io = this.head.entry.io;
    const h = await this.head.loaded.predict({ [io.inputs[0].name]: hidden });
    const lm = io.lmHead;
    if (!lm) throw new ChainLoadError(this.head.entry.name, "model.json describes no lm_head split");
    if (lm.argmax) {
      const idxT = io.outputs.find((t) => t.role.kind === "argmax_idx");
      const valT = io.outputs.find((t) => t.role.kind === "argmax_val");
      if (!idxT || !valT || idxT.role.kind !== "argmax_idx") {
        throw new ChainLoadError(this.head.entry.name, "argmax outputs are not described");
      }
      const idx = h[idxT.name].data as Int32Array;
      const val = toFloat32(h[valT.name].dtype, h[valT.name].data);
      const id = argmaxToken(idxT.role.rowOffsets, idx, val);
      let best = 0;
      for (let i = 1; i < val.length; i++) if (val[i] > val[best]) best = i;
      return { top1: { id, value: val[best] } };
    }
    const logits = new Float32Array(lm.vocab);
    for (const t of io.outputs) {
      if (t.role.kind !== "logits") continue;
      const piece = h[t.name];
      logits.set(toFloat32(piece.dtype, piece.data), t.role.rowOffset);
    }
    return { logits };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const s of [this.embed, ...this.blocks, this.head]) s.loaded.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
