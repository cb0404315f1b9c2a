// MxArray: a JS object owning one mx::array handle (a shared, reference-counted graph node).
//
// Lifetime: dispose() drops the handle at once (idempotent); the GC finalizer is only a backstop.
// V8 is told the array's logical size (AdjustExternalMemory) so that it collects wrappers sooner.
#pragma once

#include <optional>

#include "common.h"

namespace rmlx {

class MlxArray : public Napi::ObjectWrap<MlxArray> {
 public:
  static Napi::Function DefineClass(Napi::Env env);
  /** Creates the JS wrapper for `a` (the only way to construct one). */
  static Napi::Object New(Napi::Env env, mx::array a);
  /** The MlxArray behind `v`, or nullptr when `v` is not an MxArray (checked with a type tag). */
  static MlxArray* FromValue(Napi::Value v);

  explicit MlxArray(const Napi::CallbackInfo& info);
  void Finalize(Napi::Env env) override;

  /** The live handle; throws MlxDisposedError (naming op and argument) after dispose(). */
  const mx::array& get(Napi::Env env, const char* op, const char* arg) const;
  bool disposed() const { return !array_.has_value(); }
  /** The handle, unchecked: only after disposed() returned false. */
  const mx::array& value() const { return *array_; }

 private:
  Napi::Value Shape(const Napi::CallbackInfo& info);
  Napi::Value Dtype(const Napi::CallbackInfo& info);
  Napi::Value Size(const Napi::CallbackInfo& info);
  Napi::Value Ndim(const Napi::CallbackInfo& info);
  Napi::Value Nbytes(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  Napi::Value ToTypedArray(const Napi::CallbackInfo& info);
  Napi::Value Item(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);

  void release(Napi::Env env);

  std::optional<mx::array> array_;
  int64_t reportedBytes_ = 0;
};

}  // namespace rmlx
