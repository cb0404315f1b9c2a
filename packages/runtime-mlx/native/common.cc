// Errors, dtype names and argument parsing shared by every exported function.
#include "common.h"

#include <cmath>
#include <limits>

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
