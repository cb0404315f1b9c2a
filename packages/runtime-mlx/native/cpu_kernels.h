// CPU fast paths (cpu_kernels.cc): graph builders that use runtime-mlx's own CPU primitives when the
// default stream is a CPU stream and the inputs are supported, and MLX's ops otherwise.
#pragma once

#include <optional>
#include <vector>

#include "common.h"

namespace rmlx {

/** x [..., K] @ w[N, K]ᵀ. */
mx::array FastLinear(const mx::array& x, const mx::array& w);

/** x [..., K] @ dequantize(w)ᵀ: affine, 4 or 8 bits (others fall back to mx::quantized_matmul). */
mx::array FastQuantizedLinear(const mx::array& x, const mx::array& w, const mx::array& scales,
                              const mx::array& biases, int bits, int groupSize);

/**
 * Expert projections: out[p] = x[p / rowsPerX] @ W[indices[p]]ᵀ → [P, N]. x [X, K]; w [E, N, K] (bits 0,
 * dense) or packed [E, N, K·bits/32] with scales/biases [E, N, K/groupSize]; indices [P] uint32.
 */
mx::array FastGatherLinear(const mx::array& x, const mx::array& w, const std::optional<mx::array>& scales,
                           const std::optional<mx::array>& biases, const mx::array& indices, int bits, int groupSize,
                           int rowsPerX);

/**
 * The gated delta rule over T tokens as one CPU node (GQA: value head j reads key head j / (Hv/Hk)), or
 * nothing when it does not apply (not a CPU stream, per-key gate, fp32 state missing).
 */
std::optional<std::vector<mx::array>> FastGatedDelta(const mx::array& q, const mx::array& k, const mx::array& v,
                                                     const mx::array& g, const mx::array& beta,
                                                     const mx::array& state);

/** Threads the CPU kernels use (RUNTIME_MLX_CPU_THREADS, else the hardware's). */
int CpuKernelThreads();

}  // namespace rmlx
