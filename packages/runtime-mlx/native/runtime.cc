// Evaluation (sync and async), memory counters, devices, compile switch, error-class registration.
#include <variant>

#include "common.h"

namespace rmlx {

namespace {

// eval(arrays: MxArray[]): blocks the JS thread until every array is computed.
Napi::Value Eval(const Napi::CallbackInfo& info) {
  Args args(info, "eval");
  mx::eval(args.arrays(0, "arrays"));
  return info.Env().Undefined();
}

// Waits on a libuv worker thread for arrays that mx::async_eval already scheduled, then settles a Promise.
class WaitWorker : public Napi::AsyncWorker {
 public:
  WaitWorker(Napi::Env env, std::vector<mx::array> arrays)
      : Napi::AsyncWorker(env, "runtime-mlx:asyncEval"),
        deferred_(Napi::Promise::Deferred::New(env)),
        arrays_(std::move(arrays)) {}

  Napi::Promise Promise() const { return deferred_.Promise(); }

  void Execute() override {
    try {
      for (auto& a : arrays_) a.wait();
    } catch (const std::exception& e) {
      SetError(e.what());
    } catch (...) {
      SetError("unknown error while waiting for asyncEval");
    }
  }

  void OnOK() override {
    // A failure inside MLX's stream can leave wait() returning normally, with the error kept for the
    // next eval of those arrays (as Python's async_eval + item() sees it). The arrays are computed by
    // now, so this eval does not block; it only surfaces such an error.
    try {
      mx::eval(arrays_);
    } catch (const std::exception& e) {
      arrays_.clear();
      Reject(e.what());
      return;
    }
    arrays_.clear();  // release the handles on the JS thread
    deferred_.Resolve(Env().Undefined());
  }

  void OnError(const Napi::Error& error) override {
    arrays_.clear();
    Reject(error.Message());
  }

  void Reject(const std::string& message) {
    Napi::Env env = Env();
    Napi::FunctionReference& ctor = Data(env).mlxErrorCtor;
    Napi::String text = Napi::String::New(env, message);
    deferred_.Reject(ctor.IsEmpty() ? Napi::Error::New(env, message).Value() : ctor.New({text}));
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<mx::array> arrays_;
};

// asyncEval(arrays: MxArray[]) -> Promise<void>: schedules on the JS thread (graph building is not
// thread-safe), waits off-thread, so the event loop keeps running.
Napi::Value AsyncEval(const Napi::CallbackInfo& info) {
  Args args(info, "asyncEval");
  std::vector<mx::array> arrays = args.arrays(0, "arrays");
  try {
    mx::async_eval(arrays);
  } catch (const std::exception& e) {
    // Scheduling can already fail (e.g. a lazy load); report it through the promise like a later failure.
    Napi::Env env = info.Env();
    auto deferred = Napi::Promise::Deferred::New(env);
    Napi::FunctionReference& ctor = Data(env).mlxErrorCtor;
    Napi::String message = Napi::String::New(env, e.what());
    deferred.Reject(ctor.IsEmpty() ? Napi::Error::New(env, e.what()).Value() : ctor.New({message}));
    return deferred.Promise();
  }
  auto* worker = new WaitWorker(info.Env(), std::move(arrays));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value Bytes(Napi::Env env, size_t n) {
  return Napi::Number::New(env, static_cast<double>(n));
}

size_t ByteArg(const Args& args, size_t i, const char* name) {
  double v = args.number(i, name);
  if (!(v >= 0)) args.fail(i, name, "a non-negative number of bytes");
  return static_cast<size_t>(v);
}

Napi::Value GetActiveMemory(const Napi::CallbackInfo& info) { return Bytes(info.Env(), mx::get_active_memory()); }
Napi::Value GetPeakMemory(const Napi::CallbackInfo& info) { return Bytes(info.Env(), mx::get_peak_memory()); }
Napi::Value GetCacheMemory(const Napi::CallbackInfo& info) { return Bytes(info.Env(), mx::get_cache_memory()); }
Napi::Value GetMemoryLimit(const Napi::CallbackInfo& info) { return Bytes(info.Env(), mx::get_memory_limit()); }

Napi::Value ResetPeakMemory(const Napi::CallbackInfo& info) {
  mx::reset_peak_memory();
  return info.Env().Undefined();
}

Napi::Value ClearCache(const Napi::CallbackInfo& info) {
  mx::clear_cache();
  return info.Env().Undefined();
}

// The setters return the previous limit, like MLX.
Napi::Value SetCacheLimit(const Napi::CallbackInfo& info) {
  Args args(info, "setCacheLimit");
  return Bytes(info.Env(), mx::set_cache_limit(ByteArg(args, 0, "bytes")));
}

Napi::Value SetMemoryLimit(const Napi::CallbackInfo& info) {
  Args args(info, "setMemoryLimit");
  return Bytes(info.Env(), mx::set_memory_limit(ByteArg(args, 0, "bytes")));
}

Napi::Value SetWiredLimit(const Napi::CallbackInfo& info) {
  Args args(info, "setWiredLimit");
  return Bytes(info.Env(), mx::set_wired_limit(ByteArg(args, 0, "bytes")));
}

Napi::Value MetalAvailable(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), mx::metal::is_available());
}

Napi::Value DefaultDevice(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), mx::default_device() == mx::Device::gpu ? "gpu" : "cpu");
}

// setDefaultDevice("cpu" | "gpu")
Napi::Value SetDefaultDevice(const Napi::CallbackInfo& info) {
  Args args(info, "setDefaultDevice");
  std::string name = args.string(0, "device");
  if (name != "cpu" && name != "gpu") args.fail(0, "device", "\"cpu\" or \"gpu\"");
  mx::Device device(name == "gpu" ? mx::Device::gpu : mx::Device::cpu);
  if (!mx::is_available(device)) {
    throw std::runtime_error("setDefaultDevice: device '" + name + "' is not available in this MLX build");
  }
  mx::set_default_device(device);
  return info.Env().Undefined();
}

// deviceInfo("cpu" | "gpu"?) -> Record<string, string | number>
Napi::Value DeviceInfo(const Napi::CallbackInfo& info) {
  Args args(info, "deviceInfo");
  std::string name = args.string(0, "device", mx::default_device() == mx::Device::gpu ? "gpu" : "cpu");
  mx::Device device(name == "gpu" ? mx::Device::gpu : mx::Device::cpu);
  Napi::Object out = Napi::Object::New(info.Env());
  for (const auto& [key, value] : mx::device_info(device)) {
    if (const auto* s = std::get_if<std::string>(&value)) {
      out.Set(key, Napi::String::New(info.Env(), *s));
    } else {
      out.Set(key, Bytes(info.Env(), std::get<size_t>(value)));
    }
  }
  return out;
}

Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  mx::synchronize();
  return info.Env().Undefined();
}

// setCompileEnabled(enabled): mx::compile'd functions run uncompiled when false (no CPU JIT).
Napi::Value SetCompileEnabled(const Napi::CallbackInfo& info) {
  Args args(info, "setCompileEnabled");
  if (args.boolean(0, "enabled", true)) {
    mx::enable_compile();
  } else {
    mx::disable_compile();
  }
  return info.Env().Undefined();
}

// setErrorClasses(MlxError, MlxDisposedError): the TS classes native errors are created from.
Napi::Value SetErrorClasses(const Napi::CallbackInfo& info) {
  if (info.Length() < 2 || !info[0].IsFunction() || !info[1].IsFunction()) {
    ThrowType(info.Env(), "setErrorClasses: expected two constructors");
  }
  AddonData& data = Data(info.Env());
  data.mlxErrorCtor = Napi::Persistent(info[0].As<Napi::Function>());
  data.disposedErrorCtor = Napi::Persistent(info[1].As<Napi::Function>());
  return info.Env().Undefined();
}

}  // namespace

void RegisterRuntime(Napi::Env env, Napi::Object exports) {
  exports.Set("eval", Fn<Eval>(env, "eval"));
  exports.Set("asyncEval", Fn<AsyncEval>(env, "asyncEval"));
  exports.Set("getActiveMemory", Fn<GetActiveMemory>(env, "getActiveMemory"));
  exports.Set("getPeakMemory", Fn<GetPeakMemory>(env, "getPeakMemory"));
  exports.Set("resetPeakMemory", Fn<ResetPeakMemory>(env, "resetPeakMemory"));
  exports.Set("getCacheMemory", Fn<GetCacheMemory>(env, "getCacheMemory"));
  exports.Set("clearCache", Fn<ClearCache>(env, "clearCache"));
  exports.Set("getMemoryLimit", Fn<GetMemoryLimit>(env, "getMemoryLimit"));
  exports.Set("setCacheLimit", Fn<SetCacheLimit>(env, "setCacheLimit"));
  exports.Set("setMemoryLimit", Fn<SetMemoryLimit>(env, "setMemoryLimit"));
  exports.Set("setWiredLimit", Fn<SetWiredLimit>(env, "setWiredLimit"));
  exports.Set("metalAvailable", Fn<MetalAvailable>(env, "metalAvailable"));
  exports.Set("defaultDevice", Fn<DefaultDevice>(env, "defaultDevice"));
  exports.Set("setDefaultDevice", Fn<SetDefaultDevice>(env, "setDefaultDevice"));
  exports.Set("deviceInfo", Fn<DeviceInfo>(env, "deviceInfo"));
  exports.Set("synchronize", Fn<Synchronize>(env, "synchronize"));
  exports.Set("setCompileEnabled", Fn<SetCompileEnabled>(env, "setCompileEnabled"));
  exports.Set("setErrorClasses", Fn<SetErrorClasses>(env, "setErrorClasses"));
}

}  // namespace rmlx
