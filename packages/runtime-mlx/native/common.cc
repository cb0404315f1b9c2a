// Errors, dtype names and argument parsing shared by every exported function.
#include "common.h"

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "array.h"

namespace rmlx {

AddonData& Data(Napi::Env env) {
  return *env.GetInstanceData<AddonData>();
}

namespace {

[[noreturn]] void ThrowWith(Napi::Env env, Napi::FunctionReference& ctor, const std::string& message) {
  if (!ctor.IsEmpty()) {
    Napi::Object error = ctor.New({Napi::String::New(env, message)});
    throw Napi::Error(env, error);
  }
  throw Napi::Error::New(env, message);
}

struct DtypeEntry {
  const char* name;
  mx::Dtype dtype;
};

constexpr DtypeEntry kDtypes[] = {
    {"float32", mx::float32}, {"float16", mx::float16}, {"bfloat16", mx::bfloat16},
    {"int8", mx::int8},       {"uint8", mx::uint8},     {"int16", mx::int16},
    {"uint16", mx::uint16},   {"int32", mx::int32},     {"uint32", mx::uint32},
    {"int64", mx::int64},     {"uint64", mx::uint64},   {"bool", mx::bool_},
};

}  // namespace

void ThrowMlx(Napi::Env env, const std::string& message) {
  ThrowWith(env, Data(env).mlxErrorCtor, message);
}

void ThrowDisposed(Napi::Env env, const std::string& message) {
  ThrowWith(env, Data(env).disposedErrorCtor, message);
}

void ThrowType(Napi::Env env, const std::string& message) {
  throw Napi::TypeError::New(env, message);
}

Napi::Value MlxErrorValue(Napi::Env env, const std::string& message) {
  Napi::FunctionReference& ctor = Data(env).mlxErrorCtor;
  Napi::String text = Napi::String::New(env, message);
  return ctor.IsEmpty() ? Napi::Error::New(env, message).Value() : ctor.New({text});
}

namespace {

// A detached thread may outlive the Node environment (the process exits while it still waits). It
// must then never touch the thread-safe function, which Node frees at teardown: an environment
// cleanup hook, registered after the function's own so that it runs first, marks the job's guard
// `gone` under the lock the thread holds while it calls into the function.
struct DetachedGuard {
  std::mutex mu;
  bool gone = false;
};

void OnEnvCleanup(void* arg) {
  auto* guard = static_cast<std::shared_ptr<DetachedGuard>*>(arg);
  {
    std::lock_guard<std::mutex> lock((*guard)->mu);
    (*guard)->gone = true;
  }
  delete guard;
}

struct DetachedJob;
void SettleDetached(Napi::Env env, Napi::Function, std::nullptr_t*, DetachedJob* job);
using DetachedTsfn = Napi::TypedThreadSafeFunction<std::nullptr_t, DetachedJob, SettleDetached>;

struct DetachedJob {
  std::function<void()> work;
  std::function<Napi::Value(Napi::Env)> done;
  Napi::Promise::Deferred deferred;
  std::optional<std::string> error;
  std::shared_ptr<DetachedGuard>* hook;  // the cleanup hook's argument, while it is registered
  DetachedTsfn tsfn;
};

void SettleDetached(Napi::Env env, Napi::Function, std::nullptr_t*, DetachedJob* job) {
  std::unique_ptr<DetachedJob> owned(job);
  if (env == nullptr) return;  // teardown: the hook has run (and freed its argument); nobody to tell
  // Released here, on the JS thread: once its call is queued the thread never touches it again.
  job->tsfn.Release();
  napi_remove_env_cleanup_hook(env, OnEnvCleanup, job->hook);
  delete job->hook;
  if (!job->error) {
    try {
      job->deferred.Resolve(job->done(env));
      return;
    } catch (const Napi::Error& e) {
      job->deferred.Reject(e.Value());
      return;
    } catch (const std::exception& e) {
      job->error = e.what();
    }
  }
  job->deferred.Reject(MlxErrorValue(env, *job->error));
}

}  // namespace

Napi::Promise RunDetached(Napi::Env env, const char* name, std::function<void()> work,
                          std::function<Napi::Value(Napi::Env)> done) {
  auto guard = std::make_shared<DetachedGuard>();
  DetachedTsfn tsfn = DetachedTsfn::New(env, name, 0, 1);
  tsfn.Unref(env);
  auto* job = new DetachedJob{std::move(work), std::move(done), Napi::Promise::Deferred::New(env), std::nullopt,
                              new std::shared_ptr<DetachedGuard>(guard), tsfn};
  Napi::Promise promise = job->deferred.Promise();
  napi_add_env_cleanup_hook(env, OnEnvCleanup, job->hook);
  std::thread([tsfn, job, guard]() mutable {
    try {
      job->work();
    } catch (const std::exception& e) {
      job->error = e.what();
    } catch (...) {
      job->error = "unknown native error";
    }
    std::lock_guard<std::mutex> lock(guard->mu);
    if (guard->gone) return;  // the environment is gone: leave the job (the process is ending)
    tsfn.BlockingCall(job);   // SettleDetached owns the job (and releases the function) from here
  }).detach();
  return promise;
}

mx::Dtype ParseDtype(Napi::Env env, const std::string& name) {
  for (const auto& e : kDtypes) {
    if (name == e.name) return e.dtype;
  }
  ThrowType(env, "unknown dtype '" + name +
                     "' (expected float32, float16, bfloat16, int8, uint8, int16, uint16, int32, uint32, int64, "
                     "uint64 or bool)");
}

const char* DtypeName(mx::Dtype d) {
  for (const auto& e : kDtypes) {
    if (e.dtype == d) return e.name;
  }
  if (d == mx::float64) return "float64";
  if (d == mx::complex64) return "complex64";
  return "unknown";
}

mx::array ScalarLike(double value, const mx::array* like) {
  // MLX's Python scalars are "weak": they take the array operand's dtype instead of promoting it.
  bool integral = std::isfinite(value) && std::floor(value) == value;
  if (like != nullptr) {
    mx::Dtype d = like->dtype();
    if (mx::issubdtype(d, mx::inexact)) return mx::array(static_cast<float>(value), d);
    if (integral && d != mx::bool_) return mx::array(static_cast<int64_t>(value), d);
    if (integral) return mx::array(static_cast<int32_t>(value), mx::int32);
  }
  return mx::array(static_cast<float>(value), mx::float32);
}

const mx::array& ArrayFromValue(Napi::Env env, Napi::Value v, const char* op, const std::string& what) {
  MlxArray* wrapped = MlxArray::FromValue(v);
  if (wrapped == nullptr) ThrowType(env, std::string(op) + ": " + what + " must be an MxArray");
  if (wrapped->disposed()) wrapped->get(env, op, what.c_str());
  return wrapped->value();
}

void Args::fail(size_t i, const char* name, const std::string& expected) const {
  ThrowType(env(), std::string(op_) + ": argument " + std::to_string(i + 1) + " (" + name + ") must be " + expected);
}

const mx::array& Args::array(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsObject()) fail(i, name, "an MxArray");
  MlxArray* wrapped = MlxArray::FromValue(info_[i]);
  if (wrapped == nullptr) fail(i, name, "an MxArray");
  if (wrapped->disposed()) wrapped->get(env(), op_, ("argument '" + std::string(name) + "'").c_str());
  return wrapped->value();
}

std::optional<mx::array> Args::optArray(size_t i, const char* name) const {
  if (!has(i)) return std::nullopt;
  return array(i, name);
}

mx::array Args::arrayOrScalar(size_t i, const char* name, const mx::array* like) const {
  if (i < info_.Length() && info_[i].IsNumber()) {
    return ScalarLike(info_[i].As<Napi::Number>().DoubleValue(), like);
  }
  if (i < info_.Length() && info_[i].IsBoolean()) {
    return mx::array(info_[i].As<Napi::Boolean>().Value());
  }
  if (i >= info_.Length() || !info_[i].IsObject() || MlxArray::FromValue(info_[i]) == nullptr) {
    fail(i, name, "an MxArray or a number");
  }
  return array(i, name);
}

std::vector<mx::array> Args::arrays(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsArray()) fail(i, name, "an array of MxArray");
  Napi::Array list = info_[i].As<Napi::Array>();
  std::vector<mx::array> out;
  out.reserve(list.Length());
  for (uint32_t j = 0; j < list.Length(); ++j) {
    Napi::Value v = list.Get(j);
    MlxArray* wrapped = v.IsObject() ? MlxArray::FromValue(v) : nullptr;
    if (wrapped == nullptr) fail(i, name, "an array of MxArray (element " + std::to_string(j) + " is not)");
    if (wrapped->disposed()) wrapped->get(env(), op_, ("element " + std::to_string(j) + " of '" + name + "'").c_str());
    out.push_back(wrapped->value());
  }
  return out;
}

int Args::integer(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsNumber()) fail(i, name, "an integer");
  double v = info_[i].As<Napi::Number>().DoubleValue();
  if (std::floor(v) != v || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    fail(i, name, "an integer in int32 range (got " + std::to_string(v) + ")");
  }
  return static_cast<int>(v);
}

int Args::integer(size_t i, const char* name, int fallback) const {
  return has(i) ? integer(i, name) : fallback;
}

std::optional<int> Args::optInteger(size_t i, const char* name) const {
  if (!has(i)) return std::nullopt;
  return integer(i, name);
}

double Args::number(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsNumber()) fail(i, name, "a number");
  return info_[i].As<Napi::Number>().DoubleValue();
}

double Args::number(size_t i, const char* name, double fallback) const {
  return has(i) ? number(i, name) : fallback;
}

std::optional<double> Args::optNumber(size_t i, const char* name) const {
  if (!has(i)) return std::nullopt;
  return number(i, name);
}

bool Args::boolean(size_t i, const char* name, bool fallback) const {
  if (!has(i)) return fallback;
  if (!info_[i].IsBoolean()) fail(i, name, "a boolean");
  return info_[i].As<Napi::Boolean>().Value();
}

std::string Args::string(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsString()) fail(i, name, "a string");
  return info_[i].As<Napi::String>().Utf8Value();
}

std::string Args::string(size_t i, const char* name, const std::string& fallback) const {
  return has(i) ? string(i, name) : fallback;
}

std::vector<int> Args::ints(size_t i, const char* name) const {
  if (i >= info_.Length() || !info_[i].IsArray()) fail(i, name, "an array of integers");
  Napi::Array list = info_[i].As<Napi::Array>();
  std::vector<int> out;
  out.reserve(list.Length());
  for (uint32_t j = 0; j < list.Length(); ++j) {
    Napi::Value v = list.Get(j);
    double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : std::nan("");
    if (!(std::floor(d) == d) || d < std::numeric_limits<int>::min() || d > std::numeric_limits<int>::max()) {
      fail(i, name, "an array of integers (element " + std::to_string(j) + " is not)");
    }
    out.push_back(static_cast<int>(d));
  }
  return out;
}

mx::Shape Args::shape(size_t i, const char* name) const {
  std::vector<int> dims = ints(i, name);
  for (int d : dims) {
    if (d < 0) fail(i, name, "a shape of non-negative integers");
  }
  return mx::Shape(dims.begin(), dims.end());
}

std::optional<std::vector<int>> Args::axes(size_t i, const char* name) const {
  if (!has(i)) return std::nullopt;
  if (info_[i].IsNumber()) return std::vector<int>{integer(i, name)};
  return ints(i, name);
}

mx::Dtype Args::dtype(size_t i, const char* name) const {
  return ParseDtype(env(), string(i, name));
}

std::optional<mx::Dtype> Args::optDtype(size_t i, const char* name) const {
  if (!has(i)) return std::nullopt;
  return dtype(i, name);
}

}  // namespace rmlx
