/**
 * The first `layers` decoder layers of a loaded model, one token at a time, returning the residual
 * hidden state after them (before the final norm) — the MLX half of a model split across runtimes,
 * whose other half (the remaining layers and the head) runs elsewhere.
 *
 * It keeps its own KV caches and GDN states for those layers, so the loaded model's own sequence
 * is untouched. forward() exposes the hidden state after every layer but the last of the weights
 * it is given, so it is given one layer more than the prefix: that extra layer's work is only a
 * lazy graph that is never evaluated (and is released), since nothing here evaluates its output.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { ContextOverflowError } from "@anemll-qwen35/generate";
import { ModelDisposedError } from "./errors.js";
import * as mx from "./mlx.js";
import type { MlxQwen35 } from "./mlx-qwen35.js";
import type { MxArray } from "./native.js";
import { type GdnState, gdnStateArrays, KvCache } from "./qwen35/cache.js";
import { forward } from "./qwen35/model.js";

export class MlxLayerPrefix {
  readonly layers: number;
  readonly hiddenSize: number;
  private readonly kv: (KvCache | undefined)[];
  private gdn: (GdnState | undefined)[];
  private pos = 0;
  private disposed = false;

  constructor(
    private readonly model: MlxQwen35,
    layers: number,
  ) {
    const total = model.config.numHiddenLayers;
    if (!Number.isInteger(layers) || layers < 1 || layers >= total) {
      throw new InvalidArgumentError(
        `MlxLayerPrefix: layers must be an integer from 1 to ${total - 1} (the model has ${total}), got ${layers}`,
      );
    }
    this.layers = layers;
    this.hiddenSize = model.config.hiddenSize;
    this.kv = model.config.layerTypes
      .slice(0, layers)
      .map((t) => (t === "full_attention" ? new KvCache({ step: 256 }) : undefined));
    this.gdn = this.kv.map(() => undefined);
  }

  get position(): number {
    return this.pos;
  }

  reset(): void {
    for (const c of this.kv) c?.reset();
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = this.kv.map(() => undefined);
    this.pos = 0;
  }

  /** Runs one token through the prefix; returns the hidden state [hiddenSize] as float32. */
  async step(token: number): Promise<Float32Array> {
    if (this.disposed) throw new ModelDisposedError("MlxLayerPrefix.step");
    if (this.pos + 1 > this.model.contextLength)
      throw new ContextOverflowError(this.pos + 1, this.model.contextLength);
    const n = this.layers;
    const cfg = this.model.config;
    // the extra layer n: a throwaway cache for it, never evaluated
    const spare = cfg.layerTypes[n] === "full_attention" ? new KvCache({ step: 1 }) : undefined;
    const ids = mx.array(Int32Array.of(token), [1, 1]);
    const r = mx.tidy(() => {
      const hidden: MxArray[] = [];
      const w = { ...this.model.weights, layers: this.model.weights.layers.slice(0, n + 1) };
      const f = forward(
        cfg,
        w,
        ids,
        { kv: [...this.kv, spare], gdn: [...this.gdn, undefined] },
        { logits: "none", hidden },
      );
      return { h: mx.astype(mx.reshape(hidden[n], [cfg.hiddenSize]), "float32"), gdn: f.gdn };
    });
    ids.dispose();
    spare?.reset();
    mx.dispose(gdnStateArrays(r.gdn[n]));
    const gdn = r.gdn.slice(0, n);
    mx.keep(gdn);
    mx.dispose(this.gdn.flatMap(gdnStateArrays));
    this.gdn = gdn;
    this.pos++;
    await mx.asyncEval([r.h, ...gdn.flatMap(gdnStateArrays), ...this.kv.flatMap((c) => c?.arrays() ?? [])]);
    const out = r.h.toTypedArray() as Float32Array;
    r.h.dispose();
    return out;
  }

  dispose(): void {
    if (this.disposed) return;
    this.reset();
    this.disposed = true;
  }
}
