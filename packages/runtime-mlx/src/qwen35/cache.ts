/**
 * Decode-time state (reference: qwen35-architecture.md §2.7; mlx-lm cache.py).
 * - Full-attention layers: a KV cache [1, Hkv, capacity, hd] written in place with slice updates. It
 *   grows in steps of 256 positions like mlx-lm's KVCache, or is allocated once at `capacity`.
 * - Gated DeltaNet layers: the last K-1 pre-conv inputs [1, K-1, convDim] and the fp32 recurrent
 *   state [1, Hv, Dv, Dk]. They are replaced every step (never updated in place), so a step can be
 *   undone by keeping the previous pair: this is what makes speculative pipelined decode cheap.
 */
import * as mx from "../mlx.js";
import type { Dtype, MxArray } from "../native.js";

export interface KvCacheOptions {
  /** Positions added per growth (mlx-lm: 256). */
  readonly step: number;
  /** Allocate this many positions at first use and never grow (the context length). */
  readonly preallocate?: number;
}

export class KvCache {
  private keys: MxArray | undefined;
  private values: MxArray | undefined;
  /** Positions written so far. */
  offset = 0;

  constructor(private readonly options: KvCacheOptions) {}

  /**
   * Writes k, v [1, Hkv, T, hd] at `offset`, advances it, and returns the cached keys and values
   * [1, Hkv, offset + T, hd]. The previous buffers' handles are released first so that MLX can
   * update them in place (a slice update donates a buffer nobody else holds).
   */
  update(k: MxArray, v: MxArray): [MxArray, MxArray] {
    const [, heads, T, dim] = k.shape;
    const end = this.offset + T;
    if (this.keys === undefined || end > this.keys.shape[2]) this.grow(heads, end, dim, k.dtype, v.shape[3]);
    const keys = mx.sliceUpdate(this.keys!, k, [0, 0, this.offset, 0], [1, heads, end, dim]);
    const values = mx.sliceUpdate(this.values!, v, [0, 0, this.offset, 0], [1, heads, end, v.shape[3]]);
    this.replace(keys, values);
    this.offset = end;
    return [mx.slice(keys, [0, 0, 0], [1, heads, end]), mx.slice(values, [0, 0, 0], [1, heads, end])];
  }

  private grow(heads: number, end: number, dim: number, dtype: Dtype, vdim: number): void {
    const { step, preallocate } = this.options;
    const length = preallocate ?? Math.ceil(end / step) * step;
    if (end > length) {
      throw new RangeError(`KV cache holds ${length} positions; cannot write up to ${end}`);
    }
    const fresh = (d: number, old: MxArray | undefined) => {
      const zeros = mx.zeros([1, heads, length - (old ? this.offset : 0), d], dtype);
      if (!old) return zeros;
      return mx.concatenate([mx.slice(old, [0, 0, 0], [1, heads, this.offset]), zeros], 2);
    };
    this.replace(fresh(dim, this.keys), fresh(vdim, this.values));
  }

  private replace(keys: MxArray, values: MxArray): void {
    mx.keep([keys, values]);
    this.keys?.dispose();
    this.values?.dispose();
    this.keys = keys;
    this.values = values;
  }

  /** The cache buffers (to evaluate them between prefill chunks). */
  arrays(): MxArray[] {
    return this.keys && this.values ? [this.keys, this.values] : [];
  }

  /** Bytes the buffers hold (allocated positions, not just the written ones). */
  get bytes(): number {
    return (this.keys?.nbytes ?? 0) + (this.values?.nbytes ?? 0);
  }

  /**
   * New handles to the buffers, and the offset. MLX arrays are values: the next update() sees a
   * buffer someone else holds and copies it instead of writing in place, so the snapshot stays
   * as it was (one copy of the cache per snapshot, paid on the next write).
   */
  snapshot(offset: number): KvSnapshot {
    return { arrays: this.arrays().map(handle), offset };
  }

  /** Takes new handles to a snapshot's buffers; the next write goes at its offset. */
  restore(s: KvSnapshot): void {
    if (s.arrays.length === 2) this.replace(handle(s.arrays[0]), handle(s.arrays[1]));
    else this.reset();
    this.offset = s.offset;
  }

  reset(): void {
    this.keys?.dispose();
    this.values?.dispose();
    this.keys = undefined;
    this.values = undefined;
    this.offset = 0;
  }
}

/** One Gated DeltaNet layer's state: last K-1 pre-conv inputs and the fp32 recurrent state. */
export interface GdnState {
  /** [1, K-1, convDim], activation dtype. */
  readonly conv: MxArray;
  /** [1, Hv, Dv, Dk], float32. */
  readonly recurrent: MxArray;
}

export const gdnStateArrays = (s: GdnState | undefined): MxArray[] => (s ? [s.conv, s.recurrent] : []);

/** A KV cache's buffers (none before the first write) and how many positions were written. */
export interface KvSnapshot {
  readonly arrays: readonly MxArray[];
  readonly offset: number;
}

/** Another handle to the same array (a reshape to its own shape shares the buffer). */
export function handle(a: MxArray): MxArray {
  return mx.keep(mx.reshape(a, a.shape));
}
