// Compiling and loading Core ML packages, and the model wrapper JS holds (describe, stats,
// dispose, unload; newState is in state.mm, predict in predict.mm).
//
// Unloading: Core ML has no unload call (MLModel.h, MLModel+MLState.h): a model's resources go
// with the MLModel object. This addon holds it in one ModelCore, referenced by the wrapper and by
// each job queued for it, so the MLModel is released when the last of them lets go; unload()
// resolves at that moment.
//
// Apple APIs: +[MLModel compileModelAtURL:error:], +[MLModel modelWithContentsOfURL:configuration:error:],
// MLModelConfiguration.computeUnits and .functionName (macOS 15), MLModelDescription's
// input/output/stateDescriptionsByName (states: macOS 15).

#include "addon.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace coreml_addon {

// A configuration for `units` and, for a multifunction package, the function to use.
MLModelConfiguration* Configuration(MLComputeUnits units, const std::string& function, std::string* err) {
  MLModelConfiguration* cfg = [MLModelConfiguration new];
  cfg.computeUnits = units;
  if (!function.empty()) {
    if (@available(macOS 15.0, *)) {
      cfg.functionName = ToNS(function);
    } else {
      *err = "selecting function " + function + " of a multifunction package needs macOS 15 or later";
      return nil;
    }
  }
  return cfg;
}

// +[MLModel modelWithContentsOfURL:configuration:error:] for `units` and `function`.
MLModel* LoadModel(const std::string& path, MLComputeUnits units, const std::string& function, std::string* err) {
  MLModelConfiguration* cfg = Configuration(units, function, err);
  if (!cfg) return nil;
  NSError* error = nil;
  MLModel* model = [MLModel modelWithContentsOfURL:[NSURL fileURLWithPath:ToNS(path)] configuration:cfg error:&error];
  if (!model) *err = ErrorText(error, "Core ML could not load " + path);
  return model;
}

// True for a model input that is a Core ML state (listed among inputs on some OS versions).
bool IsStateFeature(MLModel* model, NSString* name, MLFeatureDescription* d) {
  if (@available(macOS 15.0, *)) {
    return d.type == MLFeatureTypeState || model.modelDescription.stateDescriptionsByName[name] != nil;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// compile and load

// compile(packagePath, compiledPath) → Promise<compiledPath>
// Compiles into a temporary folder beside compiledPath, then renames it into place. When another
// process got there first, its copy stands and this one is dropped: no failure, no half folder.
Napi::Value Compile(const Napi::CallbackInfo& info) {
  const std::string src = StringArg(info, 0, "packagePath"), dst = StringArg(info, 1, "compiledPath");
  return Run(info.Env(), WorkQueue(), "compile", [src, dst](Job& job) {
    NSError* error = nil;
    NSURL* compiled = [MLModel compileModelAtURL:[NSURL fileURLWithPath:ToNS(src)] error:&error];
    if (!compiled) {
      job.error = ErrorText(error, "Core ML could not compile " + src);
      return;
    }
    NSFileManager* fm = [NSFileManager defaultManager];
    NSURL* target = [NSURL fileURLWithPath:ToNS(dst)];
    NSURL* parent = [target URLByDeletingLastPathComponent];
    if (parent && ![fm createDirectoryAtURL:parent withIntermediateDirectories:YES attributes:nil error:&error]) {
      job.error = ErrorText(error, "could not create " + FromNS(parent.path));
      return;
    }
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".partial-%d-%u", getpid(), arc4random());
    const std::string tmp = dst + suffix;
    NSURL* tmpURL = [NSURL fileURLWithPath:ToNS(tmp)];
    if (![fm moveItemAtURL:compiled toURL:tmpURL error:&error]) {
      job.error = ErrorText(error, "could not move the compiled model next to " + dst);
      return;
    }
    if (rename(tmp.c_str(), dst.c_str()) != 0) {
      const int e = errno;
      [fm removeItemAtURL:tmpURL error:nil];
      if (!((e == EEXIST || e == ENOTEMPTY) && [fm fileExistsAtPath:ToNS(dst)])) {
        job.error = "could not rename the compiled model to " + dst + ": " + strerror(e);
        return;
      }
    }
    job.value = [dst](Napi::Env env) -> Napi::Value { return Napi::String::New(env, dst); };
  });
}

// load(compiledPath, computeUnits, functionName?) → Promise<CoreMLModel>
Napi::Value Load(const Napi::CallbackInfo& info) {
  const ModelArgs args = ModelArgsOf(info);
  return Run(info.Env(), WorkQueue(), "load", [args](Job& job) {
    std::string err;
    MLModel* model = LoadModel(args.path, args.units, args.function, &err);
    if (!model) {
      job.error = err;
      return;
    }
    auto core = std::make_shared<ModelCore>();
    core->model = model;
    core->queue = dispatch_queue_create("anemll-qwen35.coreml.model", DISPATCH_QUEUE_SERIAL);
    MLModelDescription* md = model.modelDescription;
    for (NSString* name in md.inputDescriptionsByName) {
      MLFeatureDescription* d = md.inputDescriptionsByName[name];
      if (!IsStateFeature(model, name, d) && d.multiArrayConstraint) core->inputShapes[FromNS(name)] = ToVec(d.multiArrayConstraint.shape);
    }
    for (NSString* name in md.outputDescriptionsByName) {
      MLMultiArrayConstraint* c = md.outputDescriptionsByName[name].multiArrayConstraint;
      DType dt;
      if (!c || !DTypeOf(c.dataType, &dt) || Count(ToVec(c.shape)) == 0) continue;
      core->outputShapes[FromNS(name)] = ToVec(c.shape);
      core->outputTypes[FromNS(name)] = dt;
    }
    job.value = [core](Napi::Env env) -> Napi::Value {
      Napi::Object obj = static_cast<AddonData*>(env.GetInstanceData<AddonData>())->model.New({});
      ModelWrap::Unwrap(obj)->Attach(core);
      return obj;
    };
  });
}

// ---------------------------------------------------------------------------------------------
// The model wrapper

Napi::Function ModelWrap::Define(Napi::Env env) {
  return DefineClass(env, "CoreMLModel", {
                                             InstanceMethod("describe", &ModelWrap::Describe),
                                             InstanceMethod("newState", &ModelWrap::NewState),
                                             InstanceMethod("predict", &ModelWrap::Predict),
                                             InstanceMethod("stats", &ModelWrap::GetStats),
                                             InstanceMethod("dispose", &ModelWrap::Dispose),
                                             InstanceMethod("unload", &ModelWrap::Unload),
                                         });
}

// The last reference to a model may drop on any thread (a finished job's block): release the
// MLModel inside a pool of its own, then say so to an unload() waiting on `loaded`.
ModelCore::~ModelCore() {
  @autoreleasepool {
    model = nil;
    hostBackings = nil;
  }
  dispatch_group_leave(loaded);
}

void ModelWrap::Release() {
  if (!core_) return;
  released_ = core_;
  dispatch_queue_t queue = core_->queue;
  ReleaseOn(queue, std::move(core_));
}

std::shared_ptr<ModelCore> ModelWrap::Live(Napi::Env env) const {
  if (!core_) throw Napi::Error::New(env, "Core ML model used after dispose() or unload()");
  return core_;
}

Napi::Value ModelWrap::GetStats(const Napi::CallbackInfo& info) {
  std::shared_ptr<ModelCore> core = Live(info.Env());
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("predictions", static_cast<double>(core->stats.predictions.load()));
  o.Set("bytesIn", static_cast<double>(core->stats.bytesIn.load()));
  o.Set("bytesOut", static_cast<double>(core->stats.bytesOut.load()));
  o.Set("bytesKept", static_cast<double>(core->stats.bytesKept.load()));
  o.Set("backingMisses", static_cast<double>(core->stats.backingMisses.load()));
  return o;
}

// Never waits: predictions already queued keep their own references and finish.
Napi::Value ModelWrap::Dispose(const Napi::CallbackInfo& info) {
  Release();
  return info.Env().Undefined();
}

// unload() → Promise<void>: dispose(), then settles once this addon holds the MLModel no more
// (the predictions asked for before have finished and dropped it). Also after dispose().
Napi::Value ModelWrap::Unload(const Napi::CallbackInfo& info) {
  std::shared_ptr<ModelCore> core = core_ ? core_ : released_.lock();
  Release();
  dispatch_group_t loaded = core ? core->loaded : dispatch_group_create();  // an empty group: already released
  if (core) ReleaseOn(core->queue, std::move(core));
  return Run(info.Env(), WorkQueue(), "unload", [](Job& job) { job.value = [](Napi::Env env) { return env.Undefined(); }; },
             loaded);
}

namespace {

Napi::Object DescribeFeature(Napi::Env env, NSString* name, NSArray<NSNumber*>* shape, MLMultiArrayDataType dt) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", FromNS(name));
  Napi::Array s = Napi::Array::New(env, shape.count);
  for (NSUInteger i = 0; i < shape.count; i++) s.Set(static_cast<uint32_t>(i), shape[i].doubleValue);
  o.Set("shape", s);
  o.Set("dtype", DTypeText(dt));
  return o;
}

Napi::Value DescribeModel(Napi::Env env, MLModel* model) {
  MLModelDescription* md = model.modelDescription;
  Napi::Array inputs = Napi::Array::New(env), outputs = Napi::Array::New(env), states = Napi::Array::New(env);
  uint32_t i = 0;
  for (NSString* name in md.inputDescriptionsByName) {
    MLFeatureDescription* d = md.inputDescriptionsByName[name];
    if (!IsStateFeature(model, name, d) && d.multiArrayConstraint) {
      inputs.Set(i++, DescribeFeature(env, name, d.multiArrayConstraint.shape, d.multiArrayConstraint.dataType));
    }
  }
  i = 0;
  for (NSString* name in md.outputDescriptionsByName) {
    MLMultiArrayConstraint* c = md.outputDescriptionsByName[name].multiArrayConstraint;
    if (c) outputs.Set(i++, DescribeFeature(env, name, c.shape, c.dataType));
  }
  if (@available(macOS 15.0, *)) {
    i = 0;
    for (NSString* name in md.stateDescriptionsByName) {
      MLStateConstraint* c = md.stateDescriptionsByName[name].stateConstraint;
      if (c) states.Set(i++, DescribeFeature(env, name, c.bufferShape, c.dataType));
    }
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("inputs", inputs);
  out.Set("outputs", outputs);
  out.Set("states", states);
  return out;
}

}  // namespace

Napi::Value ModelWrap::Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<ModelCore> core = Live(env);
  @try {
    return DescribeModel(env, core->model);
  } @catch (NSException* e) {
    throw Napi::Error::New(env, "Core ML raised " + FromNS(e.name) + " describing the model: " + FromNS(e.reason));
  }
}

}  // namespace coreml_addon
