/**
 * The compiled Qwen3.5 steps (native/fused.cc) against plain TypeScript loops in float64, written from
 * the recurrence itself (state [B, Hv, Dv, Dk] as mlx-lm lays it out).
 */
import { afterAll, expect, it } from "vitest";
import { type MxArray, mx } from "../src/index.js";
import { describeMlx, expectClose, numel, rng, uniform } from "./helpers.js";

interface GdnDims {
  B: number;
  T: number;
  Hk: number;
  Hv: number;
  Dk: number;
  Dv: number;
}

/**
 * The gated delta rule, token by token: S ← S·g; kv = S k; delta = (v − kv)·beta; S ← S + delta kᵀ;
 * y = S q. Value head h reads key head ⌊h / (Hv/Hk)⌋. `gPerKey`: g is [B,T,Hv,Dk] (decays each key
 * column). A false mask entry keeps the old state (y is still computed), as mlx-lm's ops path does.
 */
function referenceGdn(
  d: GdnDims,
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  g: ArrayLike<number>,
  beta: ArrayLike<number>,
  state0: ArrayLike<number> | undefined,
  mask?: ArrayLike<number>,
  gPerKey = false,
): { y: Float64Array; state: Float64Array } {
  const { B, T, Hk, Hv, Dk, Dv } = d;
  const S = state0 ? Float64Array.from(state0) : new Float64Array(B * Hv * Dv * Dk);
  const y = new Float64Array(B * T * Hv * Dv);
  const rep = Hv / Hk;
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < Hv; h++) {
        const hk = Math.floor(h / rep);
        const qOff = ((b * T + t) * Hk + hk) * Dk;
        const vOff = ((b * T + t) * Hv + h) * Dv;
        const gi = (b * T + t) * Hv + h;
        const sOff = (b * Hv + h) * Dv * Dk;
        const old = S.slice(sOff, sOff + Dv * Dk);
        const cur = Float64Array.from(old);
        for (let e = 0; e < Dv; e++) {
          for (let c = 0; c < Dk; c++) cur[e * Dk + c] *= gPerKey ? g[gi * Dk + c] : g[gi];
        }
        for (let e = 0; e < Dv; e++) {
          let kv = 0;
          for (let c = 0; c < Dk; c++) kv += cur[e * Dk + c] * k[qOff + c];
          const delta = (v[vOff + e] - kv) * beta[gi];
          let out = 0;
          for (let c = 0; c < Dk; c++) {
            cur[e * Dk + c] += k[qOff + c] * delta;
            out += cur[e * Dk + c] * q[qOff + c];
          }
          y[vOff + e] = out;
        }
        const keepOld = mask !== undefined && !mask[b * T + t];
        S.set(keepOld ? old : cur, sOff);
      }
    }
  }
  return { y, state: S };
}

const live: MxArray[] = [];
function mk(data: Float32Array | Uint8Array, shape: number[], dtype?: "bool" | "bfloat16"): MxArray {
  const a = mx.array(data, shape, dtype);
  live.push(a);
  return a;
}

function f32(a: MxArray): number[] {
  return Array.from(mx.toFloat32Array(a));
}

/** A fused step's y and state against the reference loop's, within `atol`. */
function expectGdn(
  out: { y: MxArray; state: MxArray },
  ref: { y: Float64Array; state: Float64Array },
  atol: number,
  what: string,
): void {
  expectClose(f32(out.y), ref.y, { atol, label: `y, ${what}` });
  expectClose(f32(out.state), ref.state, { atol, label: `state, ${what}` });
}

function bf16Round(x: Float32Array): Float32Array {
  return mx.tidy(() => mx.toFloat32Array(mx.astype(mx.array(x), "bfloat16")));
}

describeMlx("fused Qwen3.5 steps (mx::compile) vs TypeScript reference loops", () => {
  afterAll(() => mx.dispose(live));
  const next = rng(7);

  it("gatedDeltaStep: one token, scalar and per-key gates, with and without mask", () => {
    const d: GdnDims = { B: 2, T: 1, Hk: 3, Hv: 3, Dk: 8, Dv: 6 };
    const q = uniform(next, 2 * 3 * 8);
    const k = uniform(next, 2 * 3 * 8, -0.5, 0.5);
    const v = uniform(next, 2 * 3 * 6);
    const g = uniform(next, 2 * 3, 0.5, 1);
    const gVec = uniform(next, 2 * 3 * 8, 0.5, 1);
    const beta = uniform(next, 2 * 3, 0, 1);
    const s0 = uniform(next, 2 * 3 * 6 * 8);
    const args = [mk(q, [2, 3, 8]), mk(k, [2, 3, 8]), mk(v, [2, 3, 6])] as const;
    const state = mk(s0, [2, 3, 6, 8]);

    const out = mx.gatedDeltaStep(...args, mk(g, [2, 3]), mk(beta, [2, 3]), state);
    expect(out.y.shape).toEqual([2, 3, 6]);
    expect(out.state.shape).toEqual([2, 3, 6, 8]);
    const ref = referenceGdn(d, q, k, v, g, beta, s0);
    expectGdn(out, ref, 1e-5, "scalar g");

    const vec = mx.gatedDeltaStep(...args, mk(gVec, [2, 3, 8]), mk(beta, [2, 3]), state);
    const refVec = referenceGdn(d, q, k, v, gVec, beta, s0, undefined, true);
    expectGdn(vec, refVec, 1e-5, "per-key g");

    const mask = Uint8Array.from([1, 0]);
    const masked = mx.gatedDeltaStep(...args, mk(g, [2, 3]), mk(beta, [2, 3]), state, mk(mask, [2], "bool"));
    const refMasked = referenceGdn(d, q, k, v, g, beta, s0, mask);
    expectClose(f32(masked.state), refMasked.state, { atol: 1e-5, label: "masked state" });
    // Batch 1 is masked out: its state is bit-identical to the input.
    expect(f32(masked.state).slice(3 * 48)).toEqual(Array.from(s0.slice(3 * 48)));
    mx.dispose([out, vec, masked]);
  });

  it("gatedDeltaPrefill: T tokens looped in C++, GQA heads, initial state, mask", () => {
    const d: GdnDims = { B: 1, T: 7, Hk: 2, Hv: 4, Dk: 8, Dv: 6 };
    const q = uniform(next, 7 * 2 * 8);
    const k = uniform(next, 7 * 2 * 8, -0.5, 0.5);
    const v = uniform(next, 7 * 4 * 6);
    const g = uniform(next, 7 * 4, 0.6, 1);
    const beta = uniform(next, 7 * 4, 0, 1);
    const s0 = uniform(next, 4 * 6 * 8, -0.3, 0.3);
    const mask = Uint8Array.from([1, 1, 0, 1, 1, 0, 1]);
    const inputs = [
      mk(q, [1, 7, 2, 8]),
      mk(k, [1, 7, 2, 8]),
      mk(v, [1, 7, 4, 6]),
      mk(g, [1, 7, 4]),
      mk(beta, [1, 7, 4]),
    ] as const;

    const zero = mx.gatedDeltaPrefill(...inputs);
    const refZero = referenceGdn(d, q, k, v, g, beta, undefined);
    expect(zero.y.shape).toEqual([1, 7, 4, 6]);
    expect(zero.state.dtype).toBe("float32");
    expectGdn(zero, refZero, 2e-5, "from zero state");

    const cont = mx.gatedDeltaPrefill(...inputs, mk(s0, [1, 4, 6, 8]), mk(mask, [1, 7], "bool"));
    const refCont = referenceGdn(d, q, k, v, g, beta, s0, mask);
    expectGdn(cont, refCont, 2e-5, "continued and masked");

    // MLX's own fused implementation (mx.fast.gated_delta_update) agrees without a mask.
    const fast = mx.gatedDeltaUpdate(...inputs, mk(s0, [1, 4, 6, 8]));
    const refFast = referenceGdn(d, q, k, v, g, beta, s0);
    expectGdn(fast, refFast, 2e-5, "fast.gated_delta_update");
    mx.dispose([zero, cont, fast]);
  });

  it("gatedDeltaPrefill keeps y in the input dtype (bf16) and the state in fp32", () => {
    const d: GdnDims = { B: 1, T: 3, Hk: 1, Hv: 2, Dk: 32, Dv: 16 };
    const q = bf16Round(uniform(next, 3 * 32));
    const k = bf16Round(uniform(next, 3 * 32, -0.3, 0.3));
    const v = bf16Round(uniform(next, 3 * 2 * 16));
    const g = uniform(next, 3 * 2, 0.8, 1);
    const beta = bf16Round(uniform(next, 3 * 2, 0, 1));
    const out = mx.gatedDeltaPrefill(
      mk(q, [1, 3, 1, 32], "bfloat16"),
      mk(k, [1, 3, 1, 32], "bfloat16"),
      mk(v, [1, 3, 2, 16], "bfloat16"),
      mk(g, [1, 3, 2]),
      mk(beta, [1, 3, 2], "bfloat16"),
    );
    expect(out.y.dtype).toBe("bfloat16");
    expect(out.state.dtype).toBe("float32");
    const ref = referenceGdn(d, q, k, v, g, beta, undefined);
    expectClose(f32(out.y), ref.y, { atol: 1e-2, rtol: 1e-2, label: "bf16 y" });
    expectClose(f32(out.state), ref.state, { atol: 1e-5, rtol: 1e-5, label: "fp32 state" });
    mx.dispose(out);
  });

  it("gatedDeltaStep names the argument with a wrong shape", () => {
    const a = mk(uniform(next, 8), [1, 1, 8]);
    const s = mk(uniform(next, 48), [1, 1, 6, 8]);
    const one = mk(uniform(next, 1), [1, 1]);
    expect(() =>
      mx.gatedDeltaStep(a, a, mk(uniform(next, 6), [1, 1, 6]), one, one, mk(uniform(next, 8), [1, 8])),
    ).toThrow(/gatedDeltaStep: state must have shape \[1, 1, 6, 8\], got \[1, 8\]/);
    expect(() =>
      mx.gatedDeltaStep(a, a, mk(uniform(next, 6), [1, 1, 6]), mk(uniform(next, 2), [2, 1]), one, s),
    ).toThrow(/g must have shape/);
  });

  it("computeG = exp(-exp(A_log) * softplus(a + dt_bias)) in fp32", () => {
    const aLog = uniform(next, 4, -1, 1);
    const a = uniform(next, 3 * 4, -6, 6);
    const dt = uniform(next, 4, -1, 1);
    const got = mx.computeG(mk(aLog, [4]), mk(a, [3, 4]), mk(dt, [4]));
    expect(got.dtype).toBe("float32");
    const want = Array.from(a, (x, i) => {
      const z = x + dt[i % 4];
      const softplus = Math.max(z, 0) + Math.log1p(Math.exp(-Math.abs(z)));
      return Math.exp(-Math.exp(aLog[i % 4]) * softplus);
    });
    expectClose(f32(got), want, { rtol: 1e-5, atol: 1e-6, label: "g" });
    got.dispose();
  });

  it("gatedRmsNorm = rms_norm(x, w) * silu(z), computed in fp32 and cast back", () => {
    const D = 16;
    const x = uniform(next, 2 * 3 * D, -2, 2);
    const z = uniform(next, 2 * 3 * D, -3, 3);
    const w = uniform(next, D, 0.5, 1.5);
    const eps = 1e-6;
    const want = new Float64Array(x.length);
    for (let row = 0; row < 6; row++) {
      let ms = 0;
      for (let j = 0; j < D; j++) ms += x[row * D + j] ** 2;
      const inv = 1 / Math.sqrt(ms / D + eps);
      for (let j = 0; j < D; j++) {
        const i = row * D + j;
        want[i] = x[i] * inv * w[j] * (z[i] / (1 + Math.exp(-z[i])));
      }
    }
    const got = mx.gatedRmsNorm(mk(x, [2, 3, D]), mk(w, [D]), mk(z, [2, 3, D]), eps);
    expect(got.dtype).toBe("float32");
    expectClose(f32(got), want, { rtol: 1e-5, atol: 1e-5, label: "gated rms norm" });
    const half = mx.gatedRmsNorm(mk(x, [2, 3, D], "bfloat16"), mk(w, [D]), mk(z, [2, 3, D], "bfloat16"), eps);
    expect(half.dtype).toBe("bfloat16");
    expectClose(f32(half), want, { rtol: 3e-2, atol: 3e-2, label: "gated rms norm (bf16)" });
    mx.dispose([got, half]);
  });

  it("swiglu = silu(gate) * x", () => {
    const gate = uniform(next, 40, -4, 4);
    const x = uniform(next, 40, -2, 2);
    const got = mx.swiglu(mk(gate, [5, 8]), mk(x, [5, 8]));
    expect(got.shape).toEqual([5, 8]);
    expectClose(
      f32(got),
      Array.from(gate, (gv, i) => (gv / (1 + Math.exp(-gv))) * x[i]),
      { rtol: 1e-5, atol: 1e-6, label: "swiglu" },
    );
    expect(numel(got.shape)).toBe(40);
    got.dispose();
  });
});
