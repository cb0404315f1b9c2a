// CPU fast paths for the two things Qwen3.5 decode spends its time on, as MLX custom primitives
// (the extension mechanism of MLX's docs, "Custom Extensions"): graph nodes whose eval_cpu runs our
// own multi-threaded loops.
//
// - Projections y = x Wᵀ, with W dense (float32/bf16/fp16) or affine-quantized (4 or 8 bits, MLX's
//   packing: element j of a row sits in word j·bits/32, lowest bits first; w = scale·q + bias per
//   group), optionally gathered per row from an expert bank (MoE). Each weight row is dequantized
//   once into an L1-resident buffer and dotted with every input row that uses it; rows are split
//   across threads. On this CPU backend MLX's own quantized matmul runs about one multiply-add per
//   cycle on one thread, which makes it the bottleneck of every quantized model.
// - The gated delta rule over T tokens (state [B, Hv, Dv, Dk] in fp32, as mlx-lm lays it out): each
//   state row lives in registers/L1 for all T steps instead of T separate graph steps that each read
//   and write the whole state.
//
// Only CPU streams build these nodes; elsewhere (Metal) the builders fall back to MLX's own ops.
#include <atomic>
#include <type_traits>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include <mlx/allocator.h>
#include <mlx/backend/common/utils.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/primitives.h>

#include "common.h"
#include "cpu_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define RMLX_X86_DISPATCH 1
#else
#define RMLX_X86_DISPATCH 0
#endif

namespace rmlx {

namespace {

// ---------------------------------------------------------------------------------------------
// A small thread pool: parallelFor(n, fn) runs fn(begin, end) over [0, n) in chunks on the pool's
// threads and the caller's. One job at a time; a second caller (another stream) runs serially.

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: threads must not be joined during static teardown
    return *pool;
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || workers_.empty() || n <= grain) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      n_ = n;
      grain_ = grain;
      next_.store(0);
      active_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
  }

 private:
  Pool() {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("RUNTIME_MLX_CPU_THREADS")) n = std::atoi(env);
    n = std::max(1, std::min(n, 64));
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
    for (auto& t : workers_) t.detach();
  }

  void work() {
    for (;;) {
      int64_t begin = next_.fetch_add(grain_);
      if (begin >= n_) return;
      (*fn_)(begin, std::min(n_, begin + grain_));
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex busy_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
};

/** Storage tags for the kernels' templates (same size as the stored element). */
struct F32 {
  float v;
};
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
enum class Storage { F32, Bf16, F16 };

// ---------------------------------------------------------------------------------------------
// Reading inputs: any float dtype as float32, contiguous (strided views are copied first).

template <typename T>
void toFloat(const mx::array& a, float* out) {
  const T* p = a.data<T>();
  size_t n = a.size();
  if (a.flags().row_contiguous) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[mx::elem_to_loc(static_cast<int>(i), a)]);
  }
}

/** The array's values as float32, row-major: the data itself when it already is, else a copy in `scratch`. */
const float* floatData(const mx::array& a, std::vector<float>& scratch) {
  if (a.dtype() == mx::float32 && a.flags().row_contiguous) return a.data<float>();
  scratch.resize(a.size());
  switch (a.dtype()) {
    case mx::float32:
      toFloat<float>(a, scratch.data());
      break;
    case mx::bfloat16:
      toFloat<mx::bfloat16_t>(a, scratch.data());
      break;
    case mx::float16:
      toFloat<mx::float16_t>(a, scratch.data());
      break;
    default:
      throw std::invalid_argument("runtime-mlx CPU kernel: expected a float array");
  }
  return scratch.data();
}

Storage storageOf(const mx::array& a) {
  switch (a.dtype()) {
    case mx::bfloat16:
      return Storage::Bf16;
    case mx::float16:
      return Storage::F16;
    default:
      return Storage::F32;
  }
}

/** Row-major data of an integer/packed array (copied when strided). */
template <typename T>
const T* rawData(const mx::array& a, std::vector<T>& scratch) {
  if (a.flags().row_contiguous) return a.data<T>();
  scratch.resize(a.size());
  const T* p = a.data<T>();
  for (size_t i = 0; i < a.size(); ++i) scratch[i] = p[mx::elem_to_loc(static_cast<int>(i), a)];
  return scratch.data();
}

void storeFloat(const float* src, mx::array& out) {
  size_t n = out.size();
  switch (out.dtype()) {
    case mx::float32:
      std::copy(src, src + n, out.data<float>());
      break;
    case mx::bfloat16: {
      auto* p = out.data<mx::bfloat16_t>();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<mx::bfloat16_t>(src[i]);
      break;
    }
    case mx::float16: {
      auto* p = out.data<mx::float16_t>();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<mx::float16_t>(src[i]);
      break;
    }
    default:
      throw std::invalid_argument("runtime-mlx CPU kernel: expected a float output");
  }
}

// ---------------------------------------------------------------------------------------------
// Projection kernels

struct LinearJob {
  // x: X rows of K; rows p of the output read x row xRow(p) and weight bank bank(p)
  const float* x;
  int K;
  int N;
  int P;
  int rowsPerX;                 // output row p reads x row p / rowsPerX
  const uint32_t* indices;      // per output row: the expert; null = bank 0
  // weights: dense [E, N, K], or packed uint32 [E, N, K·bits/32] + scales/biases [E, N, K/gs], read in
  // place in their stored float type (`storage`: the dense weights', or the scales')
  const void* weights;
  const void* scales;
  const void* biases;
  Storage storage;
  int bits;
  int gs;
  float* out;                   // [P, N]
  const float* xsum;            // [X, K / gs]: per-group sums of x (quantized only)
  // runs of consecutive output rows sharing a bank: [runStart[r], runStart[r + 1])
  std::vector<int> runStart;
};

constexpr int kRowsPerTask = 16;
/** Up to this many input rows per weight row, quantized products skip the dequantized copy. */
constexpr int kDirectRows = 4;
/** Multiply-adds below which a product runs on one thread. */
constexpr int64_t kParallelWork = 1 << 20;

// The hot loops, compiled twice (cpu_kernels_impl.h): for the x86-64 baseline (or the native ISA
// elsewhere) and, on x86-64 with GCC/Clang, for AVX2+FMA, picked once at run time.
struct DeltaJob {
  int B, T, Hk, Hv, Dk, Dv;
  const float *q, *k, *v, *g, *beta, *state;
  float *y, *stateOut;
};

#define RMLX_KERNEL_NS generic
#include "cpu_kernels_impl.h"
#undef RMLX_KERNEL_NS
#if RMLX_X86_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define RMLX_KERNEL_NS avx2
#include "cpu_kernels_impl.h"
#undef RMLX_KERNEL_NS
#pragma GCC pop_options
#endif

/** True when the AVX2+FMA copy of the loops can run here. */
bool useAvx2() {
#if RMLX_X86_DISPATCH
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

template <int BITS, typename S>
void linearBlockIn(const LinearJob& job, int run, int n0, int n1) {
#if RMLX_X86_DISPATCH
  if (useAvx2()) return avx2::linearBlock<BITS, S>(job, run, n0, n1);
#endif
  generic::linearBlock<BITS, S>(job, run, n0, n1);
}

template <int BITS>
void linearBlock(const LinearJob& job, int run, int n0, int n1) {
  switch (job.storage) {
    case Storage::F32:
      return linearBlockIn<BITS, F32>(job, run, n0, n1);
    case Storage::Bf16:
      return linearBlockIn<BITS, Bf16>(job, run, n0, n1);
    case Storage::F16:
      return linearBlockIn<BITS, F16>(job, run, n0, n1);
  }
}

void deltaRows(const DeltaJob& j, int64_t begin, int64_t end) {
#if RMLX_X86_DISPATCH
  if (useAvx2()) return avx2::deltaRows(j, begin, end);
#endif
  generic::deltaRows(j, begin, end);
}

void runLinear(LinearJob& job) {
  // group consecutive output rows that use the same weights (every row, when not gathered)
  job.runStart.clear();
  for (int p = 0; p < job.P; ++p) {
    if (p == 0 || (job.indices && job.indices[p] != job.indices[p - 1])) job.runStart.push_back(p);
  }
  job.runStart.push_back(job.P);
  const int runs = static_cast<int>(job.runStart.size()) - 1;
  const int blocks = (job.N + kRowsPerTask - 1) / kRowsPerTask;
  // Waking the other threads costs more than small products gain (and much more on a busy machine).
  const int64_t work = static_cast<int64_t>(job.P) * job.N * job.K;
  const int64_t grain = work < kParallelWork ? static_cast<int64_t>(runs) * blocks : 1;
  Pool::get().parallelFor(static_cast<int64_t>(runs) * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int run = static_cast<int>(t / blocks);
      int n0 = static_cast<int>(t % blocks) * kRowsPerTask;
      int n1 = std::min(job.N, n0 + kRowsPerTask);
      switch (job.bits) {
        case 0:
          linearBlock<0>(job, run, n0, n1);
          break;
        case 4:
          linearBlock<4>(job, run, n0, n1);
          break;
        case 8:
          linearBlock<8>(job, run, n0, n1);
          break;
      }
    }
  });
}

/**
 * y[p] = x[p / rowsPerX] · W[bank(p)]ᵀ. Inputs: x [..., K]; dense w [E?, N, K] or packed w, scales,
 * biases; optional indices [P] (uint32). Output [P, N] (or x's leading shape + [N] when not gathered).
 */
class CpuLinear : public mx::UnaryPrimitive {
 public:
  CpuLinear(mx::Stream stream, int bits, int groupSize, bool gather, int rowsPerX)
      : mx::UnaryPrimitive(stream), bits_(bits), groupSize_(groupSize), gather_(gather), rowsPerX_(rowsPerX) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& in : inputs) encoder.set_input_array(in);
    encoder.set_output_array(out);
    std::vector<mx::array> ins;
    for (const auto& in : inputs) ins.push_back(mx::array::unsafe_weak_copy(in));
    encoder.dispatch([ins = std::move(ins), out = mx::array::unsafe_weak_copy(out), bits = bits_, gs = groupSize_,
                      gather = gather_, rowsPerX = rowsPerX_]() mutable {
      const mx::array& x = ins[0];
      const mx::array& w = ins[1];
      std::vector<float> xs, ws, ss, bs, ys;
      std::vector<uint32_t> packedScratch, idxScratch;
      LinearJob job{};
      job.K = x.shape().back();
      job.N = out.shape().back();
      job.P = static_cast<int>(out.size() / job.N);
      job.rowsPerX = rowsPerX;
      job.bits = bits;
      job.gs = gs;
      job.x = floatData(x, xs);
      if (bits == 0) {
        job.storage = storageOf(w);
        job.weights = w.flags().row_contiguous ? w.data<void>() : floatData(w, ws);
        if (!w.flags().row_contiguous) job.storage = Storage::F32;
      } else {
        const mx::array& scales = ins[2];
        const mx::array& biases = ins[3];
        job.weights = rawData<uint32_t>(w, packedScratch);
        if (scales.dtype() == biases.dtype() && scales.flags().row_contiguous && biases.flags().row_contiguous) {
          job.storage = storageOf(scales);
          job.scales = scales.data<void>();
          job.biases = biases.data<void>();
        } else {
          job.storage = Storage::F32;
          job.scales = floatData(scales, ss);
          job.biases = floatData(biases, bs);
        }
      }
      if (gather) job.indices = rawData<uint32_t>(ins.back(), idxScratch);
      std::vector<float> xsum;
      if (bits != 0) {
        const int64_t X = x.size() / job.K;
        const int groups = job.K / gs;
        xsum.resize(X * groups);
        for (int64_t r = 0; r < X; ++r) {
          for (int g = 0; g < groups; ++g) {
            const float* p = job.x + r * job.K + g * gs;
            float acc = 0;
            for (int i = 0; i < gs; ++i) acc += p[i];
            xsum[r * groups + g] = acc;
          }
        }
        job.xsum = xsum.data();
      }
      float* y = out.data<float>();
      if (out.dtype() != mx::float32) {
        ys.resize(out.size());
        y = ys.data();
      }
      job.out = y;
      runLinear(job);
      if (out.dtype() != mx::float32) storeFloat(ys.data(), out);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("runtime-mlx CpuLinear runs on the CPU only");
  }

  const char* name() const override { return "RuntimeMlxCpuLinear"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const CpuLinear&>(other);
    return bits_ == o.bits_ && groupSize_ == o.groupSize_ && gather_ == o.gather_ && rowsPerX_ == o.rowsPerX_;
  }

 private:
  int bits_;
  int groupSize_;
  bool gather_;
  int rowsPerX_;
};

// ---------------------------------------------------------------------------------------------
// The gated delta rule (mlx-lm gated_delta.py semantics, scalar gate per head, no mask)

/** Inputs q, k [B,T,Hk,Dk], v [B,T,Hv,Dv], g, beta [B,T,Hv], state [B,Hv,Dv,Dk]; outputs y (q's dtype), state (fp32). */
class CpuGatedDelta : public mx::Primitive {
 public:
  explicit CpuGatedDelta(mx::Stream stream) : mx::Primitive(stream) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& in : inputs) encoder.set_input_array(in);
    for (auto& o : outputs) encoder.set_output_array(o);
    std::vector<mx::array> ins;
    for (const auto& in : inputs) ins.push_back(mx::array::unsafe_weak_copy(in));
    encoder.dispatch([ins = std::move(ins), y = mx::array::unsafe_weak_copy(outputs[0]),
                      st = mx::array::unsafe_weak_copy(outputs[1])]() mutable {
      std::vector<float> qs, ks, vs, gs, bs, ss, ys;
      DeltaJob j{};
      j.B = ins[0].shape(0);
      j.T = ins[0].shape(1);
      j.Hk = ins[0].shape(2);
      j.Dk = ins[0].shape(3);
      j.Hv = ins[2].shape(2);
      j.Dv = ins[2].shape(3);
      j.q = floatData(ins[0], qs);
      j.k = floatData(ins[1], ks);
      j.v = floatData(ins[2], vs);
      j.g = floatData(ins[3], gs);
      j.beta = floatData(ins[4], bs);
      j.state = floatData(ins[5], ss);
      j.stateOut = st.data<float>();
      if (y.dtype() == mx::float32) {
        j.y = y.data<float>();
      } else {
        ys.resize(y.size());
        j.y = ys.data();
      }
      const int64_t rows = static_cast<int64_t>(j.B) * j.Hv * j.Dv;
      const bool small = rows * j.T * j.Dk * 4 < kParallelWork;
      Pool::get().parallelFor(rows, small ? rows : 32, [&](int64_t begin, int64_t end) { deltaRows(j, begin, end); });
      if (y.dtype() != mx::float32) storeFloat(ys.data(), y);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("runtime-mlx CpuGatedDelta runs on the CPU only");
  }

  const char* name() const override { return "RuntimeMlxCpuGatedDelta"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

bool isFloat(const mx::array& a) {
  return a.dtype() == mx::float32 || a.dtype() == mx::bfloat16 || a.dtype() == mx::float16;
}

std::atomic<bool> kernelsEnabled{std::getenv("RUNTIME_MLX_CPU_KERNELS") == nullptr ||
                                 std::string(std::getenv("RUNTIME_MLX_CPU_KERNELS")) != "0"};

/** The stream new ops go to, when it is a CPU stream and the kernels are on (their condition). */
std::optional<mx::Stream> cpuStream() {
  if (!kernelsEnabled.load()) return std::nullopt;
  mx::Stream s = mx::default_stream(mx::default_device());
  if (s.device != mx::Device::cpu) return std::nullopt;
  return s;
}

[[noreturn]] void Bad(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

std::string ShapeOf(const mx::array& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape()[i]);
  return s + "]";
}

}  // namespace

int CpuKernelThreads() { return Pool::get().threads(); }

mx::array FastLinear(const mx::array& x, const mx::array& w) {
  const char* op = "linear";
  if (x.ndim() < 1 || w.ndim() != 2 || x.shape().back() != w.shape(1)) {
    Bad(op, "x [..., K] and w [N, K] must agree on K, got x " + ShapeOf(x) + " and w " + ShapeOf(w));
  }
  auto s = cpuStream();
  if (!s || !isFloat(x) || !isFloat(w)) return mx::matmul(x, mx::transpose(w));
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  return mx::array(shape, mx::promote_types(x.dtype(), w.dtype()), std::make_shared<CpuLinear>(*s, 0, 0, false, 1),
                   {x, w});
}

mx::array FastQuantizedLinear(const mx::array& x, const mx::array& w, const mx::array& scales,
                              const mx::array& biases, int bits, int groupSize) {
  const char* op = "quantizedLinear";
  if (x.ndim() < 1 || w.ndim() != 2) Bad(op, "x [..., K] and w [N, K * bits / 32] expected, got x " + ShapeOf(x) + " and w " + ShapeOf(w));
  const int K = x.shape().back();
  auto s = cpuStream();
  bool supported = s && (bits == 4 || bits == 8) && w.dtype() == mx::uint32 && isFloat(x) && isFloat(scales) &&
                   isFloat(biases) && groupSize % 8 == 0 && K % groupSize == 0 && w.shape(1) * 32 / bits == K &&
                   scales.shape() == biases.shape() && scales.ndim() == 2 && scales.shape(0) == w.shape(0) &&
                   scales.shape(1) * groupSize == K;
  if (!supported) return mx::quantized_matmul(x, w, scales, biases, true, groupSize, bits, "affine");
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  return mx::array(shape, x.dtype(), std::make_shared<CpuLinear>(*s, bits, groupSize, false, 1), {x, w, scales, biases});
}

mx::array FastGatherLinear(const mx::array& x, const mx::array& w, const std::optional<mx::array>& scales,
                           const std::optional<mx::array>& biases, const mx::array& indices, int bits, int groupSize,
                           int rowsPerX) {
  const char* op = "gatherLinear";
  if (x.ndim() != 2 || w.ndim() != 3 || indices.ndim() != 1) {
    Bad(op, "x [X, K], w [E, N, K'] and indices [P] expected, got x " + ShapeOf(x) + ", w " + ShapeOf(w) +
                ", indices " + ShapeOf(indices));
  }
  const int P = indices.shape(0);
  const int K = x.shape(1);
  if (rowsPerX < 1 || static_cast<int64_t>(x.shape(0)) * rowsPerX != P) {
    Bad(op, "indices must hold x rows × rowsPerX entries (" + std::to_string(x.shape(0)) + " × " +
                std::to_string(rowsPerX) + "), got " + std::to_string(P));
  }
  const bool quantized = bits != 0;
  auto s = cpuStream();
  bool supported = s && isFloat(x) && indices.dtype() == mx::uint32;
  if (quantized) {
    supported = supported && scales && biases && (bits == 4 || bits == 8) && w.dtype() == mx::uint32 &&
                groupSize % 8 == 0 && K % groupSize == 0 && w.shape(2) * 32 / bits == K && scales->ndim() == 3 &&
                scales->shape(1) == w.shape(1) && scales->shape(2) * groupSize == K && isFloat(*scales) &&
                isFloat(*biases);
  } else {
    supported = supported && isFloat(w) && w.shape(2) == K;
  }
  const int N = w.shape(1);
  if (!supported) {
    // MLX's gather: row p reads x row p / rowsPerX (lhs) and expert indices[p] (rhs)
    mx::array lhs = mx::floor_divide(mx::arange(P, mx::uint32), mx::array(rowsPerX, mx::uint32));
    mx::array x3 = mx::expand_dims(x, 1);  // [X, 1, K]
    mx::array y = quantized ? mx::gather_qmm(x3, w, *scales, biases, lhs, indices, true, groupSize, bits, "affine")
                            : mx::gather_mm(x3, mx::transpose(w, {0, 2, 1}), lhs, indices);
    return mx::reshape(y, {P, N});
  }
  std::vector<mx::array> inputs = {x, w};
  if (quantized) {
    inputs.push_back(*scales);
    inputs.push_back(*biases);
  }
  inputs.push_back(indices);
  return mx::array({P, N}, x.dtype(), std::make_shared<CpuLinear>(*s, bits, groupSize, true, rowsPerX), inputs);
}

std::optional<std::vector<mx::array>> FastGatedDelta(const mx::array& q, const mx::array& k, const mx::array& v,
                                                     const mx::array& g, const mx::array& beta,
                                                     const mx::array& state) {
  auto s = cpuStream();
  // scalar gate per head, fp32 state, head dims that fit the on-stack row
  if (!s || g.ndim() != 3 || state.dtype() != mx::float32 || q.shape(3) > 512 || !isFloat(q) || !isFloat(k) ||
      !isFloat(v) || !isFloat(g) || !isFloat(beta)) {
    return std::nullopt;
  }
  return mx::array::make_arrays({v.shape(), state.shape()}, {q.dtype(), mx::float32},
                                std::make_shared<CpuGatedDelta>(*s), {q, k, v, g, beta, state});
}

namespace {

// linear(x, w) -> x @ wᵀ
Napi::Value Linear(const Napi::CallbackInfo& info) {
  Args args(info, "linear");
  return Wrap(info.Env(), FastLinear(args.array(0, "x"), args.array(1, "w")));
}

// quantizedLinear(x, wq, scales, biases, bits, groupSize) -> x @ dequantize(wq)ᵀ
Napi::Value QuantizedLinear(const Napi::CallbackInfo& info) {
  Args args(info, "quantizedLinear");
  return Wrap(info.Env(), FastQuantizedLinear(args.array(0, "x"), args.array(1, "wq"), args.array(2, "scales"),
                                              args.array(3, "biases"), args.integer(4, "bits"),
                                              args.integer(5, "groupSize")));
}

// gatherLinear(x, w, scales?, biases?, indices, bits (0 = dense), groupSize, rowsPerX) -> [P, N]
Napi::Value GatherLinear(const Napi::CallbackInfo& info) {
  Args args(info, "gatherLinear");
  return Wrap(info.Env(), FastGatherLinear(args.array(0, "x"), args.array(1, "w"), args.optArray(2, "scales"),
                                           args.optArray(3, "biases"), args.array(4, "indices"),
                                           args.integer(5, "bits"), args.integer(6, "groupSize", 64),
                                           args.integer(7, "rowsPerX", 1)));
}

Napi::Value KernelThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), CpuKernelThreads());
}

// setCpuKernelsEnabled(enabled) -> previous: off, every builder uses MLX's own ops (for comparisons)
Napi::Value SetCpuKernelsEnabled(const Napi::CallbackInfo& info) {
  Args args(info, "setCpuKernelsEnabled");
  return Napi::Boolean::New(info.Env(), kernelsEnabled.exchange(args.boolean(0, "enabled", true)));
}

}  // namespace

void RegisterCpuKernels(Napi::Env env, Napi::Object exports) {
  exports.Set("linear", Fn<Linear>(env, "linear"));
  exports.Set("quantizedLinear", Fn<QuantizedLinear>(env, "quantizedLinear"));
  exports.Set("gatherLinear", Fn<GatherLinear>(env, "gatherLinear"));
  exports.Set("cpuKernelThreads", Fn<KernelThreads>(env, "cpuKernelThreads"));
  exports.Set("setCpuKernelsEnabled", Fn<SetCpuKernelsEnabled>(env, "setCpuKernelsEnabled"));
}

}  // namespace rmlx
