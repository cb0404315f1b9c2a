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
// Apple APIs used (Core ML / CoreVideo documentation): +[MLModel compileModelAtURL:error:],
// +[MLModel modelWithContentsOfURL:configuration:error:], MLModelConfiguration.computeUnits and
// .functionName (macOS 15), -[MLModel newState] and
// -[MLModel predictionFromFeatures:usingState:options:error:] (macOS 15),
// -[MLState getMultiArrayForStateNamed:handler:] (macOS 15), MLPredictionOptions.outputBackings,
// -[MLMultiArray initWithPixelBuffer:shape:] over CVPixelBufferCreate with
// kCVPixelBufferIOSurfacePropertiesKey (fp16 arrays the ANE can write), -[MLMultiArray
// getBytesWithHandler:] / getMutableBytesWithHandler:, +[MLComputePlan
// loadContentsOfURL:configuration:completionHandler:] (macOS 14.4) with
// computeDeviceUsageForMLProgramOperation: and estimatedCostOfMLProgramOperation:.

#import <CoreML/CoreML.h>
#import <CoreVideo/CoreVideo.h>
#import <Foundation/Foundation.h>
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers

NSString* ToNS(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

std::string FromNS(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }

std::string ErrorText(NSError* error, const std::string& what) {
  std::string msg = what;
  if (error) msg += ": " + FromNS(error.localizedDescription);
  return msg;
}

enum class DType { F16, F32, I32, F64 };

bool DTypeOf(MLMultiArrayDataType t, DType* out) {
  switch (t) {
    case MLMultiArrayDataTypeFloat16: *out = DType::F16; return true;
    case MLMultiArrayDataTypeFloat32: *out = DType::F32; return true;
    case MLMultiArrayDataTypeInt32: *out = DType::I32; return true;
    case MLMultiArrayDataTypeFloat64: *out = DType::F64; return true;
    default: return false;
  }
}

MLMultiArrayDataType ToML(DType t) {
  switch (t) {
    case DType::F16: return MLMultiArrayDataTypeFloat16;
    case DType::F32: return MLMultiArrayDataTypeFloat32;
    case DType::I32: return MLMultiArrayDataTypeInt32;
    case DType::F64: return MLMultiArrayDataTypeFloat64;
  }
  return MLMultiArrayDataTypeFloat32;
}

size_t ElemSize(DType t) {
  switch (t) {
    case DType::F16: return 2;
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::F64: return 8;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::F16: return "fp16";
    case DType::F32: return "fp32";
    case DType::I32: return "int32";
    case DType::F64: return "fp64";
  }
  return "?";
}

// "fp16" | "fp32" | "int32": what JS may hand in.
bool ParseDType(const std::string& s, DType* out) {
  if (s == "fp16") *out = DType::F16;
  else if (s == "fp32") *out = DType::F32;
  else if (s == "int32") *out = DType::I32;
  else return false;
  return true;
}

std::string DTypeText(MLMultiArrayDataType t) {
  DType d;
  if (DTypeOf(t, &d)) return DTypeName(d);
  char buf[32];
  snprintf(buf, sizeof buf, "0x%lx", static_cast<long>(t));
  return buf;
}

std::vector<int64_t> ToVec(NSArray<NSNumber*>* a) {
  std::vector<int64_t> v;
  for (NSNumber* n in a) v.push_back(n.longLongValue);
  return v;
}

NSArray<NSNumber*>* ToNSShape(const std::vector<int64_t>& shape) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:shape.size()];
  for (int64_t d : shape) [a addObject:@(d)];
  return a;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Elements of a shape whose every dimension is > 0 (0 when one is not, or when it overflows).
int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || n > (INT64_C(1) << 40) / d) return 0;
    n *= d;
  }
  return n;
}

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Copies a tensor of `shape` between two strided layouts (strides in elements), a run of the
// innermost dimension at a time where both have it contiguous.
void CopyStrided(uint8_t* dst, const std::vector<int64_t>& dstStrides, const uint8_t* src,
                 const std::vector<int64_t>& srcStrides, const std::vector<int64_t>& shape, size_t elem) {
  const size_t rank = shape.size();
  if (rank == 0) {
    memcpy(dst, src, elem);
    return;
  }
  const int64_t inner = shape[rank - 1];
  const bool contiguous = dstStrides[rank - 1] == 1 && srcStrides[rank - 1] == 1;
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; d++) outer *= shape[d];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t o = 0; o < outer; o++) {
    int64_t doff = 0, soff = 0;
    for (size_t d = 0; d + 1 < rank; d++) {
      doff += idx[d] * dstStrides[d];
      soff += idx[d] * srcStrides[d];
    }
    if (contiguous) {
      memcpy(dst + doff * elem, src + soff * elem, (size_t)inner * elem);
    } else {
      for (int64_t i = 0; i < inner; i++) {
        memcpy(dst + (doff + i * dstStrides[rank - 1]) * elem, src + (soff + i * srcStrides[rank - 1]) * elem, elem);
      }
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Scoped access to an array's memory. Strides: the handler's own for writes; for reads the
// array's (getBytesWithHandler gives none). Pixel-buffer-backed arrays are locked meanwhile.
void ReadArray(MLMultiArray* a, const std::function<void(const uint8_t*, const std::vector<int64_t>&)>& fn) {
  CVPixelBufferRef pb = a.pixelBuffer;
  if (pb) CVPixelBufferLockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
  const std::vector<int64_t> strides = ToVec(a.strides);
  const auto* f = &fn;
  const auto* s = &strides;
  [a getBytesWithHandler:^(const void* bytes, NSInteger) {
    (*f)(static_cast<const uint8_t*>(bytes), *s);
  }];
  if (pb) CVPixelBufferUnlockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
}

void WriteArray(MLMultiArray* a, const std::function<void(uint8_t*, NSInteger, const std::vector<int64_t>&)>& fn) {
  CVPixelBufferRef pb = a.pixelBuffer;
  if (pb) CVPixelBufferLockBaseAddress(pb, 0);
  const auto* f = &fn;
  [a getMutableBytesWithHandler:^(void* bytes, NSInteger size, NSArray<NSNumber*>* strides) {
    (*f)(static_cast<uint8_t*>(bytes), size, ToVec(strides));
  }];
  if (pb) CVPixelBufferUnlockBaseAddress(pb, 0);
}

void ZeroArray(MLMultiArray* a) {
  WriteArray(a, [](uint8_t* p, NSInteger size, const std::vector<int64_t>&) { memset(p, 0, (size_t)size); });
}

// A zeroed array. fp16: IOSurface-backed (shape's last dimension = width, the rest = height), so
// that the ANE can write into it; plain when that cannot be made, or for other types.
MLMultiArray* NewArray(const std::vector<int64_t>& shape, DType dtype, bool surface, std::string* err) {
  if (shape.empty() || Count(shape) == 0) {
    *err = "shape " + ShapeText(shape) + " must have at least one dimension, each > 0";
    return nil;
  }
  NSArray<NSNumber*>* s = ToNSShape(shape);
  MLMultiArray* a = nil;
  if (surface && dtype == DType::F16) {
    const size_t width = (size_t)shape.back();
    const size_t height = (size_t)(Count(shape) / shape.back());
    CVPixelBufferRef pb = nullptr;
    NSDictionary* attrs = @{(id)kCVPixelBufferIOSurfacePropertiesKey : @{}};
    if (CVPixelBufferCreate(kCFAllocatorDefault, width, height, kCVPixelFormatType_OneComponent16Half,
                            (__bridge CFDictionaryRef)attrs, &pb) == kCVReturnSuccess && pb) {
      @try {
        a = [[MLMultiArray alloc] initWithPixelBuffer:pb shape:s];
      } @catch (NSException*) {
        a = nil;  // a layout Core ML refuses for pixel buffers: a plain array serves
      }
      CVPixelBufferRelease(pb);
    }
  }
  if (!a) {
    NSError* error = nil;
    a = [[MLMultiArray alloc] initWithShape:s dataType:ToML(dtype) error:&error];
    if (!a) {
      *err = ErrorText(error, "could not allocate a " + std::string(DTypeName(dtype)) + " array of shape " + ShapeText(shape));
      return nil;
    }
  }
  ZeroArray(a);
  return a;
}

// Copies `src` into `dst` (same shape and type) through both arrays' strides.
bool CopyArray(MLMultiArray* src, MLMultiArray* dst, std::string* err) {
  DType dt;
  if (src.dataType != dst.dataType || !DTypeOf(src.dataType, &dt) || ![src.shape isEqualToArray:dst.shape]) {
    *err = "an output of type " + DTypeText(src.dataType) + " " + ShapeText(ToVec(src.shape)) +
           " does not fit its buffer of type " + DTypeText(dst.dataType) + " " + ShapeText(ToVec(dst.shape));
    return false;
  }
  const std::vector<int64_t> shape = ToVec(src.shape);
  ReadArray(src, [&](const uint8_t* from, const std::vector<int64_t>& fromStrides) {
    WriteArray(dst, [&](uint8_t* to, NSInteger, const std::vector<int64_t>& toStrides) {
      CopyStrided(to, toStrides, from, fromStrides, shape, ElemSize(dt));
    });
  });
  return true;
}

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

// A dense tensor on this side of the boundary.
struct HostTensor {
  std::string name;
  DType dtype = DType::F16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Reads a multi-array into a dense tensor; unknown element types are an error, not a guess.
bool ReadTensor(NSString* name, MLMultiArray* a, HostTensor* out, std::string* err) {
  DType dt;
  if (!DTypeOf(a.dataType, &dt)) {
    *err = "output " + FromNS(name) + " has element type " + DTypeText(a.dataType) + ", which this addon does not read";
    return false;
  }
  out->name = FromNS(name);
  out->dtype = dt;
  out->shape = ToVec(a.shape);
  const int64_t n = out->shape.empty() ? 1 : Count(out->shape);
  if (n == 0) {
    *err = "output " + out->name + " has shape " + ShapeText(out->shape);
    return false;
  }
  out->bytes.resize((size_t)n * ElemSize(dt));
  const std::vector<int64_t> dense = DenseStrides(out->shape);
  ReadArray(a, [&](const uint8_t* p, const std::vector<int64_t>& strides) {
    CopyStrided(out->bytes.data(), dense, p, strides, out->shape, ElemSize(dt));
  });
  return true;
}

Napi::Value TensorToJS(Napi::Env env, const HostTensor& t) {
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, t.bytes.size());
  if (!t.bytes.empty()) memcpy(ab.Data(), t.bytes.data(), t.bytes.size());
  const size_t n = t.bytes.size() / ElemSize(t.dtype);
  Napi::Value view;
  switch (t.dtype) {
    case DType::F16: view = Napi::Uint16Array::New(env, n, ab, 0); break;
    case DType::F32: view = Napi::Float32Array::New(env, n, ab, 0); break;
    case DType::I32: view = Napi::Int32Array::New(env, n, ab, 0); break;
    case DType::F64: view = Napi::Float64Array::New(env, n, ab, 0); break;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("data", view);
  o.Set("dtype", DTypeName(t.dtype));
  Napi::Array shape = Napi::Array::New(env, t.shape.size());
  for (size_t i = 0; i < t.shape.size(); i++) shape.Set(static_cast<uint32_t>(i), static_cast<double>(t.shape[i]));
  o.Set("shape", shape);
  return o;
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

struct Job;
void SettleJob(Napi::Env env, Napi::Function, std::nullptr_t*, Job* job);
using Settler = Napi::TypedThreadSafeFunction<std::nullptr_t, Job, SettleJob>;

struct Job {
  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise::Deferred deferred;
  std::string error;
  // Set by the work when it succeeds: builds the resolved value on the JS thread.
  std::function<Napi::Value(Napi::Env)> value;
};

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

// Runs `work` on `queue` inside an autorelease pool and settles the returned promise, on the JS
// thread, with what it left in the job. Objective-C and C++ exceptions become errors.
Napi::Promise Run(Napi::Env env, dispatch_queue_t queue, const char* what, std::function<void(Job&)> work) {
  auto* job = new Job(env);
  Napi::Promise promise = job->deferred.Promise();
  Settler settle = Settler::New(env, what, 0, 1);
  std::string label = what;
  dispatch_async(queue, ^{
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
  });
  return promise;
}

dispatch_queue_t WorkQueue() { return dispatch_get_global_queue(QOS_CLASS_USER_INITIATED, 0); }

// What crossed between JS and one model, and what was copied on this side to keep state.
struct Stats {
  std::atomic<uint64_t> predictions{0}, bytesIn{0}, bytesOut{0}, bytesKept{0}, backingMisses{0};
};

// ---------------------------------------------------------------------------------------------
// Model and state

struct ModelCore {
  MLModel* model = nil;
  dispatch_queue_t queue = nil;
  std::mutex predicting;  // one prediction of this model at a time
  // Output backings of the outputs that go back to JS, made on first use (under `predicting`).
  NSMutableDictionary<NSString*, MLMultiArray*>* hostBackings = [NSMutableDictionary dictionary];
  std::unordered_map<std::string, std::vector<int64_t>> inputShapes, outputShapes;
  std::unordered_map<std::string, DType> outputTypes;
  Stats stats;
};

// A buffer used in turn: step t reads buf[cur] and writes buf[1 - cur].
struct Carried {
  std::string input, output;
  std::vector<int64_t> shape;
  DType dtype = DType::F16;
  MLMultiArray* buf[2] = {nil, nil};
  int cur = 0;
};

// A KV cache that takes each step's rows [position, position + T) along axis 2.
struct RowWritten {
  std::string input, output;
  std::vector<int64_t> shape;
  DType dtype = DType::F16;
  MLMultiArray* cache = nil;
  std::unordered_map<int64_t, MLMultiArray*> rows;  // output backing per row count T (decode 1, prefill T)
};

constexpr size_t kRowAxis = 2;

struct StateCore {
  id mlState = nil;  // MLState (macOS 15) when the package declares states
  NSArray<NSString*>* mlStateNames = @[];
  std::vector<Carried> carried;
  std::vector<RowWritten> rowWritten;
  dispatch_queue_t queue = nil;
  int64_t bytes = 0;
};

// Zeroes every buffer of a state (on its queue).
void ZeroState(StateCore& st) {
  for (Carried& c : st.carried) {
    ZeroArray(c.buf[0]);
    ZeroArray(c.buf[1]);
    c.cur = 0;
  }
  for (RowWritten& r : st.rowWritten) ZeroArray(r.cache);
  if (@available(macOS 15.0, *)) {
    MLState* ml = (MLState*)st.mlState;
    for (NSString* name in st.mlStateNames) {
      [ml getMultiArrayForStateNamed:name handler:^(MLMultiArray* buffer) { ZeroArray(buffer); }];
    }
  }
}

// Calls `fn` with every array of a state, in snapshot order: the carried buffers' current halves,
// the KV caches, then the MLState's arrays by name; `cut` marks the 4-D ones whose rows along
// kRowAxis a snapshot keeps only up to the rows written (KV caches, MLState KV).
void ForEachStateArray(StateCore& st, const std::function<void(MLMultiArray*, bool cut)>& fn) {
  for (Carried& c : st.carried) fn(c.buf[c.cur], false);
  for (RowWritten& r : st.rowWritten) fn(r.cache, true);
  if (@available(macOS 15.0, *)) {
    MLState* ml = (MLState*)st.mlState;
    const auto* f = &fn;
    for (NSString* name in [st.mlStateNames sortedArrayUsingSelector:@selector(compare:)]) {
      [ml getMultiArrayForStateNamed:name handler:^(MLMultiArray* buffer) { (*f)(buffer, buffer.shape.count == 4); }];
    }
  }
}

// The dense shape a snapshot keeps of `a`: rows along kRowAxis cut at `rows` when `cut`.
bool SnapshotShape(MLMultiArray* a, bool cut, int64_t rows, std::vector<int64_t>* shape, size_t* elem, std::string* err) {
  DType dt;
  if (!DTypeOf(a.dataType, &dt)) {
    *err = "a state array has element type " + DTypeText(a.dataType) + ", which this addon does not copy";
    return false;
  }
  *shape = ToVec(a.shape);
  *elem = ElemSize(dt);
  if (cut) {
    if (rows < 0 || rows > (*shape)[kRowAxis]) {
      *err = "rows [0, " + std::to_string(rows) + ") are outside a state array of shape " + ShapeText(*shape);
      return false;
    }
    (*shape)[kRowAxis] = rows;
  }
  return true;
}

size_t DenseBytes(const std::vector<int64_t>& shape, size_t elem) {
  for (int64_t d : shape) if (d == 0) return 0;
  return (size_t)Count(shape) * elem;
}

struct AddonData {
  Napi::FunctionReference model, state;
};

class StateWrap : public Napi::ObjectWrap<StateWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CoreMLState", {InstanceMethod("reset", &StateWrap::Reset), InstanceMethod("read", &StateWrap::Read),
                                            InstanceMethod("write", &StateWrap::Write)});
  }
  StateWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StateWrap>(info) {}
  ~StateWrap() override {
    if (!core_) return;
    Napi::MemoryManagement::AdjustExternalMemory(Env(), -core_->bytes);
    dispatch_queue_t queue = core_->queue;
    ReleaseOn(queue, std::move(core_));
  }
  void Attach(Napi::Env env, std::shared_ptr<StateCore> core) {
    core_ = std::move(core);
    Napi::MemoryManagement::AdjustExternalMemory(env, core_->bytes);
  }
  std::shared_ptr<StateCore> Core(Napi::Env env) const {
    if (!core_) throw Napi::TypeError::New(env, "a CoreMLState comes from model.newState()");
    return core_;
  }

  // Drops a reference on `queue`, after the work queued there before.
  template <class T>
  static void ReleaseOn(dispatch_queue_t queue, std::shared_ptr<T> keep) {
    __block std::shared_ptr<T> last = std::move(keep);
    dispatch_async(queue, ^{
      @autoreleasepool {
        last.reset();
      }
    });
  }

 private:
  // Zeroes the state, on its queue: ordered after the predictions asked for before, and before
  // those asked for after. Returns a promise that settles when done (callers may ignore it).
  Napi::Value Reset(const Napi::CallbackInfo& info) {
    std::shared_ptr<StateCore> st = Core(info.Env());
    return Run(info.Env(), st->queue, "state reset", [st](Job& job) {
      ZeroState(*st);
      job.value = [](Napi::Env env) { return env.Undefined(); };
    });
  }

  // read(rows) → Promise<ArrayBuffer[]>: dense copies of every array (ForEachStateArray's order),
  // KV rows [0, rows) only; on the state's queue, after the predictions asked for before.
  Napi::Value Read(const Napi::CallbackInfo& info) {
    std::shared_ptr<StateCore> st = Core(info.Env());
    const int64_t rows = RowsArg(info, 0, "read");
    return Run(info.Env(), st->queue, "state read", [st, rows](Job& job) {
      auto copies = std::make_shared<std::vector<std::vector<uint8_t>>>();
      ForEachStateArray(*st, [&](MLMultiArray* a, bool cut) {
        std::vector<int64_t> shape;
        size_t elem = 0;
        if (!job.error.empty() || !SnapshotShape(a, cut, rows, &shape, &elem, &job.error)) return;
        std::vector<uint8_t> bytes(DenseBytes(shape, elem));
        if (!bytes.empty()) {
          ReadArray(a, [&](const uint8_t* p, const std::vector<int64_t>& strides) {
            CopyStrided(bytes.data(), DenseStrides(shape), p, strides, shape, elem);
          });
        }
        copies->push_back(std::move(bytes));
      });
      if (!job.error.empty()) return;
      job.value = [copies](Napi::Env env) -> Napi::Value {
        Napi::Array out = Napi::Array::New(env, copies->size());
        for (size_t i = 0; i < copies->size(); i++) {
          const std::vector<uint8_t>& b = (*copies)[i];
          Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, b.size());
          if (!b.empty()) memcpy(ab.Data(), b.data(), b.size());
          out.Set(static_cast<uint32_t>(i), ab);
        }
        return out;
      };
    });
  }

  // write(buffers, rows) → Promise<void>: puts what read(rows) returned back (KV rows past `rows`
  // zeroed), on the state's queue; nothing is written unless every buffer has the right size.
  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::shared_ptr<StateCore> st = Core(env);
    if (info.Length() < 1 || !info[0].IsArray()) throw Napi::TypeError::New(env, "write(buffers, rows) needs an array of ArrayBuffers");
    Napi::Array a = info[0].As<Napi::Array>();
    auto copies = std::make_shared<std::vector<std::vector<uint8_t>>>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      if (!a.Get(i).IsArrayBuffer()) throw Napi::TypeError::New(env, "write: buffers must be ArrayBuffers");
      Napi::ArrayBuffer b = a.Get(i).As<Napi::ArrayBuffer>();
      const uint8_t* p = static_cast<const uint8_t*>(b.Data());
      copies->emplace_back(p, p + b.ByteLength());  // copied: JS may change it while this is queued
    }
    const int64_t rows = RowsArg(info, 1, "write");
    return Run(env, st->queue, "state write", [st, copies, rows](Job& job) {
      size_t i = 0;
      ForEachStateArray(*st, [&](MLMultiArray* arr, bool cut) {
        std::vector<int64_t> shape;
        size_t elem = 0;
        if (!job.error.empty() || !SnapshotShape(arr, cut, rows, &shape, &elem, &job.error)) return;
        if (i >= copies->size() || (*copies)[i].size() != DenseBytes(shape, elem)) {
          job.error = "write: buffer " + std::to_string(i) + " does not fit the state array " + ShapeText(shape);
        }
        i++;
      });
      if (job.error.empty() && i != copies->size()) job.error = "write: " + std::to_string(copies->size()) + " buffers for " + std::to_string(i) + " state arrays";
      if (!job.error.empty()) return;
      i = 0;
      ForEachStateArray(*st, [&](MLMultiArray* arr, bool cut) {
        std::vector<int64_t> shape;
        size_t elem = 0;
        SnapshotShape(arr, cut, rows, &shape, &elem, &job.error);
        const std::vector<uint8_t>& src = (*copies)[i++];
        WriteArray(arr, [&](uint8_t* p, NSInteger size, const std::vector<int64_t>& strides) {
          if (cut) memset(p, 0, (size_t)size);
          if (!src.empty()) CopyStrided(p, strides, src.data(), DenseStrides(shape), shape, elem);
        });
      });
      job.value = [](Napi::Env env) { return env.Undefined(); };
    });
  }

  static int64_t RowsArg(const Napi::CallbackInfo& info, size_t at, const char* what) {
    if (info.Length() <= at || !info[at].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(what) + ": rows must be a number");
    const double r = info[at].As<Napi::Number>().DoubleValue();
    if (!(r >= 0 && r < 1e9) || r != static_cast<double>(static_cast<int64_t>(r))) throw Napi::RangeError::New(info.Env(), std::string(what) + ": rows must be an integer >= 0");
    return static_cast<int64_t>(r);
  }

  std::shared_ptr<StateCore> core_;
};

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CoreMLModel", {
                                               InstanceMethod("describe", &ModelWrap::Describe),
                                               InstanceMethod("newState", &ModelWrap::NewState),
                                               InstanceMethod("predict", &ModelWrap::Predict),
                                               InstanceMethod("stats", &ModelWrap::GetStats),
                                               InstanceMethod("dispose", &ModelWrap::Dispose),
                                           });
  }
  ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {}
  ~ModelWrap() override { Release(); }
  void Attach(std::shared_ptr<ModelCore> core) { core_ = std::move(core); }

 private:
  void Release() {
    if (!core_) return;
    dispatch_queue_t queue = core_->queue;
    StateWrap::ReleaseOn(queue, std::move(core_));
  }

  std::shared_ptr<ModelCore> Live(Napi::Env env) const {
    if (!core_) throw Napi::Error::New(env, "Core ML model used after dispose()");
    return core_;
  }

  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value NewState(const Napi::CallbackInfo& info);
  Napi::Value Predict(const Napi::CallbackInfo& info);

  Napi::Value GetStats(const Napi::CallbackInfo& info) {
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
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    Release();
    return info.Env().Undefined();
  }

  std::shared_ptr<ModelCore> core_;
};

Napi::Object DescribeFeature(Napi::Env env, NSString* name, NSArray<NSNumber*>* shape, MLMultiArrayDataType dt) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", FromNS(name));
  Napi::Array s = Napi::Array::New(env, shape.count);
  for (NSUInteger i = 0; i < shape.count; i++) s.Set(static_cast<uint32_t>(i), shape[i].doubleValue);
  o.Set("shape", s);
  o.Set("dtype", DTypeText(dt));
  return o;
}

Napi::Value DescribeModel(Napi::Env env, MLModel* model);

// True for a model input that is a Core ML state (listed among inputs on some OS versions).
bool IsStateFeature(MLModel* model, NSString* name, MLFeatureDescription* d) {
  if (@available(macOS 15.0, *)) {
    return d.type == MLFeatureTypeState || model.modelDescription.stateDescriptionsByName[name] != nil;
  }
  return false;
}

Napi::Value ModelWrap::Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<ModelCore> core = Live(env);
  @try {
    return DescribeModel(env, core->model);
  } @catch (NSException* e) {
    throw Napi::Error::New(env, "Core ML raised " + FromNS(e.name) + " describing the model: " + FromNS(e.reason));
  }
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

// newState({carried: [{input, output, shape, dtype}], rowWritten: [{input, output, shape, dtype}]})
// → CoreMLState holding the package's MLState (when it declares states) and zeroed buffers.
Napi::Value ModelWrap::NewState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<ModelCore> core = Live(env);
  auto st = std::make_shared<StateCore>();
  st->queue = dispatch_queue_create("anemll-qwen35.coreml.state", DISPATCH_QUEUE_SERIAL);
  Napi::Object spec = info.Length() > 0 && info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(env);
  std::string err;
  auto buffers = [&](const char* key, const std::function<void(const std::string&, const std::string&,
                                                               const std::vector<int64_t>&, DType)>& add) {
    Napi::Value v = spec.Get(key);
    if (v.IsUndefined()) return;
    if (!v.IsArray()) throw Napi::TypeError::New(env, std::string("newState: ") + key + " must be an array");
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      if (!a.Get(i).IsObject()) throw Napi::TypeError::New(env, std::string("newState: ") + key + " holds a non-object");
      Napi::Object b = a.Get(i).As<Napi::Object>();
      if (!b.Get("input").IsString() || !b.Get("output").IsString() || !b.Get("dtype").IsString()) {
        throw Napi::TypeError::New(env, std::string("newState: each of ") + key + " needs input, output, shape and dtype");
      }
      const std::string input = b.Get("input").As<Napi::String>(), output = b.Get("output").As<Napi::String>();
      DType dt;
      if (!ParseDType(b.Get("dtype").As<Napi::String>(), &dt)) throw Napi::TypeError::New(env, "newState " + input + ": dtype must be fp16, fp32 or int32");
      auto known = core->inputShapes.find(input);
      if (known == core->inputShapes.end()) throw Napi::Error::New(env, "newState: the model has no input " + input);
      std::vector<int64_t> shape = ShapeArg(env, b.Get("shape"), "newState " + input);
      if (known->second != shape) {
        throw Napi::Error::New(env, "newState: " + input + " is " + ShapeText(known->second) + " in the model, " + ShapeText(shape) + " in the plan");
      }
      add(input, output, shape, dt);
    }
  };
  @try {
    buffers("carried", [&](const std::string& in, const std::string& out, const std::vector<int64_t>& shape, DType dt) {
      Carried c;
      c.input = in;
      c.output = out;
      c.shape = shape;
      c.dtype = dt;
      for (auto& b : c.buf) {
        b = NewArray(shape, dt, true, &err);
        if (!b) throw Napi::Error::New(env, "newState " + in + ": " + err);
      }
      st->bytes += 2 * Count(shape) * (int64_t)ElemSize(dt);
      st->carried.push_back(std::move(c));
    });
    buffers("rowWritten", [&](const std::string& in, const std::string& out, const std::vector<int64_t>& shape, DType dt) {
      if (shape.size() != 4) throw Napi::RangeError::New(env, "newState " + in + ": a KV cache is [1, H, ctx, d]");
      RowWritten r;
      r.input = in;
      r.output = out;
      r.shape = shape;
      r.dtype = dt;
      r.cache = NewArray(shape, dt, true, &err);
      if (!r.cache) throw Napi::Error::New(env, "newState " + in + ": " + err);
      st->bytes += Count(shape) * (int64_t)ElemSize(dt);
      st->rowWritten.push_back(std::move(r));
    });
    if (@available(macOS 15.0, *)) {
      NSDictionary<NSString*, MLFeatureDescription*>* states = core->model.modelDescription.stateDescriptionsByName;
      if (states.count > 0) {
        st->mlState = [core->model newState];
        st->mlStateNames = states.allKeys;
      }
    }
  } @catch (NSException* e) {
    throw Napi::Error::New(env, "Core ML raised " + FromNS(e.name) + " making a state: " + FromNS(e.reason));
  }
  Napi::Object obj = static_cast<AddonData*>(env.GetInstanceData<AddonData>())->state.New({});
  StateWrap::Unwrap(obj)->Attach(env, st);
  return obj;
}

// The features and output backings of one prediction with `st`: each buffer the model has an
// input for is bound (carried: the current half as input, the other as the output's backing; KV
// cache: the cache as input, a row array as backing). False with `err` when they do not fit.
bool BindState(ModelCore& core, StateCore& st, int64_t position, NSMutableDictionary* features,
               NSMutableDictionary* backings, std::vector<Carried*>* carried, std::vector<RowWritten*>* rows,
               std::string* err) {
  auto hasInput = [&](const std::string& n) { return core.inputShapes.count(n) > 0; };
  // the output's shape when the model has it with the buffer's element type
  auto outShape = [&](const std::string& n, DType dt) -> const std::vector<int64_t>* {
    auto it = core.outputShapes.find(n);
    return it == core.outputShapes.end() || core.outputTypes.at(n) != dt ? nullptr : &it->second;
  };
  for (Carried& c : st.carried) {
    if (!hasInput(c.input)) continue;
    const std::vector<int64_t>* os = outShape(c.output, c.dtype);
    if (!os || *os != c.shape) {
      *err = "the model has no " + std::string(DTypeName(c.dtype)) + " output " + c.output + " " + ShapeText(c.shape) +
             " for the state's buffer " + c.input;
      return false;
    }
    features[ToNS(c.input)] = [MLFeatureValue featureValueWithMultiArray:c.buf[c.cur]];
    backings[ToNS(c.output)] = c.buf[1 - c.cur];
    carried->push_back(&c);
  }
  for (RowWritten& r : st.rowWritten) {
    if (!hasInput(r.input)) continue;
    const std::vector<int64_t>* os = outShape(r.output, r.dtype);
    if (!os || os->size() != 4 || (*os)[0] != r.shape[0] || (*os)[1] != r.shape[1] || (*os)[3] != r.shape[3]) {
      *err = "the model has no " + std::string(DTypeName(r.dtype)) + " output " + r.output + " that fits rows of the state's cache " +
             r.input + " " + ShapeText(r.shape);
      return false;
    }
    const int64_t t = (*os)[kRowAxis];
    if (position < 0 || position + t > r.shape[kRowAxis]) {
      *err = "rows [" + std::to_string(position) + ", " + std::to_string(position + t) + ") of " + r.input +
             " are outside its " + std::to_string(r.shape[kRowAxis]) + " rows (pass the step's position)";
      return false;
    }
    MLMultiArray* __strong& backing = r.rows[t];
    if (!backing) {
      backing = NewArray(*os, r.dtype, true, err);
      if (!backing) return false;
    }
    features[ToNS(r.input)] = [MLFeatureValue featureValueWithMultiArray:r.cache];
    backings[ToNS(r.output)] = backing;
    rows->push_back(&r);
  }
  return true;
}

// After a prediction: the carried outputs become the next inputs (copied in only where Core ML did
// not write into the backing), and this step's KV rows go into the caches. Nothing changes unless
// every output is there.
bool KeepState(id<MLFeatureProvider> result, int64_t position, const std::vector<Carried*>& carried,
               const std::vector<RowWritten*>& rows, Stats& stats, std::string* err) {
  std::vector<MLMultiArray*> gotCarried, gotRows;
  for (Carried* c : carried) {
    MLMultiArray* got = [result featureValueForName:ToNS(c->output)].multiArrayValue;
    if (!got) {
      *err = "Core ML returned no output " + c->output;
      return false;
    }
    gotCarried.push_back(got);
  }
  for (RowWritten* r : rows) {
    MLMultiArray* got = [result featureValueForName:ToNS(r->output)].multiArrayValue;
    if (!got || got.dataType != ToML(r->dtype)) {
      *err = "Core ML returned no " + std::string(DTypeName(r->dtype)) + " output " + r->output;
      return false;
    }
    const std::vector<int64_t> g = ToVec(got.shape);
    if (g.size() != 4 || g[0] != r->shape[0] || g[1] != r->shape[1] || g[3] != r->shape[3] ||
        position < 0 || position + g[kRowAxis] > r->shape[kRowAxis]) {
      *err = "Core ML returned " + r->output + " " + ShapeText(g) + ", which does not fit rows from " +
             std::to_string(position) + " of " + r->input + " " + ShapeText(r->shape);
      return false;
    }
    gotRows.push_back(got);
  }
  for (size_t i = 0; i < carried.size(); i++) {
    Carried* c = carried[i];
    MLMultiArray* next = c->buf[1 - c->cur];
    if (gotCarried[i] != next) {
      if (!CopyArray(gotCarried[i], next, err)) return false;
      stats.backingMisses++;
      stats.bytesKept += (uint64_t)Count(c->shape) * ElemSize(c->dtype);
    }
  }
  for (Carried* c : carried) c->cur = 1 - c->cur;
  for (size_t i = 0; i < rows.size(); i++) {
    RowWritten* r = rows[i];
    MLMultiArray* got = gotRows[i];
    auto backing = r->rows.find(got.shape[kRowAxis].longLongValue);
    if (backing == r->rows.end() || got != backing->second) stats.backingMisses++;
    const std::vector<int64_t> shape = ToVec(got.shape);
    const size_t elem = ElemSize(r->dtype);
    ReadArray(got, [&](const uint8_t* from, const std::vector<int64_t>& fromStrides) {
      WriteArray(r->cache, [&](uint8_t* to, NSInteger, const std::vector<int64_t>& toStrides) {
        CopyStrided(to + position * toStrides[kRowAxis] * (int64_t)elem, toStrides, from, fromStrides, shape, elem);
      });
    });
    stats.bytesKept += (uint64_t)Count(shape) * elem;
  }
  return true;
}

// predict(inputs: {name: {data, shape, dtype}}, state?: CoreMLState, position?: number)
//   → Promise<{name: {data, shape, dtype}}>: the outputs that are not the state's.
Napi::Value ModelWrap::Predict(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<ModelCore> core = Live(env);
  if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "predict(inputs, state?, position?) needs an inputs object");
  Napi::Object in = info[0].As<Napi::Object>();
  auto inputs = std::make_shared<std::vector<HostTensor>>();
  Napi::Array names = in.GetPropertyNames();
  uint64_t bytesIn = 0;
  for (uint32_t i = 0; i < names.Length(); i++) {
    const std::string name = names.Get(i).As<Napi::String>();
    if (!in.Get(name).IsObject()) throw Napi::TypeError::New(env, "input " + name + " must be {data, shape, dtype}");
    Napi::Object t = in.Get(name).As<Napi::Object>();
    HostTensor b;
    b.name = name;
    if (!t.Get("dtype").IsString() || !ParseDType(t.Get("dtype").As<Napi::String>(), &b.dtype)) {
      throw Napi::TypeError::New(env, "input " + name + ": dtype must be fp16, fp32 or int32");
    }
    b.shape = ShapeArg(env, t.Get("shape"), "input " + name);
    if (!t.Get("data").IsTypedArray()) throw Napi::TypeError::New(env, "input " + name + ": data must be a typed array");
    Napi::TypedArray data = t.Get("data").As<Napi::TypedArray>();
    const size_t bytes = (size_t)Count(b.shape) * ElemSize(b.dtype);
    if (data.ByteLength() != bytes) {
      throw Napi::RangeError::New(env, "input " + name + ": shape " + ShapeText(b.shape) + " needs " + std::to_string(bytes) +
                                           " bytes, got " + std::to_string(data.ByteLength()));
    }
    const uint8_t* src = static_cast<const uint8_t*>(data.ArrayBuffer().Data()) + data.ByteOffset();
    b.bytes.assign(src, src + bytes);  // copied: the JS array may change while Core ML runs
    bytesIn += bytes;
    inputs->push_back(std::move(b));
  }
  std::shared_ptr<StateCore> state;
  if (info.Length() > 1 && !info[1].IsUndefined() && !info[1].IsNull()) {
    if (!info[1].IsObject() || !info[1].As<Napi::Object>().InstanceOf(static_cast<AddonData*>(env.GetInstanceData<AddonData>())->state.Value())) {
      throw Napi::TypeError::New(env, "predict: state must come from newState()");
    }
    state = StateWrap::Unwrap(info[1].As<Napi::Object>())->Core(env);
  }
  int64_t position = -1;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    if (!info[2].IsNumber()) throw Napi::TypeError::New(env, "predict: position must be a number");
    const double p = info[2].As<Napi::Number>().DoubleValue();
    if (!(p >= 0 && p < 1e9) || p != static_cast<double>(static_cast<int64_t>(p))) throw Napi::RangeError::New(env, "predict: position must be an integer >= 0");
    position = static_cast<int64_t>(p);
  }
  dispatch_queue_t queue = state ? state->queue : core->queue;
  return Run(env, queue, "predict", [core, state, inputs, position, bytesIn](Job& job) {
    std::lock_guard<std::mutex> lock(core->predicting);
    MLModel* model = core->model;
    NSError* error = nil;
    std::string err;
    NSMutableDictionary<NSString*, MLFeatureValue*>* features = [NSMutableDictionary dictionary];
    for (HostTensor& t : *inputs) {
      MLMultiArray* arr = NewArray(t.shape, t.dtype, false, &err);
      if (!arr) {
        job.error = "input " + t.name + ": " + err;
        return;
      }
      const std::vector<int64_t> dense = DenseStrides(t.shape);
      WriteArray(arr, [&](uint8_t* p, NSInteger, const std::vector<int64_t>& strides) {
        CopyStrided(p, strides, t.bytes.data(), dense, t.shape, ElemSize(t.dtype));
      });
      features[ToNS(t.name)] = [MLFeatureValue featureValueWithMultiArray:arr];
    }
    NSMutableDictionary<NSString*, id>* backings = [NSMutableDictionary dictionary];
    std::vector<Carried*> carried;
    std::vector<RowWritten*> rows;
    if (state && !BindState(*core, *state, position, features, backings, &carried, &rows, &err)) {
      job.error = err;
      return;
    }
    for (const auto& [name, shape] : core->outputShapes) {
      NSString* n = ToNS(name);
      if (backings[n] || core->outputTypes.at(name) != DType::F16) continue;
      MLMultiArray* b = core->hostBackings[n];
      if (!b) {
        b = NewArray(shape, DType::F16, true, &err);
        if (!b) continue;  // Core ML then allocates the output itself: correct, one copy more
        core->hostBackings[n] = b;
      }
      backings[n] = b;
    }
    MLDictionaryFeatureProvider* provider = [[MLDictionaryFeatureProvider alloc] initWithDictionary:features error:&error];
    if (!provider) {
      job.error = ErrorText(error, "invalid inputs");
      return;
    }
    MLPredictionOptions* opts = [MLPredictionOptions new];
    opts.outputBackings = backings;
    id<MLFeatureProvider> result = nil;
    if (state && state->mlState) {
      if (@available(macOS 15.0, *)) {
        result = [model predictionFromFeatures:provider usingState:(MLState*)state->mlState options:opts error:&error];
      }
    } else {
      result = [model predictionFromFeatures:provider options:opts error:&error];
    }
    if (!result) {
      job.error = ErrorText(error, "Core ML prediction failed");
      return;
    }
    if (state && !KeepState(result, position, carried, rows, core->stats, &err)) {
      job.error = err;
      return;
    }
    auto outputs = std::make_shared<std::vector<HostTensor>>();
    uint64_t bytesOut = 0;
    for (NSString* name in result.featureNames) {
      const std::string n = FromNS(name);
      bool kept = false;
      for (Carried* c : carried) kept = kept || c->output == n;
      for (RowWritten* r : rows) kept = kept || r->output == n;
      if (kept) continue;
      MLMultiArray* arr = [result featureValueForName:name].multiArrayValue;
      if (!arr) {
        job.error = "output " + n + " is not a multi-array";
        return;
      }
      HostTensor t;
      if (!ReadTensor(name, arr, &t, &err)) {
        job.error = err;
        return;
      }
      bytesOut += t.bytes.size();
      outputs->push_back(std::move(t));
    }
    core->stats.predictions++;
    core->stats.bytesIn += bytesIn;
    core->stats.bytesOut += bytesOut;
    job.value = [outputs](Napi::Env env) -> Napi::Value {
      Napi::Object o = Napi::Object::New(env);
      for (const HostTensor& t : *outputs) o.Set(t.name, TensorToJS(env, t));
      return o;
    };
  });
}

// ---------------------------------------------------------------------------------------------
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
  Napi::Env env = info.Env();
  const std::string path = StringArg(info, 0, "compiledPath");
  const MLComputeUnits units = ParseUnits(env, StringArg(info, 1, "computeUnits"));
  const std::string function = OptionalStringArg(info, 2, "functionName");
  return Run(env, WorkQueue(), "load", [path, units, function](Job& job) {
    std::string err;
    MLModel* model = LoadModel(path, units, function, &err);
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
// computePlan(compiledPath, computeUnits, functionName | null, timeoutMs)
//   → Promise<{functions: [{name, operations: [{operatorName, outputs, preferred, supported, cost}]}]}>
// Operations of nested blocks follow the operation that holds them.

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

API_AVAILABLE(macos(14.4))
std::string DeviceName(id<MLComputeDeviceProtocol> d) {
  if (!d) return "";
  if ([(id)d isKindOfClass:[MLNeuralEngineComputeDevice class]]) return "ANE";
  if ([(id)d isKindOfClass:[MLGPUComputeDevice class]]) return "GPU";
  if ([(id)d isKindOfClass:[MLCPUComputeDevice class]]) return "CPU";
  return "";
}

API_AVAILABLE(macos(14.4))
void VisitBlock(MLComputePlan* plan, MLModelStructureProgramBlock* block, std::vector<PlanOp>* out) {
  for (MLModelStructureProgramOperation* op in block.operations) {
    PlanOp o;
    o.operatorName = FromNS(op.operatorName);
    for (MLModelStructureProgramNamedValueType* v in op.outputs) o.outputs.push_back(FromNS(v.name));
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
    out->push_back(std::move(o));
    for (MLModelStructureProgramBlock* inner in op.blocks) VisitBlock(plan, inner, out);
  }
}

Napi::Value PlanToJS(Napi::Env env, const std::vector<PlanFunction>& functions) {
  Napi::Array fns = Napi::Array::New(env, functions.size());
  for (size_t i = 0; i < functions.size(); i++) {
    const PlanFunction& pf = functions[i];
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
  return result;
}

Napi::Value ComputePlan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = StringArg(info, 0, "compiledPath");
  const MLComputeUnits units = ParseUnits(env, StringArg(info, 1, "computeUnits"));
  const std::string function = OptionalStringArg(info, 2, "functionName");
  const double timeoutMs = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : 300000;
  if (!(timeoutMs > 0)) throw Napi::RangeError::New(env, "computePlan: timeoutMs must be > 0");
  return Run(env, WorkQueue(), "computePlan", [path, units, function, timeoutMs](Job& job) {
    if (@available(macOS 14.4, *)) {
      std::string err;
      MLModelConfiguration* cfg = Configuration(units, function, &err);
      if (!cfg) {
        job.error = err;
        return;
      }
      // The handler may come after the wait gave up; the block keeps what it writes alive.
      dispatch_semaphore_t done = dispatch_semaphore_create(0);
      __block MLComputePlan* plan = nil;
      __block NSError* error = nil;
      [MLComputePlan loadContentsOfURL:[NSURL fileURLWithPath:ToNS(path)]
                         configuration:cfg
                     completionHandler:^(MLComputePlan* p, NSError* e) {
                       plan = p;
                       error = e;
                       dispatch_semaphore_signal(done);
                     }];
      if (dispatch_semaphore_wait(done, dispatch_time(DISPATCH_TIME_NOW, (int64_t)(timeoutMs * 1e6))) != 0) {
        job.error = "MLComputePlan gave no answer for " + path + " within " + std::to_string((long long)(timeoutMs / 1000)) + " s";
        return;
      }
      if (!plan) {
        job.error = ErrorText(error, "MLComputePlan could not load " + path);
        return;
      }
      MLModelStructureProgram* program = plan.modelStructure.program;
      if (!program) {
        job.error = path + " is not an ML Program (MLComputePlan has no program structure)";
        return;
      }
      auto functions = std::make_shared<std::vector<PlanFunction>>();
      for (NSString* name in [program.functions.allKeys sortedArrayUsingSelector:@selector(compare:)]) {
        PlanFunction pf;
        pf.name = FromNS(name);
        VisitBlock(plan, program.functions[name].block, &pf.ops);
        functions->push_back(std::move(pf));
      }
      job.value = [functions](Napi::Env env) { return PlanToJS(env, *functions); };
    } else {
      job.error = "MLComputePlan needs macOS 14.4 or later";
    }
  });
}

// ---------------------------------------------------------------------------------------------
// measure(compiledPath, computeUnits, functionName | null, warmup, runs)
//   → Promise<{averageMs, medianMs, minMs, maxMs, runs, warmup}>
// Zero inputs shaped by each input's constraint (states are the MLState's, not inputs), warm-up
// predictions, then timed ones.

Napi::Value Measure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = StringArg(info, 0, "compiledPath");
  const MLComputeUnits units = ParseUnits(env, StringArg(info, 1, "computeUnits"));
  const std::string function = OptionalStringArg(info, 2, "functionName");
  const int warmup = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Int32Value() : 3;
  const int runs = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().Int32Value() : 20;
  if (warmup < 0 || runs < 1 || runs > 100000) throw Napi::RangeError::New(env, "measure needs warmup >= 0 and 1 <= runs <= 100000");
  return Run(env, WorkQueue(), "measure", [path, units, function, warmup, runs](Job& job) {
    std::string err;
    MLModel* model = LoadModel(path, units, function, &err);
    if (!model) {
      job.error = err;
      return;
    }
    NSError* error = nil;
    NSMutableDictionary<NSString*, MLFeatureValue*>* features = [NSMutableDictionary dictionary];
    NSDictionary<NSString*, MLFeatureDescription*>* inputs = model.modelDescription.inputDescriptionsByName;
    for (NSString* name in inputs) {
      MLFeatureDescription* d = inputs[name];
      if (IsStateFeature(model, name, d)) continue;
      MLMultiArrayConstraint* c = d.multiArrayConstraint;
      DType dt;
      if (!c || !DTypeOf(c.dataType, &dt)) {
        job.error = "input " + FromNS(name) + " is not a multi-array of a known type; the measured loop feeds those only";
        return;
      }
      MLMultiArray* arr = NewArray(ToVec(c.shape), dt, false, &err);
      if (!arr) {
        job.error = "input " + FromNS(name) + ": " + err;
        return;
      }
      features[name] = [MLFeatureValue featureValueWithMultiArray:arr];
    }
    MLDictionaryFeatureProvider* provider = [[MLDictionaryFeatureProvider alloc] initWithDictionary:features error:&error];
    if (!provider) {
      job.error = ErrorText(error, "invalid inputs");
      return;
    }
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
    for (int i = 0; i < warmup; i++) {
      @autoreleasepool {
        if (!predict()) {
          job.error = ErrorText(predictError, "warm-up prediction failed");
          return;
        }
      }
    }
    auto times = std::make_shared<std::vector<double>>();
    for (int i = 0; i < runs; i++) {
      @autoreleasepool {
        const auto t0 = std::chrono::steady_clock::now();
        const bool ok = predict();
        const auto t1 = std::chrono::steady_clock::now();
        if (!ok) {
          job.error = ErrorText(predictError, "timed prediction failed");
          return;
        }
        times->push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    job.value = [times, warmup](Napi::Env env) -> Napi::Value {
      std::vector<double> t = *times;
      std::sort(t.begin(), t.end());
      double sum = 0;
      for (double x : t) sum += x;
      Napi::Object r = Napi::Object::New(env);
      r.Set("averageMs", sum / t.size());
      r.Set("medianMs", t[t.size() / 2]);
      r.Set("minMs", t.front());
      r.Set("maxMs", t.back());
      r.Set("runs", static_cast<double>(t.size()));
      r.Set("warmup", static_cast<double>(warmup));
      return r;
    };
  });
}

Napi::Value MacOSVersion(const Napi::CallbackInfo& info) {
  NSOperatingSystemVersion v = [[NSProcessInfo processInfo] operatingSystemVersion];
  return Napi::String::New(info.Env(), std::to_string(v.majorVersion) + "." + std::to_string(v.minorVersion));
}

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
  exports.Set("macosVersion", Napi::Function::New(env, MacOSVersion));
  return exports;
}

}  // namespace

NODE_API_MODULE(anemll_qwen35_coreml, InitAll)
