// The hot loops of cpu_kernels.cc. Included twice there, inside `namespace RMLX_KERNEL_NS`: once for the
// baseline ISA and once under `#pragma GCC target("avx2,fma,f16c")`, so that every helper below is
// compiled (and inlined) for the same target as the loop that calls it. No include guard on purpose.
// Expects LinearJob, DeltaJob, kDirectRows and the storage tags F32 / Bf16 / F16 from the including file.

namespace RMLX_KERNEL_NS {

#define RMLX_ALWAYS_INLINE __attribute__((always_inline)) inline

// 8-lane vectors (GCC/Clang vector extensions): AVX2 registers in the avx2 copy, SSE/NEON pairs elsewhere.
typedef float f32x8 __attribute__((vector_size(32)));
// for loads and stores at any address (a memcpy would go through the stack in 16-byte halves)
typedef float f32x8u __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint16_t u16x8u __attribute__((vector_size(16), aligned(2), may_alias));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

RMLX_ALWAYS_INLINE f32x8 load8(const float* p) {
  return *reinterpret_cast<const f32x8u*>(p);
}

/** Eight stored values (float32, bf16 or fp16 bits) as float32. */
template <typename S>
RMLX_ALWAYS_INLINE f32x8 load8(const S* p) {
  if constexpr (std::is_same_v<S, F32>) {
    return load8(reinterpret_cast<const float*>(p));
  } else if constexpr (std::is_same_v<S, Bf16>) {
    // bf16 is the top half of a float32
    u32x8 wide = __builtin_convertvector(*reinterpret_cast<const u16x8u*>(p), u32x8) << 16;
    return reinterpret_cast<f32x8>(wide);
  } else {
    const auto* h = reinterpret_cast<const mx::float16_t*>(p);
    return f32x8{static_cast<float>(h[0]), static_cast<float>(h[1]), static_cast<float>(h[2]),
                 static_cast<float>(h[3]), static_cast<float>(h[4]), static_cast<float>(h[5]),
                 static_cast<float>(h[6]), static_cast<float>(h[7])};
  }
}

/** One stored value as float32. */
template <typename S>
RMLX_ALWAYS_INLINE float load1(const S* p, int64_t i) {
  if constexpr (std::is_same_v<S, F32>) {
    return reinterpret_cast<const float*>(p)[i];
  } else if constexpr (std::is_same_v<S, Bf16>) {
    uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    return static_cast<float>(reinterpret_cast<const mx::float16_t*>(p)[i]);
  }
}

RMLX_ALWAYS_INLINE float hsum(f32x8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/** Σ a[j]·x[j] for stored a (any storage) and float x. */
template <typename S>
RMLX_ALWAYS_INLINE float dot(const S* a, const float* x, int n) {
  f32x8 acc0 = {};
  f32x8 acc1 = {};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    acc0 += load8(a + j) * load8(x + j);
    acc1 += load8(a + j + 8) * load8(x + j + 8);
  }
  float s = hsum(acc0 + acc1);
  for (; j < n; ++j) s += load1(a, j) * x[j];
  return s;
}

/** Eight consecutive quantized values starting at element 8·i of a packed row, as floats (bits 4 or 8). */
template <int BITS>
RMLX_ALWAYS_INLINE f32x8 unpack8(const uint32_t* w, int i) {
  static_assert(BITS == 4 || BITS == 8);
  constexpr uint32_t mask = (1u << BITS) - 1;
  u32x8 words;
  u32x8 shifts;
  if constexpr (BITS == 4) {
    // one word holds 8 values, lowest nibble first
    words = u32x8{} + w[i];
    shifts = u32x8{0, 4, 8, 12, 16, 20, 24, 28};
  } else {
    // two words hold 8 values, lowest byte first
    const uint32_t a = w[2 * i];
    const uint32_t b = w[2 * i + 1];
    words = u32x8{a, a, a, a, b, b, b, b};
    shifts = u32x8{0, 8, 16, 24, 0, 8, 16, 24};
  }
  return __builtin_convertvector(reinterpret_cast<i32x8>((words >> shifts) & mask), f32x8);
}

/**
 * One output of a quantized product: Σ_g scale_g · (q_g · x_g) + bias_g · Σ x_g, with the per-group
 * sums of x precomputed (xsum). gs is a multiple of 8.
 */
template <int BITS, typename S>
RMLX_ALWAYS_INLINE float qdot(const uint32_t* w, const S* scales, const S* biases, const float* x, const float* xsum,
                              int K, int gs) {
  float total = 0;
  for (int g = 0; g < K / gs; ++g) {
    f32x8 acc = {};
    const int first = (g * gs) / 8;
    for (int i = 0; i < gs / 8; ++i) acc += unpack8<BITS>(w, first + i) * load8(x + g * gs + 8 * i);
    total += load1(scales, g) * hsum(acc) + load1(biases, g) * xsum[g];
  }
  return total;
}

/** A quantized row dequantized into `out` (K floats). */
template <int BITS, typename S>
RMLX_ALWAYS_INLINE void dequantRow(const uint32_t* w, const S* scales, const S* biases, int K, int gs, float* out) {
  for (int g = 0; g < K / gs; ++g) {
    const f32x8 s = f32x8{} + load1(scales, g);
    const f32x8 b = f32x8{} + load1(biases, g);
    const int first = (g * gs) / 8;
    for (int i = 0; i < gs / 8; ++i) {
      *reinterpret_cast<f32x8u*>(out + g * gs + 8 * i) = unpack8<BITS>(w, first + i) * s + b;
    }
  }
}

/** Output columns [n0, n1) of one run of output rows that share a weight bank. BITS 0: dense weights. */
template <int BITS, typename S>
void linearBlock(const LinearJob& job, int run, int n0, int n1) {
  const int K = job.K;
  const int p0 = job.runStart[run];
  const int p1 = job.runStart[run + 1];
  const int64_t bank = job.indices ? job.indices[p0] : 0;
  auto xOf = [&](int p) { return job.x + static_cast<int64_t>(p / job.rowsPerX) * K; };
  auto outAt = [&](int p, int n) -> float& { return job.out[static_cast<int64_t>(p) * job.N + n]; };
  if constexpr (BITS == 0) {
    const S* dense = static_cast<const S*>(job.weights);
    for (int n = n0; n < n1; ++n) {
      const S* wr = dense + (bank * job.N + n) * K;
      for (int p = p0; p < p1; ++p) outAt(p, n) = dot(wr, xOf(p), K);
    }
  } else {
    const auto* packed = static_cast<const uint32_t*>(job.weights);
    const S* scales = static_cast<const S*>(job.scales);
    const S* biases = static_cast<const S*>(job.biases);
    const int groups = K / job.gs;
    const int64_t packedRow = K * BITS / 32;
    if (p1 - p0 <= kDirectRows) {
      // few input rows: multiply the packed weights directly, no dequantized copy
      for (int n = n0; n < n1; ++n) {
        const int64_t wrow = bank * job.N + n;
        for (int p = p0; p < p1; ++p) {
          outAt(p, n) = qdot<BITS>(packed + wrow * packedRow, scales + wrow * groups, biases + wrow * groups, xOf(p),
                                   job.xsum + static_cast<int64_t>(p / job.rowsPerX) * groups, K, job.gs);
        }
      }
    } else {
      thread_local std::vector<float> row;
      row.resize(K);
      for (int n = n0; n < n1; ++n) {
        const int64_t wrow = bank * job.N + n;
        dequantRow<BITS>(packed + wrow * packedRow, scales + wrow * groups, biases + wrow * groups, K, job.gs,
                         row.data());
        for (int p = p0; p < p1; ++p) outAt(p, n) = dot(row.data(), xOf(p), K);
      }
    }
  }
}

void deltaRows(const DeltaJob& j, int64_t begin, int64_t end) {
  const int Dk = j.Dk;
  alignas(32) float s[512];
  for (int64_t r = begin; r < end; ++r) {
    // r indexes (b, hv, dv)
    const int dv = static_cast<int>(r % j.Dv);
    const int hv = static_cast<int>((r / j.Dv) % j.Hv);
    const int b = static_cast<int>(r / (static_cast<int64_t>(j.Dv) * j.Hv));
    const int hk = hv / (j.Hv / j.Hk);
    const float* s0 = j.state + r * Dk;
    for (int i = 0; i < Dk; ++i) s[i] = s0[i];
    for (int t = 0; t < j.T; ++t) {
      const int64_t bt = static_cast<int64_t>(b) * j.T + t;
      const float* q = j.q + (bt * j.Hk + hk) * Dk;
      const float* k = j.k + (bt * j.Hk + hk) * Dk;
      const float decay = j.g[bt * j.Hv + hv];
      const float beta = j.beta[bt * j.Hv + hv];
      const float v = j.v[(bt * j.Hv + hv) * j.Dv + dv];
      for (int i = 0; i < Dk; ++i) s[i] *= decay;
      const float delta = (v - dot(reinterpret_cast<const F32*>(s), k, Dk)) * beta;
      for (int i = 0; i < Dk; ++i) s[i] += k[i] * delta;
      j.y[(bt * j.Hv + hv) * j.Dv + dv] = dot(reinterpret_cast<const F32*>(s), q, Dk);
    }
    float* so = j.stateOut + r * Dk;
    for (int i = 0; i < Dk; ++i) so[i] = s[i];
  }
}

#undef RMLX_ALWAYS_INLINE

}  // namespace RMLX_KERNEL_NS
