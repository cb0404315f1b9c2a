/**
 * One model split across runtimes (the reference study's experiment B): the first N decoder
 * layers on MLX, the rest and the head on the ANE chain, the hidden state handed over per token.
 *
 *   token → MLX: embed + layers [0, N) → hidden [D] → host (fp16 [1, D, 1, 1])
 *         → ANE: super-block packages N/4 … → lm_head → logits
 *
 * The chain must hold one super-block per package (fuse 1) so that any multiple of 4 layers is a
 * package boundary. The MLX side stands in for the chain's embed package in the chain protocol
 * (ir's ChainStepper), so the ANE half runs exactly as it does in a whole chain. Each step's time
 * is split into the MLX part and the ANE part.
 */
import { join } from "node:path";
import { fromFloat32, tensor } from "@anemll-qwen35/core";
import {
  ContextOverflowError,
  type StepModel,
  type StepOptions,
  type StepOutput,
} from "@anemll-qwen35/generate";
import {
  type ChainComponent,
  type ChainManifest,
  ChainStepper,
  type StatePlan,
} from "@anemll-qwen35/ir/chain";
import type { Backend, ComponentState, LoadedComponent } from "@anemll-qwen35/runtime-ane";
import { loadMlxModel, MlxLayerPrefix, type MlxQwen35 } from "@anemll-qwen35/runtime-mlx";
import { BenchOptionError } from "./errors.js";

export interface SplitModelOptions {
  /** The checkpoint MLX loads. */
  readonly checkpoint: string;
  /** The chain converted from it with fuse 1, and its model.json. */
  readonly chainDir: string;
  readonly manifest: ChainManifest;
  /** Layers on MLX: a multiple of 4 from 4 to L − 4. */
  readonly layers: number;
  readonly backend: Backend;
  readonly mlx: { bits?: 4 | 8; dtype?: "float32" | "bfloat16" };
}

export class SplitModel implements StepModel {
  readonly contextLength: number;
  readonly outputKind: "logits" | "top1";
  /** Milliseconds of the last step on each side. */
  lastMs = { mlx: 0, ane: 0 };
  private history = 0;
  private pendingMlxMs = 0;

  private constructor(
    private readonly mlx: MlxQwen35,
    private readonly prefix: MlxLayerPrefix,
    private readonly loaded: LoadedComponent[],
    private readonly stepper: ChainStepper,
    manifest: ChainManifest,
  ) {
    this.contextLength = Math.min(manifest.ctx, mlx.contextLength);
    this.outputKind = manifest.argmax ? "top1" : "logits";
  }

  static async open(o: SplitModelOptions): Promise<SplitModel> {
    const m = o.manifest;
    const L = m.model.numLayers;
    const blocks = m.components.filter((c) => c.kind === "superblocks");
    if (blocks.some((c) => c.io.superBlocks.length !== 1)) {
      throw new BenchOptionError(
        "split",
        `${o.chainDir} must hold one super-block per package (convert with --fuse 1)`,
      );
    }
    if (!Number.isInteger(o.layers) || o.layers % 4 !== 0 || o.layers < 4 || o.layers > L - 4) {
      throw new BenchOptionError(
        "split",
        `layers on MLX must be a multiple of 4 from 4 to ${L - 4}, got ${o.layers}`,
      );
    }
    const first = o.layers / 4;
    const tail = [...blocks.filter((c) => c.io.superBlocks[0] >= first), m.components.at(-1)!];
    const mlx = await loadMlxModel(o.checkpoint, { ...o.mlx, contextLength: m.ctx });
    const loaded: LoadedComponent[] = [];
    try {
      for (const c of tail) {
        loaded.push(
          await o.backend.load(join(o.chainDir, c.file), {
            name: c.name,
            functionName: c.function,
            io: c.io,
            sha256: c.sha256,
          }),
        );
      }
    } catch (err) {
      for (const c of loaded) c.dispose();
      await mlx.dispose();
      throw err;
    }
    const prefix = new MlxLayerPrefix(mlx, o.layers);
    const parts: ChainComponent[] = tail.map((c, i) => ({
      name: c.name,
      io: c.io,
      newState: (plan: StatePlan) => loaded[i].newState(plan),
      predict: (inputs, state, position) => loaded[i].predict(inputs, state as ComponentState, position),
    }));
    const embedIo = m.components[0].io;
    const out = embedIo.outputs[0];
    let model: SplitModel | undefined;
    // the MLX prefix answers where the chain's embed package would
    const handover: ChainComponent = {
      name: `mlx layers 0-${o.layers - 1}`,
      io: embedIo,
      newState: () => {
        throw new Error("the MLX hand-over keeps no chain state"); // stateless plan: never called
      },
      predict: async (inputs) => {
        const token = (inputs[embedIo.inputs[0].name].data as Int32Array)[0];
        const t = performance.now();
        const h = await prefix.step(token);
        if (model) model.pendingMlxMs = performance.now() - t;
        return { [out.name]: tensor("f16", out.shape, fromFloat32("f16", h)) };
      },
    };
    const stepper = new ChainStepper(handover, parts.slice(0, -1), parts[parts.length - 1]);
    model = new SplitModel(mlx, prefix, loaded, stepper, m);
    return model;
  }

  get position(): number {
    return this.history;
  }

  reset(): void {
    this.prefix.reset();
    this.stepper.reset();
    this.history = 0;
  }

  async prefill(ids: Int32Array | number[], opts: StepOptions = {}): Promise<StepOutput> {
    const tokens = Array.from(ids);
    let out: StepOutput | undefined;
    for (const [i, t] of tokens.entries()) {
      opts.signal?.throwIfAborted();
      out = await this.step(t, i === tokens.length - 1);
    }
    if (!out) throw new BenchOptionError("prefill", "needs at least one token");
    return out;
  }

  decode(id: number): Promise<StepOutput> {
    return this.step(id, true) as Promise<StepOutput>;
  }

  private async step(token: number, withHead: boolean): Promise<StepOutput | undefined> {
    if (this.history + 1 > this.contextLength)
      throw new ContextOverflowError(this.history + 1, this.contextLength);
    const t = performance.now();
    const r = await this.stepper.step(token, this.history, withHead);
    this.history++;
    const total = performance.now() - t;
    this.lastMs = { mlx: this.pendingMlxMs, ane: total - this.pendingMlxMs };
    return r.head;
  }

  async dispose(): Promise<void> {
    this.prefix.dispose();
    for (const c of this.loaded) c.dispose();
    await this.mlx.dispose();
  }
}
