/**
 * RoPE angles computed by the host for the positions of a step (reference §2.3, HF's
 * computation: fp32 inv_freq = 1 / θ^(2i/rot), fp32 angle p·inv_freq, then cos/sin), so a
 * super-block takes `rope_cos` / `rope_sin` as inputs instead of gathering a row of a constant
 * table by an int32 position: no run-time-index gather in the graph, and no position limit.
 */

/** What a host needs to fill a super-block's rope inputs (IoRole "rope"). */
export interface RopeSpec {
  /** Rotated dims per head (the first `rotaryDim` of head_dim); the inputs hold rotaryDim / 2 values a row. */
  readonly rotaryDim: number;
  readonly theta: number;
}

/**
 * cos and sin [positions.length, rotaryDim / 2], row r for position `positions[r]`
 * (any non-negative position: nothing is read from a table).
 */
export function ropeCosSin(
  spec: RopeSpec,
  positions: ArrayLike<number>,
): { cos: Float32Array; sin: Float32Array } {
  const half = spec.rotaryDim / 2;
  const n = positions.length;
  const cos = new Float32Array(n * half);
  const sin = new Float32Array(n * half);
  for (let i = 0; i < half; i++) {
    const invFreq = Math.fround(1 / Math.fround(spec.theta ** Math.fround((2 * i) / spec.rotaryDim)));
    for (let r = 0; r < n; r++) {
      const angle = Math.fround(positions[r] * invFreq);
      cos[r * half + i] = Math.cos(angle);
      sin[r * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}
