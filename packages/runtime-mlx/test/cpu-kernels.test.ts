/**
 * runtime-mlx's CPU kernels (native/cpu_kernels.cc) against MLX's own ops on the same inputs (the
 * kernels switched off with setCpuKernelsEnabled), and against float32 references where MLX's bf16
 * path is itself imprecise.
 */
import { afterEach, expect, it } from "vitest";
import { type MxArray, mx } from "../src/index.js";
import { describeMlx } from "./helpers.js";

/** Builds `f` twice: with runtime-mlx's kernels and with MLX's ops; returns both results as float32. */
function both(f: () => MxArray): { ours: Float32Array; mlx: Float32Array } {
  mx.setCpuKernelsEnabled(true);
  const ours = mx.tidy(() => mx.toFloat32Array(f()));
  mx.setCpuKernelsEnabled(false);
  const ref = mx.tidy(() => mx.toFloat32Array(f()));
  mx.setCpuKernelsEnabled(true);
  return { ours, mlx: ref };
}

/** max |a - b| / max |b|. */
function relErr(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

describeMlx("runtime-mlx CPU kernels", () => {
  afterEach(() => {
    mx.setCpuKernelsEnabled(true);
  });

  it("runs on this machine's CPU stream with at least one thread", () => {
    expect(mx.defaultDevice()).toBe("cpu");
    expect(mx.cpuKernelThreads()).toBeGreaterThanOrEqual(1);
  });

  it("dense linear matches matmul(x, wᵀ), also for strided x and bf16 weights", () => {
    mx.randomSeed(1);
    const w = mx.keep(mx.randomNormal([96, 160]));
    const x = mx.keep(mx.randomNormal([5, 160]));
    const xt = mx.keep(mx.transpose(mx.randomNormal([160, 3]))); // a strided view
    try {
      const a = both(() => mx.linear(x, w));
      expect(relErr(a.ours, a.mlx)).toBeLessThan(1e-6);
      const b = both(() => mx.linear(xt, w));
      expect(relErr(b.ours, b.mlx)).toBeLessThan(1e-6);
      const c = both(() => mx.linear(x, mx.astype(w, "bfloat16")));
      expect(relErr(c.ours, c.mlx)).toBeLessThan(1e-6);
    } finally {
      mx.dispose([w, x, xt]);
    }
  });

  for (const bits of [4, 8]) {
    it(`${bits}-bit quantized linear matches quantized_matmul (fp32) and a dequantized fp32 product (bf16)`, () => {
      mx.randomSeed(bits);
      const w = mx.keep(mx.randomNormal([80, 256]));
      const q = mx.keep(mx.quantize(w, { bits, groupSize: 64 }));
      const x = mx.keep(mx.randomNormal([3, 256]));
      try {
        const a = both(() => mx.quantizedLinear(x, q.wq, q.scales, q.biases!, { bits, groupSize: 64 }));
        expect(relErr(a.ours, a.mlx)).toBeLessThan(1e-6);
        // bf16 activations and scales: compare with the exact product of the bf16 values in fp32
        const ours = mx.tidy(() => {
          const xb = mx.astype(x, "bfloat16");
          const sb = mx.astype(q.scales, "bfloat16");
          const bb = mx.astype(q.biases!, "bfloat16");
          const y = mx.quantizedLinear(xb, q.wq, sb, bb, { bits, groupSize: 64 });
          expect(y.dtype).toBe("bfloat16");
          const exact = mx.matmul(
            mx.astype(xb, "float32"),
            mx.transpose(
              mx.dequantize(q.wq, mx.astype(sb, "float32"), mx.astype(bb, "float32"), {
                bits,
                groupSize: 64,
              }),
            ),
          );
          return relErr(mx.toFloat32Array(y), mx.toFloat32Array(exact));
        });
        expect(ours).toBeLessThan(1 / 128); // bf16 output rounding
      } finally {
        mx.dispose([w, q, x]);
      }
    });
  }

  it("gathered expert projections match gather_qmm / gather_mm for unsorted and sorted rows", () => {
    mx.randomSeed(3);
    const E = 6;
    const w = mx.keep(mx.randomNormal([E, 48, 128]));
    const q = mx.keep(mx.quantize(w, { bits: 4, groupSize: 64 }));
    const x = mx.keep(mx.randomNormal([4, 128]));
    // 4 tokens × 3 experts each (rowsPerX 3), and a sorted list of 12 rows with one x row each
    const idx = mx.keep(mx.array(Uint32Array.of(5, 0, 2, 1, 1, 4, 3, 0, 5, 2, 2, 2)));
    const sorted = mx.keep(mx.array(Uint32Array.of(0, 0, 1, 2, 2, 2, 3, 4, 5, 5, 5, 5)));
    const x12 = mx.keep(mx.randomNormal([12, 128]));
    const quantized = { scales: q.scales, biases: q.biases!, bits: 4, groupSize: 64 };
    try {
      for (const [rows, indices, rowsPerX] of [
        [x, idx, 3],
        [x12, sorted, 1],
      ] as const) {
        const qd = both(() => mx.gatherLinear(rows, q.wq, indices, { rowsPerX, quantized }));
        expect(relErr(qd.ours, qd.mlx)).toBeLessThan(1e-6);
        const dn = both(() => mx.gatherLinear(rows, w, indices, { rowsPerX }));
        expect(relErr(dn.ours, dn.mlx)).toBeLessThan(1e-6);
      }
      expect(() => mx.gatherLinear(x, w, idx, { rowsPerX: 2 })).toThrow(
        /indices must hold x rows × rowsPerX/,
      );
    } finally {
      mx.dispose([w, q, x, idx, sorted, x12]);
    }
  });

  it("the gated delta rule matches MLX's ops loop (GQA, initial state, bf16 inputs)", () => {
    mx.randomSeed(4);
    const [B, T, Hk, Hv, Dk, Dv] = [1, 9, 2, 4, 32, 16];
    const unit = (shape: number[]) => {
      const a = mx.randomNormal(shape);
      return mx.divide(a, mx.sqrt(mx.sum(mx.square(a), -1, true)));
    };
    const inputs = mx.keep([
      unit([B, T, Hk, Dk]),
      unit([B, T, Hk, Dk]),
      mx.randomNormal([B, T, Hv, Dv]),
      mx.randomUniform([B, T, Hv], { low: 0.8, high: 1 }),
      mx.randomUniform([B, T, Hv]),
    ]);
    const state = mx.keep(mx.randomNormal([B, Hv, Dv, Dk]));
    try {
      for (const dtype of ["float32", "bfloat16"] as const) {
        const [q, k, v, g, beta] = inputs.map((a) => mx.keep(mx.astype(a, dtype)));
        const y = both(() => mx.gatedDeltaPrefill(q, k, v, g, beta, state).y);
        const s = both(() => mx.gatedDeltaPrefill(q, k, v, g, beta, state).state);
        expect(relErr(y.ours, y.mlx)).toBeLessThan(dtype === "float32" ? 1e-5 : 1 / 64);
        expect(relErr(s.ours, s.mlx)).toBeLessThan(dtype === "float32" ? 1e-5 : 1e-2);
        mx.dispose([q, k, v, g, beta]);
      }
    } finally {
      mx.dispose([inputs, state]);
    }
  });
});
