// Evaluation (sync and async), memory counters, devices, compile switch, error-class registration.
#include <memory>
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

  void Reject(const std::string& message) { deferred_.Reject(MlxErrorValue(Env(), message)); }

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
    auto deferred = Napi::Promise::Deferred::New(info.Env());
    deferred.Reject(MlxErrorValue(info.Env(), e.what()));
    return deferred.Promise();
  }
  auto* worker = new WaitWorker(info.Env(), std::move(arrays));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// schedule(arrays: MxArray[]): mx::async_eval without waiting. Work reaches each stream in call order,
// which is how a send is made to run before a receive built after it (see distributed.cc).
Napi::Value Schedule(const Napi::CallbackInfo& info) {
  Args args(info, "schedule");
  mx::async_eval(args.arrays(0, "arrays"));
  return info.Env().Undefined();
}

// evalDetached(arrays: MxArray[]) -> Promise<void>: like asyncEval, but the wait runs on a detached
// thread that does not keep the process alive (RunDetached): for work that waits on other processes,
// under a timeout of the caller's.
Napi::Value EvalDetached(const Napi::CallbackInfo& info) {
  Args args(info, "evalDetached");
  auto arrays = std::make_shared<std::vector<mx::array>>(args.arrays(0, "arrays"));
  try {
    mx::async_eval(*arrays);
  } catch (const std::exception& e) {
    auto deferred = Napi::Promise::Deferred::New(info.Env());
    deferred.Reject(MlxErrorValue(info.Env(), e.what()));
    return deferred.Promise();
  }
  return RunDetached(
      info.Env(), "runtime-mlx:evalDetached",
      [arrays] {
        for (auto& a : *arrays) a.wait();
      },
      [arrays](Napi::Env env) -> Napi::Value {
        // As in WaitWorker::OnOK: surfaces an error MLX kept in the stream; computed, so it does not block.
        std::vector<mx::array> done = std::move(*arrays);
        mx::eval(done);
        return env.Undefined();
      });
}

mx::Device DeviceArg(const Args& args, size_t i) {
  std::string name = args.string(i, "device");
  if (name != "cpu" && name != "gpu") args.fail(i, "device", "\"cpu\" or \"gpu\"");
  return mx::Device(name == "gpu" ? mx::Device::gpu : mx::Device::cpu);
}

// newStream(device) -> index: a stream of its own (its own queue and thread on the CPU), so that work
// blocked on it (a receive from a peer that is gone) holds up nothing else.
Napi::Value NewStream(const Napi::CallbackInfo& info) {
  Args args(info, "newStream");
  return Napi::Number::New(info.Env(), mx::new_stream(DeviceArg(args, 0)).index);
}

// defaultStream(device) -> index of the JS thread's default stream for that device.
Napi::Value DefaultStream(const Napi::CallbackInfo& info) {
  Args args(info, "defaultStream");
  return Napi::Number::New(info.Env(), mx::default_stream(DeviceArg(args, 0)).index);
}

// setDefaultStream(index, device): where ops built on the JS thread go from now on.
Napi::Value SetDefaultStream(const Napi::CallbackInfo& info) {
  Args args(info, "setDefaultStream");
  mx::Device device = DeviceArg(args, 1);
  int index = args.integer(0, "index");
  for (const auto& s : mx::get_streams()) {
    if (s.index == index && s.device == device) {
      mx::set_default_stream(s);
      return info.Env().Undefined();
    }
  }
  throw std::invalid_argument("setDefaultStream: no " + args.string(1, "device") + " stream " + std::to_string(index));
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
  exports.Set("schedule", Fn<Schedule>(env, "schedule"));
  exports.Set("evalDetached", Fn<EvalDetached>(env, "evalDetached"));
  exports.Set("newStream", Fn<NewStream>(env, "newStream"));
  exports.Set("defaultStream", Fn<DefaultStream>(env, "defaultStream"));
  exports.Set("setDefaultStream", Fn<SetDefaultStream>(env, "setDefaultStream"));
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
