// Core ML bridge for runtime-ane (macOS 15+). Deliberately thin: compile, load, describe, state,
// predict. Every decision about what to feed the models lives in TypeScript, where it is tested
// against the reference backend on every OS.
//
// Apple APIs used (Core ML documentation): +[MLModel compileModelAtURL:error:],
// +[MLModel modelWithContentsOfURL:configuration:error:], MLModelConfiguration.computeUnits /
// .functionName (macOS 15), -[MLModel newState] (macOS 15),
// -[MLModel predictionFromFeatures:usingState:options:error:] (macOS 15),
// -[MLState getMultiArrayForStateNamed:handler:] (macOS 15), MLPredictionOptions.outputBackings,
// -[MLMultiArray initWithPixelBuffer:shape:] (IOSurface-backed fp16 outputs the ANE can write).

#import <CoreML/CoreML.h>
#import <CoreVideo/CoreVideo.h>
#import <Foundation/Foundation.h>
#include <napi.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

NSString* ToNS(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

std::string FromNS(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }

std::string ErrorText(NSError* error, const char* what) {
  std::string msg = what;
  if (error) msg += ": " + FromNS(error.localizedDescription);
  return msg;
}

const char* DTypeName(MLMultiArrayDataType t) {
  switch (t) {
    case MLMultiArrayDataTypeFloat16: return "fp16";
    case MLMultiArrayDataTypeFloat32: return "fp32";
    case MLMultiArrayDataTypeInt32: return "int32";
    case MLMultiArrayDataTypeDouble: return "fp64";
    default: return "unknown";
  }
}

size_t DTypeSize(MLMultiArrayDataType t) {
  switch (t) {
    case MLMultiArrayDataTypeFloat16: return 2;
    case MLMultiArrayDataTypeFloat32: return 4;
    case MLMultiArrayDataTypeInt32: return 4;
    case MLMultiArrayDataTypeDouble: return 8;
    default: return 0;
  }
}

bool ParseDType(const std::string& s, MLMultiArrayDataType* out) {
  if (s == "fp16") *out = MLMultiArrayDataTypeFloat16;
  else if (s == "fp32") *out = MLMultiArrayDataTypeFloat32;
  else if (s == "int32") *out = MLMultiArrayDataTypeInt32;
  else return false;
  return true;
}

// Copies between a dense row-major buffer and a (possibly strided) multi-array.
void StridedCopy(uint8_t* arr, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 uint8_t* dense, size_t elem, bool toArray) {
  size_t rank = shape.size();
  if (rank == 0) {
    if (toArray) memcpy(arr, dense, elem); else memcpy(dense, arr, elem);
    return;
  }
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; d++) off += idx[d] * strides[d];
    if (toArray) memcpy(arr + off * elem, dense + i * elem, elem);
    else memcpy(dense + i * elem, arr + off * elem, elem);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

std::vector<int64_t> ToVec(NSArray<NSNumber*>* a) {
  std::vector<int64_t> v;
  for (NSNumber* n in a) v.push_back(n.longLongValue);
  return v;
}

Napi::Object DescribeFeature(Napi::Env env, NSString* name, NSArray<NSNumber*>* shape, MLMultiArrayDataType dt) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", FromNS(name));
  Napi::Array s = Napi::Array::New(env, shape.count);
  for (NSUInteger i = 0; i < shape.count; i++) s.Set(static_cast<uint32_t>(i), shape[i].doubleValue);
  o.Set("shape", s);
  o.Set("dtype", DTypeName(dt));
  return o;
}

// A pending input or output tensor held outside JS while a prediction runs.
struct Buffer {
  std::string name;
  MLMultiArrayDataType dtype = MLMultiArrayDataTypeFloat16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

class StateWrap;

// ---------------------------------------------------------------------------------------------
// Model

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::FunctionReference ctor;

  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function f = DefineClass(env, "CoreMLModel", {
      InstanceMethod("describe", &ModelWrap::Describe),
      InstanceMethod("newState", &ModelWrap::NewState),
      InstanceMethod("predict", &ModelWrap::Predict),
      InstanceMethod("dispose", &ModelWrap::Dispose),
    });
    ctor = Napi::Persistent(f);
    ctor.SuppressDestruct();
    exports.Set("CoreMLModel", f);
  }

  ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {}
  ~ModelWrap() { Release(); }

  void Attach(MLModel* model) {
    model_ = model;
    queue_ = dispatch_queue_create("anemll-qwen35.coreml.predict", DISPATCH_QUEUE_SERIAL);
    // Preallocate IOSurface-backed fp16 output buffers: the ANE can write into them directly.
    NSMutableDictionary* backings = [NSMutableDictionary dictionary];
    for (NSString* name in model.modelDescription.outputDescriptionsByName) {
      MLFeatureDescription* d = model.modelDescription.outputDescriptionsByName[name];
      MLMultiArrayConstraint* c = d.multiArrayConstraint;
      if (!c || c.dataType != MLMultiArrayDataTypeFloat16 || c.shape.count == 0) continue;
      int64_t width = c.shape.lastObject.longLongValue, height = 1;
      for (NSUInteger i = 0; i + 1 < c.shape.count; i++) height *= c.shape[i].longLongValue;
      CVPixelBufferRef pb = nullptr;
      NSDictionary* attrs = @{(id)kCVPixelBufferIOSurfacePropertiesKey : @{}};
      if (CVPixelBufferCreate(kCFAllocatorDefault, (size_t)width, (size_t)height, kCVPixelFormatType_OneComponent16Half,
                              (__bridge CFDictionaryRef)attrs, &pb) != kCVReturnSuccess) {
        continue;  // the prediction then allocates its own output; correct, just not zero-copy
      }
      MLMultiArray* arr = [[MLMultiArray alloc] initWithPixelBuffer:pb shape:c.shape];
      CVPixelBufferRelease(pb);
      if (arr) backings[name] = arr;
    }
    backings_ = backings;
  }

  MLModel* Model() const { return model_; }
  dispatch_queue_t Queue() const { return queue_; }
  NSDictionary* Backings() const { return backings_; }
  bool Disposed() const { return model_ == nil; }

 private:
  void Release() {
    model_ = nil;
    backings_ = nil;
    queue_ = nil;
  }

  Napi::Value Describe(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (Disposed()) throw Napi::Error::New(env, "Core ML model used after dispose()");
    MLModelDescription* md = model_.modelDescription;
    Napi::Object out = Napi::Object::New(env);
    Napi::Array inputs = Napi::Array::New(env), outputs = Napi::Array::New(env), states = Napi::Array::New(env);
    uint32_t i = 0;
    for (NSString* name in md.inputDescriptionsByName) {
      MLMultiArrayConstraint* c = md.inputDescriptionsByName[name].multiArrayConstraint;
      if (c) inputs.Set(i++, DescribeFeature(env, name, c.shape, c.dataType));
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
    out.Set("inputs", inputs);
    out.Set("outputs", outputs);
    out.Set("states", states);
    return out;
  }

  Napi::Value NewState(const Napi::CallbackInfo& info);
  Napi::Value Predict(const Napi::CallbackInfo& info);

  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (queue_) dispatch_sync(queue_, ^{});  // let an in-flight prediction finish first
    Release();
    return info.Env().Undefined();
  }

  MLModel* model_ = nil;
  dispatch_queue_t queue_ = nil;
  NSDictionary* backings_ = nil;
};

Napi::FunctionReference ModelWrap::ctor;

// ---------------------------------------------------------------------------------------------
// State

class StateWrap : public Napi::ObjectWrap<StateWrap> {
 public:
  static Napi::FunctionReference ctor;

  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function f = DefineClass(env, "CoreMLState", {
      InstanceMethod("reset", &StateWrap::Reset),
    });
    ctor = Napi::Persistent(f);
    ctor.SuppressDestruct();
    exports.Set("CoreMLState", f);
  }

  StateWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StateWrap>(info) {}

  void Attach(id state, NSArray<NSString*>* names, dispatch_queue_t queue) {
    state_ = state;
    names_ = names;
    queue_ = queue;
  }
  id State() const { return state_; }

 private:
  // Zeroes every buffer of the state, on the model's serial queue so no prediction is in flight.
  Napi::Value Reset(const Napi::CallbackInfo& info) {
    if (@available(macOS 15.0, *)) {
      MLState* st = (MLState*)state_;
      NSArray<NSString*>* names = names_;
      dispatch_sync(queue_, ^{
        for (NSString* name in names) {
          [st getMultiArrayForStateNamed:name handler:^(MLMultiArray* buffer) {
            [buffer getMutableBytesWithHandler:^(void* ptr, NSInteger size, NSArray<NSNumber*>* strides) {
              memset(ptr, 0, (size_t)size);
            }];
          }];
        }
      });
    }
    return info.Env().Undefined();
  }

  id state_ = nil;
  NSArray<NSString*>* names_ = nil;
  dispatch_queue_t queue_ = nil;
};

Napi::FunctionReference StateWrap::ctor;

Napi::Value ModelWrap::NewState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (Disposed()) throw Napi::Error::New(env, "Core ML model used after dispose()");
  if (@available(macOS 15.0, *)) {
    MLState* st = [model_ newState];
    Napi::Object obj = StateWrap::ctor.New({});
    StateWrap::Unwrap(obj)->Attach(st, model_.modelDescription.stateDescriptionsByName.allKeys, queue_);
    return obj;
  }
  throw Napi::Error::New(env, "MLState needs macOS 15 or later");
}

// ---------------------------------------------------------------------------------------------
// Async work: compile, load, predict. Execute() runs on a libuv worker thread; predictions are
// additionally serialised on the model's own dispatch queue.

class CompileWorker : public Napi::AsyncWorker {
 public:
  CompileWorker(Napi::Env env, std::string src, std::string dst)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), src_(std::move(src)), dst_(std::move(dst)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    @autoreleasepool {
      NSError* error = nil;
      NSURL* compiled = [MLModel compileModelAtURL:[NSURL fileURLWithPath:ToNS(src_)] error:&error];
      if (!compiled) return SetError(ErrorText(error, "Core ML could not compile the package"));
      NSFileManager* fm = [NSFileManager defaultManager];
      NSURL* dst = [NSURL fileURLWithPath:ToNS(dst_)];
      [fm removeItemAtURL:dst error:nil];
      if (![fm moveItemAtURL:compiled toURL:dst error:&error]) {
        return SetError(ErrorText(error, "could not move the compiled model into the cache"));
      }
    }
  }
  void OnOK() override { deferred_.Resolve(Napi::String::New(Env(), dst_)); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string src_, dst_;
};

class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, std::string path, MLComputeUnits units, std::string function)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), path_(std::move(path)), units_(units),
        function_(std::move(function)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    @autoreleasepool {
      MLModelConfiguration* cfg = [MLModelConfiguration new];
      cfg.computeUnits = units_;
      if (!function_.empty()) {
        if (@available(macOS 15.0, *)) cfg.functionName = ToNS(function_);
        else return SetError("selecting a function of a multifunction model needs macOS 15 or later");
      }
      NSError* error = nil;
      model_ = [MLModel modelWithContentsOfURL:[NSURL fileURLWithPath:ToNS(path_)] configuration:cfg error:&error];
      if (!model_) SetError(ErrorText(error, "Core ML could not load the model"));
    }
  }
  void OnOK() override {
    Napi::Object obj = ModelWrap::ctor.New({});
    ModelWrap::Unwrap(obj)->Attach(model_);
    deferred_.Resolve(obj);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  MLComputeUnits units_;
  std::string function_;
  MLModel* model_ = nil;
};

class PredictWorker : public Napi::AsyncWorker {
 public:
  PredictWorker(Napi::Env env, ModelWrap* model, Napi::Object modelRef, id state, std::vector<Buffer> inputs)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), model_(model), state_(state),
        inputs_(std::move(inputs)) {
    modelRef_ = Napi::Persistent(modelRef);  // keeps the model alive while the prediction runs
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    if (model_->Disposed()) return SetError("Core ML model disposed before the prediction ran");
    __block std::string failure;
    MLModel* model = model_->Model();
    NSDictionary* backings = model_->Backings();
    id state = state_;
    std::vector<Buffer>* inputs = &inputs_;
    std::vector<Buffer>* outputs = &outputs_;
    dispatch_sync(model_->Queue(), ^{
      @autoreleasepool {
        NSError* error = nil;
        NSMutableDictionary* features = [NSMutableDictionary dictionary];
        for (Buffer& in : *inputs) {
          NSMutableArray* shape = [NSMutableArray array];
          for (auto d : in.shape) [shape addObject:@(d)];
          MLMultiArray* arr = [[MLMultiArray alloc] initWithShape:shape dataType:in.dtype error:&error];
          if (!arr) { failure = ErrorText(error, ("could not allocate input " + in.name).c_str()); return; }
          std::vector<int64_t> strides = ToVec(arr.strides);
          std::vector<int64_t> shape_v = in.shape;
          uint8_t* dense = in.bytes.data();
          size_t elem = DTypeSize(in.dtype);
          [arr getMutableBytesWithHandler:^(void* ptr, NSInteger size, NSArray<NSNumber*>* s) {
            StridedCopy((uint8_t*)ptr, shape_v, strides, dense, elem, true);
          }];
          features[ToNS(in.name)] = [MLFeatureValue featureValueWithMultiArray:arr];
        }
        MLDictionaryFeatureProvider* provider = [[MLDictionaryFeatureProvider alloc] initWithDictionary:features error:&error];
        if (!provider) { failure = ErrorText(error, "invalid inputs"); return; }
        MLPredictionOptions* opts = [MLPredictionOptions new];
        if (backings.count) opts.outputBackings = backings;
        id<MLFeatureProvider> result = nil;
        if (state) {
          if (@available(macOS 15.0, *)) {
            result = [model predictionFromFeatures:provider usingState:(MLState*)state options:opts error:&error];
          }
        } else {
          result = [model predictionFromFeatures:provider options:opts error:&error];
        }
        if (!result) { failure = ErrorText(error, "Core ML prediction failed"); return; }
        for (NSString* name in result.featureNames) {
          MLMultiArray* arr = [result featureValueForName:name].multiArrayValue;
          if (!arr) continue;
          Buffer out;
          out.name = FromNS(name);
          out.dtype = arr.dataType;
          out.shape = ToVec(arr.shape);
          size_t elem = DTypeSize(arr.dataType);
          int64_t n = 1;
          for (auto d : out.shape) n *= d;
          out.bytes.resize((size_t)n * elem);
          std::vector<int64_t> strides = ToVec(arr.strides);
          std::vector<int64_t> shape_v = out.shape;
          uint8_t* dense = out.bytes.data();
          // Pixel-buffer-backed arrays need their base address locked while read.
          CVPixelBufferRef pb = arr.pixelBuffer;
          if (pb) CVPixelBufferLockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
          [arr getBytesWithHandler:^(const void* ptr, NSInteger size) {
            StridedCopy((uint8_t*)ptr, shape_v, strides, dense, elem, false);
          }];
          if (pb) CVPixelBufferUnlockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
          outputs->push_back(std::move(out));
        }
      }
    });
    if (!failure.empty()) SetError(failure);
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object result = Napi::Object::New(env);
    for (Buffer& out : outputs_) {
      Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, out.bytes.size());
      memcpy(ab.Data(), out.bytes.data(), out.bytes.size());
      size_t n = out.bytes.size() / DTypeSize(out.dtype);
      Napi::Value view;
      if (out.dtype == MLMultiArrayDataTypeFloat16) view = Napi::Uint16Array::New(env, n, ab, 0);
      else if (out.dtype == MLMultiArrayDataTypeFloat32) view = Napi::Float32Array::New(env, n, ab, 0);
      else if (out.dtype == MLMultiArrayDataTypeInt32) view = Napi::Int32Array::New(env, n, ab, 0);
      else view = Napi::Float64Array::New(env, n, ab, 0);
      Napi::Object entry = Napi::Object::New(env);
      entry.Set("data", view);
      entry.Set("dtype", DTypeName(out.dtype));
      Napi::Array shape = Napi::Array::New(env, out.shape.size());
      for (size_t i = 0; i < out.shape.size(); i++) shape.Set(static_cast<uint32_t>(i), static_cast<double>(out.shape[i]));
      entry.Set("shape", shape);
      result.Set(out.name, entry);
    }
    deferred_.Resolve(result);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  ModelWrap* model_;
  Napi::ObjectReference modelRef_;
  id state_;
  std::vector<Buffer> inputs_;
  std::vector<Buffer> outputs_;
};

// predict(inputs: {name: {data: TypedArray, shape: number[], dtype: "fp16"|"fp32"|"int32"}}, state?)
Napi::Value ModelWrap::Predict(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (Disposed()) throw Napi::Error::New(env, "Core ML model used after dispose()");
  if (!info[0].IsObject()) throw Napi::TypeError::New(env, "predict(inputs, state?) needs an inputs object");
  Napi::Object in = info[0].As<Napi::Object>();
  std::vector<Buffer> buffers;
  Napi::Array names = in.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); i++) {
    std::string name = names.Get(i).As<Napi::String>();
    Napi::Object t = in.Get(name).As<Napi::Object>();
    Buffer b;
    b.name = name;
    if (!ParseDType(t.Get("dtype").As<Napi::String>(), &b.dtype)) {
      throw Napi::TypeError::New(env, "input " + name + ": dtype must be fp16, fp32 or int32");
    }
    Napi::Array shape = t.Get("shape").As<Napi::Array>();
    int64_t n = 1;
    for (uint32_t d = 0; d < shape.Length(); d++) {
      b.shape.push_back(shape.Get(d).As<Napi::Number>().Int64Value());
      n *= b.shape.back();
    }
    Napi::TypedArray data = t.Get("data").As<Napi::TypedArray>();
    size_t bytes = (size_t)n * DTypeSize(b.dtype);
    if (data.ByteLength() != bytes) {
      throw Napi::RangeError::New(env, "input " + name + ": expected " + std::to_string(bytes) + " bytes, got " +
                                           std::to_string(data.ByteLength()));
    }
    const uint8_t* src = static_cast<const uint8_t*>(data.ArrayBuffer().Data()) + data.ByteOffset();
    b.bytes.assign(src, src + bytes);  // copied: the JS array may change while Core ML runs
    buffers.push_back(std::move(b));
  }
  id state = nil;
  if (info.Length() > 1 && info[1].IsObject()) state = StateWrap::Unwrap(info[1].As<Napi::Object>())->State();
  auto* worker = new PredictWorker(env, this, Value(), state, std::move(buffers));
  Napi::Promise p = worker->Promise();
  worker->Queue();
  return p;
}

MLComputeUnits ParseUnits(Napi::Env env, const std::string& s) {
  if (s == "cpuAndNeuralEngine") return MLComputeUnitsCPUAndNeuralEngine;
  if (s == "cpuOnly") return MLComputeUnitsCPUOnly;
  if (s == "cpuAndGPU") return MLComputeUnitsCPUAndGPU;
  if (s == "all") return MLComputeUnitsAll;
  throw Napi::TypeError::New(env, "computeUnits must be cpuAndNeuralEngine, cpuOnly, cpuAndGPU or all");
}

// compile(packagePath, compiledPath) -> Promise<compiledPath>
Napi::Value Compile(const Napi::CallbackInfo& info) {
  auto* w = new CompileWorker(info.Env(), info[0].As<Napi::String>(), info[1].As<Napi::String>());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// load(compiledPath, computeUnits, functionName) -> Promise<CoreMLModel>
Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string fn = info.Length() > 2 && info[2].IsString() ? std::string(info[2].As<Napi::String>()) : std::string();
  auto* w = new LoadWorker(env, info[0].As<Napi::String>(), ParseUnits(env, info[1].As<Napi::String>()), fn);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value MacOSVersion(const Napi::CallbackInfo& info) {
  NSOperatingSystemVersion v = [[NSProcessInfo processInfo] operatingSystemVersion];
  return Napi::String::New(info.Env(), std::to_string(v.majorVersion) + "." + std::to_string(v.minorVersion));
}

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  ModelWrap::Init(env, exports);
  StateWrap::Init(env, exports);
  exports.Set("compile", Napi::Function::New(env, Compile));
  exports.Set("load", Napi::Function::New(env, Load));
  exports.Set("macosVersion", Napi::Function::New(env, MacOSVersion));
  return exports;
}

}  // namespace

NODE_API_MODULE(runtime_ane_coreml, InitAll)
