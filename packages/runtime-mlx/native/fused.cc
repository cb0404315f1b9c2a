// Fused Qwen3.5 steps, each an mx::compile over a plain function (compiled once per input shape, or
// shapeless where the function is purely elementwise), following mlx-lm's gated_delta.py and
// qwen3_next.py (ml-explore/mlx-lm, mlx_lm/models/).
#include <functional>
#include <sstream>

#include "common.h"
#include "cpu_kernels.h"

namespace rmlx {

namespace {

std::string ShapeString(const mx::array& a) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < a.ndim(); ++i) out << (i ? ", " : "") << a.shape()[i];
  out << "]";
  return out.str();
}

[[noreturn]] void BadShape(const char* op, const char* name, const std::string& expected, const mx::array& got) {
  throw std::invalid_argument(std::string(op) + ": " + name + " must have shape " + expected + ", got " +
                              ShapeString(got));
}

std::string Dims(std::initializer_list<int> dims) {
  std::ostringstream out;
  out << "[";
  bool first = true;
  for (int d : dims) {
    out << (first ? "" : ", ") << d;
    first = false;
  }
  out << "]";
  return out.str();
}

bool HasShape(const mx::array& a, std::initializer_list<int> dims) {
  if (a.ndim() != dims.size()) return false;
  size_t i = 0;
  for (int d : dims) {
    if (a.shape()[i++] != d) return false;
  }
  return true;
}

// One recurrent step of the gated delta rule, state laid out [B, H, Dv, Dk] as in mlx-lm:
//   S = S * g;  kv = sum_k(S * k);  delta = (v - kv) * beta;  S = S + delta ⊗ k;  y = sum_k(S * q)
// Inputs: q, k [B,H,Dk]; v [B,H,Dv]; g [B,H] (scalar gate) or [B,H,Dk] (per-key gate); beta [B,H];
// state [B,H,Dv,Dk] (fp32); optional mask [B] (false keeps the old state). Outputs: y [B,H,Dv] in
// q's dtype, new state.
std::vector<mx::array> GatedDeltaStepFn(const std::vector<mx::array>& in) {
  const mx::array& q = in[0];
  const mx::array& k = in[1];
  const mx::array& v = in[2];
  const mx::array& g = in[3];
  const mx::array& beta = in[4];
  const mx::array& oldState = in[5];
  mx::array decay = g.ndim() == 2 ? mx::expand_dims(g, {2, 3}) : mx::expand_dims(g, 2);
  mx::array kRow = mx::expand_dims(k, 2);                                      // [B,H,1,Dk]
  mx::array state = mx::multiply(oldState, decay);                             // [B,H,Dv,Dk]
  mx::array kv = mx::sum(mx::multiply(state, kRow), -1);                        // [B,H,Dv]
  mx::array delta = mx::multiply(mx::subtract(v, kv), mx::expand_dims(beta, -1));  // [B,H,Dv]
  state = mx::add(state, mx::multiply(kRow, mx::expand_dims(delta, -1)));
  mx::array y = mx::sum(mx::multiply(state, mx::expand_dims(q, 2)), -1);       // [B,H,Dv]
  if (in.size() > 6) state = mx::where(mx::expand_dims(in[6], {1, 2, 3}), state, oldState);
  return {mx::astype(y, q.dtype()), state};
}

// Compiled functions live for the whole process and are deliberately never destroyed: running their
// destructors at exit could race MLX's own static teardown.
using CompiledFn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

const CompiledFn& Compiled(std::vector<mx::array> (*fn)(const std::vector<mx::array>&), bool shapeless) {
  return *new CompiledFn(mx::compile(fn, shapeless));
}

const CompiledFn& CompiledGatedDeltaStep() {
  static const CompiledFn& fn = Compiled(&GatedDeltaStepFn, false);
  return fn;
}

void CheckStepShapes(const char* op, const std::vector<mx::array>& in) {
  const mx::array &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4], &state = in[5];
  if (q.ndim() != 3) BadShape(op, "q", "[B, H, Dk]", q);
  int B = q.shape()[0], H = q.shape()[1], Dk = q.shape()[2];
  if (!HasShape(k, {B, H, Dk})) BadShape(op, "k", Dims({B, H, Dk}), k);
  if (v.ndim() != 3 || v.shape()[0] != B || v.shape()[1] != H) BadShape(op, "v", Dims({B, H}) + " + [Dv]", v);
  int Dv = v.shape()[2];
  if (!HasShape(g, {B, H}) && !HasShape(g, {B, H, Dk})) BadShape(op, "g", Dims({B, H}) + " or " + Dims({B, H, Dk}), g);
  if (!HasShape(beta, {B, H})) BadShape(op, "beta", Dims({B, H}), beta);
  if (!HasShape(state, {B, H, Dv, Dk})) BadShape(op, "state", Dims({B, H, Dv, Dk}), state);
  if (in.size() > 6 && !HasShape(in[6], {B})) BadShape(op, "mask", Dims({B}), in[6]);
}

// gatedDeltaStep(q, k, v, g, beta, state, mask?) -> [y, state]
Napi::Value GatedDeltaStep(const Napi::CallbackInfo& info) {
  Args args(info, "gatedDeltaStep");
  std::vector<mx::array> in = {args.array(0, "q"), args.array(1, "k"),    args.array(2, "v"),
                               args.array(3, "g"), args.array(4, "beta"), args.array(5, "state")};
  if (auto mask = args.optArray(6, "mask")) in.push_back(*mask);
  CheckStepShapes("gatedDeltaStep", in);
  return WrapList(info.Env(), CompiledGatedDeltaStep()(in));
}

// gatedDeltaPrefill(q, k, v, g, beta, state?, mask?) -> [y, state]: the compiled step looped over T here
// in C++ (one graph, no JS round trip per token). q, k [B,T,Hk,Dk]; v [B,T,Hv,Dv]; g [B,T,Hv](,Dk);
// beta [B,T,Hv]; state [B,Hv,Dv,Dk] (zeros in fp32 when absent); mask [B,T]. y is [B,T,Hv,Dv].
Napi::Value GatedDeltaPrefill(const Napi::CallbackInfo& info) {
  const char* op = "gatedDeltaPrefill";
  Args args(info, op);
  mx::array q = args.array(0, "q");
  mx::array k = args.array(1, "k");
  const mx::array& v = args.array(2, "v");
  const mx::array& g = args.array(3, "g");
  const mx::array& beta = args.array(4, "beta");
  auto initial = args.optArray(5, "state");
  auto mask = args.optArray(6, "mask");
  if (q.ndim() != 4) BadShape(op, "q", "[B, T, Hk, Dk]", q);
  int B = q.shape()[0], T = q.shape()[1], Hk = q.shape()[2], Dk = q.shape()[3];
  if (!HasShape(k, {B, T, Hk, Dk})) BadShape(op, "k", Dims({B, T, Hk, Dk}), k);
  if (v.ndim() != 4 || v.shape()[0] != B || v.shape()[1] != T) BadShape(op, "v", Dims({B, T}) + " + [Hv, Dv]", v);
  int Hv = v.shape()[2], Dv = v.shape()[3];
  if (Hv % Hk != 0) {
    throw std::invalid_argument(std::string(op) + ": value heads (" + std::to_string(Hv) +
                                ") must be a multiple of key heads (" + std::to_string(Hk) + ")");
  }
  if (!HasShape(g, {B, T, Hv}) && !HasShape(g, {B, T, Hv, Dk})) {
    BadShape(op, "g", Dims({B, T, Hv}) + " or " + Dims({B, T, Hv, Dk}), g);
  }
  if (!HasShape(beta, {B, T, Hv})) BadShape(op, "beta", Dims({B, T, Hv}), beta);
  if (mask && !HasShape(*mask, {B, T})) BadShape(op, "mask", Dims({B, T}), *mask);
  mx::array state = initial ? *initial : mx::zeros({B, Hv, Dv, Dk}, mx::float32);
  if (!HasShape(state, {B, Hv, Dv, Dk})) BadShape(op, "state", Dims({B, Hv, Dv, Dk}), state);
  if (T > 0 && mx::default_stream(mx::default_device()).device == mx::Device::gpu) {
    // On Metal, MLX's own fused kernel (same contract; the Metal counterpart of mlx-lm's kernel).
    return WrapList(info.Env(), mx::fast::gated_delta_update(q, k, v, g, beta, state, mask));
  }
  if (T > 0 && !mask) {
    // One CPU node for the whole sequence when it applies (cpu_kernels.cc); same semantics.
    if (auto fast = FastGatedDelta(q, k, v, g, beta, state)) return WrapList(info.Env(), *fast);
  }
  if (Hv > Hk) {
    // GQA: value head j reads key head j / (Hv / Hk) (consecutive repeat, as mlx-lm's mx.repeat).
    q = mx::repeat(q, Hv / Hk, 2);
    k = mx::repeat(k, Hv / Hk, 2);
  }
  if (T == 0) return WrapList(info.Env(), {mx::zeros({B, 0, Hv, Dv}, q.dtype()), state});
  const auto& step = CompiledGatedDeltaStep();
  std::vector<mx::array> ys;
  ys.reserve(T);
  for (int t = 0; t < T; ++t) {
    // a[:, t] as a view (slice + squeeze), not a gather
    auto at = [t](const mx::array& a) {
      mx::Shape start(a.ndim(), 0);
      mx::Shape stop(a.shape().begin(), a.shape().end());
      start[1] = t;
      stop[1] = t + 1;
      return mx::squeeze(mx::slice(a, start, stop), 1);
    };
    std::vector<mx::array> in = {at(q), at(k), at(v), at(g), at(beta), state};
    if (mask) in.push_back(at(*mask));
    std::vector<mx::array> out = step(in);
    ys.push_back(std::move(out[0]));
    state = std::move(out[1]);
  }
  return WrapList(info.Env(), {mx::stack(ys, 1), state});
}

// MLX's own fused kernel (mx::fast::gated_delta_update, MLX >= 0.32), same layout and semantics.
Napi::Value GatedDeltaUpdate(const Napi::CallbackInfo& info) {
  Args args(info, "gatedDeltaUpdate");
  return WrapList(info.Env(), mx::fast::gated_delta_update(args.array(0, "q"), args.array(1, "k"), args.array(2, "v"),
                                                           args.array(3, "g"), args.array(4, "beta"),
                                                           args.optArray(5, "state"), args.optArray(6, "mask")));
}

// Gate of Qwen3-Next's RMSNormGated: silu(z) * y computed in fp32.
std::vector<mx::array> NormGateFn(const std::vector<mx::array>& in) {
  mx::array y = mx::astype(in[0], mx::float32);
  mx::array z = mx::astype(in[1], mx::float32);
  return {mx::multiply(mx::multiply(z, mx::sigmoid(z)), y)};
}

// gatedRmsNorm(x, weight, z, eps) = rms_norm(x, weight, eps) * silu(z), fp32 inside, in x's dtype
Napi::Value GatedRmsNorm(const Napi::CallbackInfo& info) {
  Args args(info, "gatedRmsNorm");
  static const CompiledFn& gate = Compiled(&NormGateFn, /*shapeless=*/true);
  const mx::array& x = args.array(0, "x");
  mx::array y = mx::fast::rms_norm(x, args.optArray(1, "weight"), static_cast<float>(args.number(3, "eps")));
  return Wrap(info.Env(), mx::astype(gate({y, args.array(2, "z")})[0], x.dtype()));
}

// SwiGLU: silu(gate) * x.
std::vector<mx::array> SwigluFn(const std::vector<mx::array>& in) {
  const mx::array& gate = in[0];
  return {mx::multiply(mx::multiply(gate, mx::sigmoid(gate)), in[1])};
}

// swiglu(gate, x)
Napi::Value Swiglu(const Napi::CallbackInfo& info) {
  Args args(info, "swiglu");
  static const CompiledFn& fn = Compiled(&SwigluFn, /*shapeless=*/true);
  return Wrap(info.Env(), fn({args.array(0, "gate"), args.array(1, "x")})[0]);
}

// The GDN decay: g = exp(-exp(float32(A_log)) * softplus(a + dt_bias)), a factor in (0, 1], fp32.
std::vector<mx::array> ComputeGFn(const std::vector<mx::array>& in) {
  mx::array aLog = mx::astype(in[0], mx::float32);
  mx::array x = mx::add(in[1], in[2]);
  mx::array softplus = mx::logaddexp(x, mx::array(0.0f, x.dtype()));
  return {mx::exp(mx::multiply(mx::negative(mx::exp(aLog)), softplus))};
}

// computeG(A_log, a, dt_bias)
Napi::Value ComputeG(const Napi::CallbackInfo& info) {
  Args args(info, "computeG");
  static const CompiledFn& fn = Compiled(&ComputeGFn, /*shapeless=*/true);
  return Wrap(info.Env(), fn({args.array(0, "A_log"), args.array(1, "a"), args.array(2, "dt_bias")})[0]);
}

}  // namespace

void RegisterFused(Napi::Env env, Napi::Object exports) {
  exports.Set("gatedDeltaStep", Fn<GatedDeltaStep>(env, "gatedDeltaStep"));
  exports.Set("gatedDeltaPrefill", Fn<GatedDeltaPrefill>(env, "gatedDeltaPrefill"));
  exports.Set("gatedDeltaUpdate", Fn<GatedDeltaUpdate>(env, "gatedDeltaUpdate"));
  exports.Set("gatedRmsNorm", Fn<GatedRmsNorm>(env, "gatedRmsNorm"));
  exports.Set("swiglu", Fn<Swiglu>(env, "swiglu"));
  exports.Set("computeG", Fn<ComputeG>(env, "computeG"));
}

}  // namespace rmlx
