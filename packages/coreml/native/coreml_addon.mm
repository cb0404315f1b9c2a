// The one Core ML addon of anemll-qwen35 (macOS). runtime-ane runs chains through it (compile,
// load, state, predict: macOS 15 for MLState and multifunction packages); costplan reads Core ML's
// compute plan and times a prediction loop (MLComputePlan: macOS 14.4). Deliberately thin: what
// to feed a model is decided in TypeScript, where it is tested against the reference backend on
// every OS.
//
// How it stays safe and fast:
// - Every piece of work runs on a GCD queue inside @autoreleasepool and an Objective-C exception
//   guard; its result goes back to JS through a thread-safe function. The JS thread never waits.
// - A job holds strong references to the model, state and buffers it uses from the moment it is
//   queued. dispose() only drops the wrapper's references, on the model's queue, after the work
//   queued before it.
// - Predictions of one model are serialised (a mutex); everything done to one state (predictions,
//   resets) runs on the state's serial queue in the order it was asked for, so a state may be
//   shared by several functions of one package.
// - The buffers a package carries between steps stay on this side: a carried buffer is a pair of
//   IOSurface-backed arrays used in turn (the outputs of step t, written through outputBackings, are
//   the inputs of step t+1); a KV cache takes each step's rows by copy. JS sees only the rest.
//
// This file registers the module and holds what every function shares: argument parsing and the
// async job that runs work off the JS thread. The rest, by concern, is listed in addon.h.

#include "addon.h"

namespace coreml_addon {

// ---------------------------------------------------------------------------------------------
// Arguments

MLComputeUnits ParseUnits(Napi::Env env, const std::string& s) {
  if (s == "cpuAndNeuralEngine") return MLComputeUnitsCPUAndNeuralEngine;
  if (s == "cpuOnly") return MLComputeUnitsCPUOnly;
  if (s == "cpuAndGPU") return MLComputeUnitsCPUAndGPU;
  if (s == "all") return MLComputeUnitsAll;
  throw Napi::TypeError::New(env, "computeUnits must be cpuAndNeuralEngine, cpuOnly, cpuAndGPU or all");
}

std::string StringArg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || !info[i].IsString()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string");
  return info[i].As<Napi::String>();
}

// The optional string argument `i` ("" when absent, null or undefined).
std::string OptionalStringArg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || info[i].IsNull() || info[i].IsUndefined()) return std::string();
  if (!info[i].IsString()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string or null");
  return info[i].As<Napi::String>();
}

ModelArgs ModelArgsOf(const Napi::CallbackInfo& info) {
  ModelArgs a;
  a.path = StringArg(info, 0, "compiledPath");
  a.units = ParseUnits(info.Env(), StringArg(info, 1, "computeUnits"));
  a.function = OptionalStringArg(info, 2, "functionName");
  return a;
}

std::vector<int64_t> ShapeArg(Napi::Env env, Napi::Value v, const std::string& what) {
  if (!v.IsArray()) throw Napi::TypeError::New(env, what + ": shape must be an array of integers");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<int64_t> shape;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value d = a.Get(i);
    if (!d.IsNumber()) throw Napi::TypeError::New(env, what + ": shape must be an array of integers");
    const double x = d.As<Napi::Number>().DoubleValue();
    if (!(x >= 1 && x <= 1e9) || x != static_cast<double>(static_cast<int64_t>(x))) {
      throw Napi::RangeError::New(env, what + ": every dimension must be an integer > 0");
    }
    shape.push_back(static_cast<int64_t>(x));
  }
  if (Count(shape) == 0) throw Napi::RangeError::New(env, what + ": shape " + ShapeText(shape) + " is too large");
  return shape;
}

// ---------------------------------------------------------------------------------------------
// Async jobs: work on a GCD queue, the promise settled on the JS thread.

namespace {

void SettleJob(Napi::Env env, Napi::Function, std::nullptr_t*, Job* job) {
  std::unique_ptr<Job> own(job);
  if (env == nullptr) return;  // the environment is going away
  if (!job->error.empty() || !job->value) {
    job->deferred.Reject(Napi::Error::New(env, job->error.empty() ? "Core ML work ended without a result" : job->error).Value());
    return;
  }
  try {
    job->deferred.Resolve(job->value(env));
  } catch (const Napi::Error& e) {
    job->deferred.Reject(e.Value());
  }
}

using Settler = Napi::TypedThreadSafeFunction<std::nullptr_t, Job, SettleJob>;

}  // namespace

Napi::Promise Run(Napi::Env env, dispatch_queue_t queue, const char* what, std::function<void(Job&)> work,
                  dispatch_group_t after) {
  auto* job = new Job(env);
  Napi::Promise promise = job->deferred.Promise();
  Settler settle = Settler::New(env, what, 0, 1);
  std::string label = what;
  dispatch_block_t task = ^{
    @autoreleasepool {
      try {
        @try {
          work(*job);
        } @catch (NSException* e) {
          job->error = "Core ML raised " + FromNS(e.name) + " during " + label + ": " + FromNS(e.reason);
        }
      } catch (const std::exception& e) {
        job->error = label + " failed: " + e.what();
      }
    }
    if (settle.BlockingCall(job) != napi_ok) delete job;  // the environment is going away
    settle.Release();
  };
  if (after) dispatch_group_notify(after, queue, task);
  else dispatch_async(queue, task);
  return promise;
}

dispatch_queue_t WorkQueue() { return dispatch_get_global_queue(QOS_CLASS_USER_INITIATED, 0); }

// ---------------------------------------------------------------------------------------------
// The module

namespace {

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  Napi::Function model = ModelWrap::Define(env), state = StateWrap::Define(env);
  data->model = Napi::Persistent(model);
  data->state = Napi::Persistent(state);
  env.SetInstanceData<AddonData>(data);
  exports.Set("CoreMLModel", model);
  exports.Set("CoreMLState", state);
  exports.Set("compile", Napi::Function::New(env, Compile));
  exports.Set("load", Napi::Function::New(env, Load));
  exports.Set("computePlan", Napi::Function::New(env, ComputePlan));
  exports.Set("measure", Napi::Function::New(env, Measure));
  exports.Set("computeDevices", Napi::Function::New(env, ComputeDevices));
  exports.Set("memoryFootprint", Napi::Function::New(env, MemoryFootprint));
  exports.Set("macosVersion", Napi::Function::New(env, MacOSVersion));
  return exports;
}

}  // namespace

}  // namespace coreml_addon

using coreml_addon::InitAll;
NODE_API_MODULE(anemll_qwen35_coreml, InitAll)
