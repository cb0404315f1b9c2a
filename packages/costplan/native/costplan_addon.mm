// MLComputePlan bridge for @anemll-qwen35/costplan (macOS 14.4+). Deliberately thin: compile a
// package, read Core ML's compute plan (per-op preferred / supported devices and estimated cost),
// and time a prediction loop on zero inputs. Everything else — matching ops to the MIL program,
// FLOPs, bytes, the report — lives in TypeScript, where it is tested on every OS.
//
// Apple APIs used (Core ML documentation):
//   +[MLModel compileModelAtURL:error:]
//   +[MLComputePlan loadContentsOfURL:configuration:completionHandler:]        (macOS 14.4)
//   MLComputePlan.modelStructure.program.functions[name].block.operations      (macOS 14.4)
//   -[MLComputePlan computeDeviceUsageForMLProgramOperation:] → preferredComputeDevice,
//     supportedComputeDevices (MLCPUComputeDevice / MLGPUComputeDevice / MLNeuralEngineComputeDevice)
//   -[MLComputePlan estimatedCostOfMLProgramOperation:] → weight
//   +[MLModel modelWithContentsOfURL:configuration:error:], MLModelConfiguration.functionName (macOS 15)
//   -[MLModel newState], -[MLModel predictionFromFeatures:usingState:error:]    (macOS 15)
// The measured loop follows anemll-profile's (ane-toolchains.md §3.2 step 7): zero inputs from each
// input's multiArrayConstraint, a state when the model declares states, warm-up, N timed runs.

#import <CoreML/CoreML.h>
#import <Foundation/Foundation.h>
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

NSString* ToNS(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

std::string FromNS(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }

std::string ErrorText(NSError* error, const std::string& what) {
  std::string msg = what;
  if (error) msg += ": " + FromNS(error.localizedDescription);
  return msg;
}

MLComputeUnits ParseUnits(Napi::Env env, const std::string& s) {
  if (s == "cpuAndNeuralEngine") return MLComputeUnitsCPUAndNeuralEngine;
  if (s == "cpuOnly") return MLComputeUnitsCPUOnly;
  if (s == "cpuAndGPU") return MLComputeUnitsCPUAndGPU;
  if (s == "all") return MLComputeUnitsAll;
  throw Napi::TypeError::New(env, "computeUnits must be cpuAndNeuralEngine, cpuOnly, cpuAndGPU or all");
}

// "ANE" | "GPU" | "CPU" | "" for a compute device.
API_AVAILABLE(macos(14.0))
std::string DeviceName(id<MLComputeDeviceProtocol> d) {
  if (!d) return "";
  if ([(id)d isKindOfClass:[MLNeuralEngineComputeDevice class]]) return "ANE";
  if ([(id)d isKindOfClass:[MLGPUComputeDevice class]]) return "GPU";
  if ([(id)d isKindOfClass:[MLCPUComputeDevice class]]) return "CPU";
  return "";
}

// ---------------------------------------------------------------------------------------------
// compile(packagePath, compiledPath) -> Promise<compiledPath>

class CompileWorker : public Napi::AsyncWorker {
 public:
  CompileWorker(Napi::Env env, std::string src, std::string dst)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), src_(std::move(src)), dst_(std::move(dst)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    @autoreleasepool {
      NSError* error = nil;
      NSURL* compiled = [MLModel compileModelAtURL:[NSURL fileURLWithPath:ToNS(src_)] error:&error];
      if (!compiled) return SetError(ErrorText(error, "Core ML could not compile " + src_));
      NSFileManager* fm = [NSFileManager defaultManager];
      NSURL* dst = [NSURL fileURLWithPath:ToNS(dst_)];
      [fm removeItemAtURL:dst error:nil];
      if (![fm moveItemAtURL:compiled toURL:dst error:&error]) {
        return SetError(ErrorText(error, "could not move the compiled model to " + dst_));
      }
    }
  }
  void OnOK() override { deferred_.Resolve(Napi::String::New(Env(), dst_)); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string src_, dst_;
};

// ---------------------------------------------------------------------------------------------
// computePlan(compiledPath, computeUnits) -> Promise<{functions: [{name, operations: [...]}]}>

struct PlanOp {
  std::string operatorName;
  std::vector<std::string> outputs;
  std::string preferred;  // "" when Core ML gives no device usage
  std::vector<std::string> supported;
  bool hasCost = false;
  double cost = 0;
};

struct PlanFunction {
  std::string name;
  std::vector<PlanOp> ops;
};

class PlanWorker : public Napi::AsyncWorker {
 public:
  PlanWorker(Napi::Env env, std::string path, MLComputeUnits units)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), path_(std::move(path)), units_(units) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    if (@available(macOS 14.4, *)) {
      @autoreleasepool {
        MLModelConfiguration* cfg = [MLModelConfiguration new];
        cfg.computeUnits = units_;
        dispatch_semaphore_t done = dispatch_semaphore_create(0);
        __block MLComputePlan* plan = nil;
        __block NSError* error = nil;
        [MLComputePlan loadContentsOfURL:[NSURL fileURLWithPath:ToNS(path_)]
                           configuration:cfg
                       completionHandler:^(MLComputePlan* p, NSError* e) {
                         plan = p;
                         error = e;
                         dispatch_semaphore_signal(done);
                       }];
        dispatch_semaphore_wait(done, DISPATCH_TIME_FOREVER);
        if (!plan) return SetError(ErrorText(error, "MLComputePlan could not load " + path_));
        MLModelStructureProgram* program = plan.modelStructure.program;
        if (!program) return SetError(path_ + " is not an ML Program (MLComputePlan has no program structure)");
        NSArray<NSString*>* names = [program.functions.allKeys sortedArrayUsingSelector:@selector(compare:)];
        for (NSString* name in names) {
          MLModelStructureProgramFunction* fn = program.functions[name];
          PlanFunction pf;
          pf.name = FromNS(name);
          for (MLModelStructureProgramOperation* op in fn.block.operations) {
            PlanOp o;
            o.operatorName = FromNS(op.operatorName);
            for (MLModelStructureProgramNamedValueType* out in op.outputs) o.outputs.push_back(FromNS(out.name));
            MLComputePlanDeviceUsage* usage = [plan computeDeviceUsageForMLProgramOperation:op];
            if (usage) {
              o.preferred = DeviceName(usage.preferredComputeDevice);
              for (id<MLComputeDeviceProtocol> d in usage.supportedComputeDevices) {
                std::string n = DeviceName(d);
                if (!n.empty()) o.supported.push_back(n);
              }
            }
            MLComputePlanCost* cost = [plan estimatedCostOfMLProgramOperation:op];
            if (cost) {
              o.hasCost = true;
              o.cost = cost.weight;
            }
            pf.ops.push_back(std::move(o));
          }
          functions_.push_back(std::move(pf));
        }
      }
    } else {
      SetError("MLComputePlan needs macOS 14.4 or later");
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array fns = Napi::Array::New(env, functions_.size());
    for (size_t i = 0; i < functions_.size(); i++) {
      const PlanFunction& pf = functions_[i];
      Napi::Array ops = Napi::Array::New(env, pf.ops.size());
      for (size_t j = 0; j < pf.ops.size(); j++) {
        const PlanOp& o = pf.ops[j];
        Napi::Object e = Napi::Object::New(env);
        e.Set("operatorName", o.operatorName);
        Napi::Array outs = Napi::Array::New(env, o.outputs.size());
        for (size_t k = 0; k < o.outputs.size(); k++) outs.Set(static_cast<uint32_t>(k), o.outputs[k]);
        e.Set("outputs", outs);
        e.Set("preferred", o.preferred.empty() ? env.Null() : static_cast<Napi::Value>(Napi::String::New(env, o.preferred)));
        Napi::Array sup = Napi::Array::New(env, o.supported.size());
        for (size_t k = 0; k < o.supported.size(); k++) sup.Set(static_cast<uint32_t>(k), o.supported[k]);
        e.Set("supported", sup);
        e.Set("cost", o.hasCost ? static_cast<Napi::Value>(Napi::Number::New(env, o.cost)) : env.Null());
        ops.Set(static_cast<uint32_t>(j), e);
      }
      Napi::Object f = Napi::Object::New(env);
      f.Set("name", pf.name);
      f.Set("operations", ops);
      fns.Set(static_cast<uint32_t>(i), f);
    }
    Napi::Object result = Napi::Object::New(env);
    result.Set("functions", fns);
    deferred_.Resolve(result);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  MLComputeUnits units_;
  std::vector<PlanFunction> functions_;
};

// ---------------------------------------------------------------------------------------------
// measure(compiledPath, computeUnits, functionName|null, warmup, runs)
//   -> Promise<{averageMs, minMs, maxMs, runs, warmup}>

class MeasureWorker : public Napi::AsyncWorker {
 public:
  MeasureWorker(Napi::Env env, std::string path, MLComputeUnits units, std::string function, int warmup, int runs)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), path_(std::move(path)), units_(units),
        function_(std::move(function)), warmup_(warmup), runs_(runs) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    @autoreleasepool {
      MLModelConfiguration* cfg = [MLModelConfiguration new];
      cfg.computeUnits = units_;
      if (!function_.empty()) {
        if (@available(macOS 15.0, *)) cfg.functionName = ToNS(function_);
        else return SetError("selecting function " + function_ + " needs macOS 15 or later");
      }
      NSError* error = nil;
      MLModel* model = [MLModel modelWithContentsOfURL:[NSURL fileURLWithPath:ToNS(path_)] configuration:cfg error:&error];
      if (!model) return SetError(ErrorText(error, "Core ML could not load " + path_));

      // Zero inputs, shaped and typed by each input's multi-array constraint.
      NSMutableDictionary<NSString*, MLFeatureValue*>* features = [NSMutableDictionary dictionary];
      NSDictionary<NSString*, MLFeatureDescription*>* inputs = model.modelDescription.inputDescriptionsByName;
      for (NSString* name in inputs) {
        MLMultiArrayConstraint* c = inputs[name].multiArrayConstraint;
        if (!c) return SetError("input " + FromNS(name) + " is not a multi-array; the measured loop feeds multi-arrays only");
        MLMultiArray* arr = [[MLMultiArray alloc] initWithShape:c.shape dataType:c.dataType error:&error];
        if (!arr) return SetError(ErrorText(error, "could not allocate input " + FromNS(name)));
        [arr getMutableBytesWithHandler:^(void* ptr, NSInteger size, NSArray<NSNumber*>* strides) {
          memset(ptr, 0, (size_t)size);
        }];
        features[name] = [MLFeatureValue featureValueWithMultiArray:arr];
      }
      MLDictionaryFeatureProvider* provider = [[MLDictionaryFeatureProvider alloc] initWithDictionary:features error:&error];
      if (!provider) return SetError(ErrorText(error, "invalid inputs"));

      id state = nil;
      if (@available(macOS 15.0, *)) {
        if (model.modelDescription.stateDescriptionsByName.count > 0) state = [model newState];
      }
      NSError* predictError = nil;
      auto predict = [&]() -> bool {
        NSError* e = nil;
        id<MLFeatureProvider> out = nil;
        if (state) {
          if (@available(macOS 15.0, *)) out = [model predictionFromFeatures:provider usingState:(MLState*)state error:&e];
        } else {
          out = [model predictionFromFeatures:provider error:&e];
        }
        predictError = e;
        return out != nil;
      };
      for (int i = 0; i < warmup_; i++) {
        @autoreleasepool {
          if (!predict()) return SetError(ErrorText(predictError, "warm-up prediction failed"));
        }
      }
      times_.reserve(runs_);
      for (int i = 0; i < runs_; i++) {
        @autoreleasepool {
          auto t0 = std::chrono::steady_clock::now();
          bool ok = predict();
          auto t1 = std::chrono::steady_clock::now();
          if (!ok) return SetError(ErrorText(predictError, "timed prediction failed"));
          times_.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      }
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    double sum = 0;
    for (double t : times_) sum += t;
    Napi::Object r = Napi::Object::New(env);
    r.Set("averageMs", times_.empty() ? 0.0 : sum / times_.size());
    r.Set("minMs", times_.empty() ? 0.0 : *std::min_element(times_.begin(), times_.end()));
    r.Set("maxMs", times_.empty() ? 0.0 : *std::max_element(times_.begin(), times_.end()));
    r.Set("runs", static_cast<double>(times_.size()));
    r.Set("warmup", static_cast<double>(warmup_));
    deferred_.Resolve(r);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  MLComputeUnits units_;
  std::string function_;
  int warmup_, runs_;
  std::vector<double> times_;
};

// ---------------------------------------------------------------------------------------------
// exports

std::string StringArg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || !info[i].IsString()) {
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string");
  }
  return info[i].As<Napi::String>();
}

Napi::Value Compile(const Napi::CallbackInfo& info) {
  auto* w = new CompileWorker(info.Env(), StringArg(info, 0, "packagePath"), StringArg(info, 1, "compiledPath"));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value ComputePlan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* w = new PlanWorker(env, StringArg(info, 0, "compiledPath"), ParseUnits(env, StringArg(info, 1, "computeUnits")));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value Measure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string fn = info.Length() > 2 && info[2].IsString() ? std::string(info[2].As<Napi::String>()) : std::string();
  int warmup = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Int32Value() : 3;
  int runs = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().Int32Value() : 20;
  if (warmup < 0 || runs < 1) throw Napi::RangeError::New(env, "measure needs warmup >= 0 and runs >= 1");
  auto* w = new MeasureWorker(env, StringArg(info, 0, "compiledPath"), ParseUnits(env, StringArg(info, 1, "computeUnits")),
                              fn, warmup, runs);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value MacOSVersion(const Napi::CallbackInfo& info) {
  NSOperatingSystemVersion v = [[NSProcessInfo processInfo] operatingSystemVersion];
  return Napi::String::New(info.Env(), std::to_string(v.majorVersion) + "." + std::to_string(v.minorVersion));
}

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  exports.Set("compile", Napi::Function::New(env, Compile));
  exports.Set("computePlan", Napi::Function::New(env, ComputePlan));
  exports.Set("measure", Napi::Function::New(env, Measure));
  exports.Set("macosVersion", Napi::Function::New(env, MacOSVersion));
  return exports;
}

}  // namespace

NODE_API_MODULE(costplan_mlcomputeplan, InitAll)
