// MxArray and array creation (from typed-array bytes, full, arange).
#include "array.h"

#include <cstdlib>
#include <cstring>

namespace rmlx {

namespace {

// Tags MxArray objects so that arguments are recognised without an instanceof walk (Node-API 8).
constexpr napi_type_tag kArrayTag = {0x8a3f2c41d7e94b10ULL, 0xb51e6d0c92a47f33ULL};

// The array handed to the constructor by MlxArray::New (JS code cannot construct MxArray itself).
thread_local mx::array* pendingArray = nullptr;

napi_typedarray_type TypedArrayTypeFor(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::float32: return napi_float32_array;
    case mx::Dtype::Val::float16:
    case mx::Dtype::Val::bfloat16:
    case mx::Dtype::Val::uint16: return napi_uint16_array;  // fp16/bf16 as raw bit patterns
    case mx::Dtype::Val::int8: return napi_int8_array;
    case mx::Dtype::Val::uint8:
    case mx::Dtype::Val::bool_: return napi_uint8_array;
    case mx::Dtype::Val::int16: return napi_int16_array;
    case mx::Dtype::Val::int32: return napi_int32_array;
    case mx::Dtype::Val::uint32: return napi_uint32_array;
    case mx::Dtype::Val::int64: return napi_bigint64_array;
    case mx::Dtype::Val::uint64: return napi_biguint64_array;
    default: throw std::invalid_argument(std::string("toTypedArray: unsupported dtype ") + DtypeName(d));
  }
}

}  // namespace

Napi::Function MlxArray::DefineClass(Napi::Env env) {
  return ObjectWrap<MlxArray>::DefineClass(
      env, "MxArray",
      {
          InstanceAccessor<&MlxArray::Shape>("shape"),
          InstanceAccessor<&MlxArray::Dtype>("dtype"),
          InstanceAccessor<&MlxArray::Size>("size"),
          InstanceAccessor<&MlxArray::Ndim>("ndim"),
          InstanceAccessor<&MlxArray::Nbytes>("nbytes"),
          InstanceAccessor<&MlxArray::Disposed>("disposed"),
          InstanceMethod<&MlxArray::ToTypedArray>("toTypedArray"),
          InstanceMethod<&MlxArray::Item>("item"),
          InstanceMethod<&MlxArray::Dispose>("dispose"),
      });
}

Napi::Object MlxArray::New(Napi::Env env, mx::array a) {
  pendingArray = &a;
  Napi::Object obj;
  try {
    obj = Data(env).arrayCtor.New({});
  } catch (...) {
    pendingArray = nullptr;
    throw;
  }
  pendingArray = nullptr;
  return obj;
}

MlxArray* MlxArray::FromValue(Napi::Value v) {
  if (!v.IsObject()) return nullptr;
  Napi::Object obj = v.As<Napi::Object>();
  if (!obj.CheckTypeTag(&kArrayTag)) return nullptr;
  return MlxArray::Unwrap(obj);
}

MlxArray::MlxArray(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MlxArray>(info) {
  if (pendingArray == nullptr) {
    ThrowType(info.Env(), "MxArray cannot be constructed directly: use mx.array(), mx.zeros() or an op");
  }
  array_.emplace(std::move(*pendingArray));
  pendingArray = nullptr;
  info.This().As<Napi::Object>().TypeTag(&kArrayTag);
  reportedBytes_ = static_cast<int64_t>(array_->nbytes());
  if (reportedBytes_ > 0) Napi::MemoryManagement::AdjustExternalMemory(info.Env(), reportedBytes_);
}

void MlxArray::release(Napi::Env env) {
  array_.reset();
  if (reportedBytes_ > 0) Napi::MemoryManagement::AdjustExternalMemory(env, -reportedBytes_);
  reportedBytes_ = 0;
}

void MlxArray::Finalize(Napi::Env env) {
  release(env);
}

const mx::array& MlxArray::get(Napi::Env env, const char* op, const char* arg) const {
  if (!array_) {
    ThrowDisposed(env, std::string(op) + ": " + (arg ? arg : "the array") +
                           " is an MxArray that was already disposed (used after dispose() or after its tidy scope)");
  }
  return *array_;
}

Napi::Value MlxArray::Shape(const Napi::CallbackInfo& info) {
  const mx::array& a = get(info.Env(), "shape", nullptr);
  Napi::Array out = Napi::Array::New(info.Env(), a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) out.Set(static_cast<uint32_t>(i), Napi::Number::New(info.Env(), a.shape()[i]));
  return out;
}

Napi::Value MlxArray::Dtype(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), DtypeName(get(info.Env(), "dtype", nullptr).dtype()));
}

Napi::Value MlxArray::Size(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(get(info.Env(), "size", nullptr).size()));
}

Napi::Value MlxArray::Ndim(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(get(info.Env(), "ndim", nullptr).ndim()));
}

Napi::Value MlxArray::Nbytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(get(info.Env(), "nbytes", nullptr).nbytes()));
}

Napi::Value MlxArray::Disposed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !array_.has_value());
}

Napi::Value MlxArray::ToTypedArray(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Protect(env, [&]() -> Napi::Value {
    mx::array a = get(env, "toTypedArray", nullptr);
    napi_typedarray_type type = TypedArrayTypeFor(a.dtype());
    a.eval();
    if (!a.flags().row_contiguous) {
      a = mx::contiguous(a);
      a.eval();
    }
    size_t nbytes = a.nbytes();
    Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, nbytes);
    if (nbytes > 0) std::memcpy(buffer.Data(), a.data<uint8_t>(), nbytes);
    napi_value out;
    napi_status status = napi_create_typedarray(env, type, a.size(), buffer, 0, &out);
    NAPI_THROW_IF_FAILED(env, status, Napi::Value());
    return Napi::Value(env, out);
  });
}

Napi::Value MlxArray::Item(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Protect(env, [&]() -> Napi::Value {
    const mx::array& a = get(env, "item", nullptr);
    if (a.size() != 1) {
      throw std::invalid_argument("item: the array has " + std::to_string(a.size()) + " elements, not 1");
    }
    if (a.dtype() == mx::bool_) return Napi::Boolean::New(env, mx::astype(a, mx::bool_).item<bool>());
    if (mx::issubdtype(a.dtype(), mx::inexact)) {
      return Napi::Number::New(env, static_cast<double>(mx::astype(a, mx::float32).item<float>()));
    }
    return Napi::Number::New(env, static_cast<double>(mx::astype(a, mx::int64).item<int64_t>()));
  });
}

Napi::Value MlxArray::Dispose(const Napi::CallbackInfo& info) {
  release(info.Env());
  return info.Env().Undefined();
}

Napi::Object Wrap(Napi::Env env, mx::array a) {
  return MlxArray::New(env, std::move(a));
}

Napi::Array WrapList(Napi::Env env, const std::vector<mx::array>& arrays) {
  Napi::Array out = Napi::Array::New(env, arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) out.Set(static_cast<uint32_t>(i), Wrap(env, arrays[i]));
  return out;
}

namespace {

// fromBuffer(view: ArrayBufferView, shape: number[], dtype: string): the bytes are copied once.
Napi::Value FromBuffer(const Napi::CallbackInfo& info) {
  Args args(info, "array");
  if (!info[0].IsTypedArray() && !info[0].IsDataView()) args.fail(0, "data", "a TypedArray");
  mx::Shape shape = args.shape(1, "shape");
  mx::Dtype dtype = args.dtype(2, "dtype");
  size_t byteLength = 0;
  const uint8_t* bytes = nullptr;
  if (info[0].IsTypedArray()) {
    Napi::TypedArray view = info[0].As<Napi::TypedArray>();
    byteLength = view.ByteLength();
    bytes = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  } else {
    Napi::DataView view = info[0].As<Napi::DataView>();
    byteLength = view.ByteLength();
    bytes = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  }
  size_t count = 1;
  for (auto d : shape) count *= static_cast<size_t>(d);
  size_t want = count * mx::size_of(dtype);
  if (byteLength != want) {
    ThrowType(info.Env(), "array: data has " + std::to_string(byteLength) + " bytes but shape and dtype " +
                              DtypeName(dtype) + " need " + std::to_string(want));
  }
  void* copy = std::malloc(want > 0 ? want : 1);
  if (copy == nullptr) throw std::bad_alloc();
  if (want > 0) std::memcpy(copy, bytes, want);
  // MLX adopts the buffer without another copy where it can and frees it through the deleter.
  mx::array a(copy, std::move(shape), dtype, [](void* p) { std::free(p); });
  return Wrap(info.Env(), std::move(a));
}

// full(shape, value, dtype)
Napi::Value Full(const Napi::CallbackInfo& info) {
  Args args(info, "full");
  mx::Shape shape = args.shape(0, "shape");
  double value = args.number(1, "value");
  mx::Dtype dtype = args.dtype(2, "dtype");
  mx::array v = mx::issubdtype(dtype, mx::inexact) ? mx::array(static_cast<float>(value), dtype)
                : dtype == mx::bool_                ? mx::array(value != 0.0)
                                                    : mx::array(static_cast<int64_t>(value), dtype);
  return Wrap(info.Env(), mx::full(std::move(shape), v, dtype));
}

// arange(start, stop, step, dtype)
Napi::Value Arange(const Napi::CallbackInfo& info) {
  Args args(info, "arange");
  return Wrap(info.Env(), mx::arange(args.number(0, "start"), args.number(1, "stop"), args.number(2, "step"),
                                     args.dtype(3, "dtype")));
}

}  // namespace

void RegisterArray(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = MlxArray::DefineClass(env);
  Data(env).arrayCtor = Napi::Persistent(ctor);
  exports.Set("MxArray", ctor);
  exports.Set("fromBuffer", Fn<FromBuffer>(env, "fromBuffer"));
  exports.Set("full", Fn<Full>(env, "full"));
  exports.Set("arange", Fn<Arange>(env, "arange"));
}

}  // namespace rmlx
