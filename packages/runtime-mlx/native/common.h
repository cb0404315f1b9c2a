// Shared plumbing for the addon: per-env data, error boundaries and argument parsing.
#pragma once

#include <napi.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <mlx/mlx.h>

namespace mx = mlx::core;

namespace rmlx {

/** Per-environment state: the MxArray constructor and the JS error classes set by the TS layer. */
struct AddonData {
  Napi::FunctionReference arrayCtor;
  Napi::FunctionReference mlxErrorCtor;
  Napi::FunctionReference disposedErrorCtor;
};

AddonData& Data(Napi::Env env);

/** Throws the TS `MlxError` (or a plain Error before the TS layer registered it). */
[[noreturn]] void ThrowMlx(Napi::Env env, const std::string& message);
/** Throws the TS `MlxDisposedError`: an array was used after dispose(). */
[[noreturn]] void ThrowDisposed(Napi::Env env, const std::string& message);
/** Throws a TypeError: a JS argument has the wrong type or range. */
[[noreturn]] void ThrowType(Napi::Env env, const std::string& message);
/** A TS `MlxError` (or a plain Error before the TS layer registered it), to reject a Promise with. */
Napi::Value MlxErrorValue(Napi::Env env, const std::string& message);

/**
 * Runs `work` on a new detached thread, then `done` on the JS thread, and settles the returned Promise
 * with `done`'s value (or rejects with MlxError when either throws). The thread does not keep the
 * event loop alive: a caller waiting on something that may never finish (a peer that never answers)
 * keeps the loop alive with its own timer and gives up on its own terms; the thread then stays blocked
 * until the process ends, and `done` never runs.
 */
Napi::Promise RunDetached(Napi::Env env, const char* name, std::function<void()> work,
                          std::function<Napi::Value(Napi::Env)> done);

/** Runs `f` as one error boundary: MLX's std::exceptions become MlxError, JS errors pass through. */
template <typename F>
Napi::Value Protect(Napi::Env env, F&& f) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    ThrowMlx(env, e.what());
  } catch (...) {
    ThrowMlx(env, "unknown native error");
  }
}

using Handler = Napi::Value (*)(const Napi::CallbackInfo&);

template <Handler F>
Napi::Value Guard(const Napi::CallbackInfo& info) {
  return Protect(info.Env(), [&] { return F(info); });
}

/** A JS function for handler F, behind one try/catch boundary. */
template <Handler F>
Napi::Function Fn(Napi::Env env, const char* name) {
  return Napi::Function::New<Guard<F>>(env, name);
}

/** A string usable as a template argument (C++20), so op templates can name their op in errors. */
template <size_t N>
struct Lit {
  char s[N];
  constexpr Lit(const char (&v)[N]) { std::copy_n(v, N, s); }
};

/** Wraps an mx::array into a new JS MxArray (defined in array.cc). */
Napi::Object Wrap(Napi::Env env, mx::array a);
Napi::Array WrapList(Napi::Env env, const std::vector<mx::array>& arrays);

/** The live array behind a JS value; `what` names it in the TypeError / MlxDisposedError. */
const mx::array& ArrayFromValue(Napi::Env env, Napi::Value v, const char* op, const std::string& what);

mx::Dtype ParseDtype(Napi::Env env, const std::string& name);
const char* DtypeName(mx::Dtype d);

/** Positional argument reader for one exported function; errors name the op and the argument. */
class Args {
 public:
  Args(const Napi::CallbackInfo& info, const char* op) : info_(info), op_(op) {}

  Napi::Env env() const { return info_.Env(); }
  size_t length() const { return info_.Length(); }
  /** True when argument i is present and neither undefined nor null. */
  bool has(size_t i) const { return i < info_.Length() && !info_[i].IsUndefined() && !info_[i].IsNull(); }
  Napi::Value raw(size_t i) const { return info_[i]; }

  const mx::array& array(size_t i, const char* name) const;
  std::optional<mx::array> optArray(size_t i, const char* name) const;
  /** An MxArray, or a JS number turned into a scalar typed like `like` (MLX's weak scalars). */
  mx::array arrayOrScalar(size_t i, const char* name, const mx::array* like) const;
  std::vector<mx::array> arrays(size_t i, const char* name) const;

  int integer(size_t i, const char* name) const;
  int integer(size_t i, const char* name, int fallback) const;
  std::optional<int> optInteger(size_t i, const char* name) const;
  double number(size_t i, const char* name) const;
  double number(size_t i, const char* name, double fallback) const;
  std::optional<double> optNumber(size_t i, const char* name) const;
  bool boolean(size_t i, const char* name, bool fallback) const;
  std::string string(size_t i, const char* name) const;
  std::string string(size_t i, const char* name, const std::string& fallback) const;
  mx::Shape shape(size_t i, const char* name) const;
  std::vector<int> ints(size_t i, const char* name) const;
  /** number | number[] | undefined (= all axes). */
  std::optional<std::vector<int>> axes(size_t i, const char* name) const;
  mx::Dtype dtype(size_t i, const char* name) const;
  std::optional<mx::Dtype> optDtype(size_t i, const char* name) const;

  [[noreturn]] void fail(size_t i, const char* name, const std::string& expected) const;

 private:
  const Napi::CallbackInfo& info_;
  const char* op_;
};

mx::array ScalarLike(double value, const mx::array* like);

void RegisterArray(Napi::Env env, Napi::Object exports);
void RegisterOps(Napi::Env env, Napi::Object exports);
void RegisterFused(Napi::Env env, Napi::Object exports);
void RegisterIo(Napi::Env env, Napi::Object exports);
void RegisterRuntime(Napi::Env env, Napi::Object exports);
void RegisterCpuKernels(Napi::Env env, Napi::Object exports);
void RegisterDistributed(Napi::Env env, Napi::Object exports);

}  // namespace rmlx
