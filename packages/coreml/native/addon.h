// What the files of the Core ML addon share (one addon: CMakeLists.txt lists every file). Each
// .mm includes this header alone for it; the macOS SDK compile check compiles every file by itself.
//
//   coreml_addon.mm  module registration, async jobs, argument parsing
//   arrays.mm        element types, shapes, MLMultiArray access and IOSurface-backed arrays
//   load.mm          compile, load, the model wrapper (describe, stats, dispose, unload)
//   predict.mm       predict: inputs in, state bound and kept, outputs out
//   state.mm         newState and the state wrapper (reset, read, write)
//   compute_plan.mm  MLComputePlan per operation of a function
//   measure.mm       a timed prediction loop
//   machine.mm       macOS version, Core ML's compute devices, the process's memory footprint
#pragma once

#import <CoreML/CoreML.h>
#import <CoreVideo/CoreVideo.h>
#import <Foundation/Foundation.h>
#include <napi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace coreml_addon {

// --- Strings, element types, shapes and arrays (arrays.mm)

NSString* ToNS(const std::string& s);
std::string FromNS(NSString* s);
std::string ErrorText(NSError* error, const std::string& what);

enum class DType { F16, F32, I32, F64 };
bool DTypeOf(MLMultiArrayDataType t, DType* out);
MLMultiArrayDataType ToML(DType t);
size_t ElemSize(DType t);
const char* DTypeName(DType t);
bool ParseDType(const std::string& s, DType* out);  // "fp16" | "fp32" | "int32": what JS may hand in
std::string DTypeText(MLMultiArrayDataType t);     // DTypeName, or Core ML's type code ("0x…")

std::vector<int64_t> ToVec(NSArray<NSNumber*>* a);
std::string ShapeText(const std::vector<int64_t>& shape);
int64_t Count(const std::vector<int64_t>& shape);  // 0 when a dimension is not > 0, or on overflow
std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape);
void CopyStrided(uint8_t* dst, const std::vector<int64_t>& dstStrides, const uint8_t* src,
                 const std::vector<int64_t>& srcStrides, const std::vector<int64_t>& shape, size_t elem);

// Scoped access to an array's memory (strides in elements), pixel buffers locked meanwhile.
void ReadArray(MLMultiArray* a, const std::function<void(const uint8_t*, const std::vector<int64_t>&)>& fn);
void WriteArray(MLMultiArray* a, const std::function<void(uint8_t*, NSInteger, const std::vector<int64_t>&)>& fn);
void ZeroArray(MLMultiArray* a);
// A zeroed array; fp16 with `surface`: IOSurface-backed, so that the ANE can write into it.
MLMultiArray* NewArray(const std::vector<int64_t>& shape, DType dtype, bool surface, std::string* err);
bool CopyArray(MLMultiArray* src, MLMultiArray* dst, std::string* err);

// --- Arguments and async jobs (coreml_addon.mm)

MLComputeUnits ParseUnits(Napi::Env env, const std::string& s);
std::string StringArg(const Napi::CallbackInfo& info, size_t i, const char* what);
std::string OptionalStringArg(const Napi::CallbackInfo& info, size_t i, const char* what);
std::vector<int64_t> ShapeArg(Napi::Env env, Napi::Value v, const std::string& what);

// The leading (compiledPath, computeUnits, functionName?) of load, computePlan and measure.
struct ModelArgs {
  std::string path;
  MLComputeUnits units;
  std::string function;  // "" for the package's default function
};
ModelArgs ModelArgsOf(const Napi::CallbackInfo& info);

struct Job {
  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise::Deferred deferred;
  std::string error;
  // Set by the work when it succeeds: builds the resolved value on the JS thread.
  std::function<Napi::Value(Napi::Env)> value;
};

// Runs `work` on `queue` inside an autorelease pool and settles the returned promise, on the JS
// thread, with what it left in the job. Objective-C and C++ exceptions become errors. With
// `after`, the work waits until every task of that group has left it (dispatch_group_notify).
Napi::Promise Run(Napi::Env env, dispatch_queue_t queue, const char* what, std::function<void(Job&)> work,
                  dispatch_group_t after = nil);
dispatch_queue_t WorkQueue();

// Drops a reference on `queue`, after the work queued there before.
template <class T>
void ReleaseOn(dispatch_queue_t queue, std::shared_ptr<T> keep) {
  __block std::shared_ptr<T> last = std::move(keep);
  dispatch_async(queue, ^{
    @autoreleasepool {
      last.reset();
    }
  });
}

// --- Loading (load.mm)

// A configuration for `units` and, for a multifunction package, the function to use.
MLModelConfiguration* Configuration(MLComputeUnits units, const std::string& function, std::string* err);
MLModel* LoadModel(const std::string& path, MLComputeUnits units, const std::string& function, std::string* err);
// True for a model input that is a Core ML state (listed among inputs on some OS versions).
bool IsStateFeature(MLModel* model, NSString* name, MLFeatureDescription* d);

// --- Model and state

// What crossed between JS and one model, and what was copied on this side to keep state.
struct Stats {
  std::atomic<uint64_t> predictions{0}, bytesIn{0}, bytesOut{0}, bytesKept{0}, backingMisses{0};
};

struct ModelCore {
  ModelCore() { dispatch_group_enter(loaded); }
  ~ModelCore();  // releases the MLModel, then leaves `loaded` (load.mm)
  ModelCore(const ModelCore&) = delete;
  ModelCore& operator=(const ModelCore&) = delete;

  MLModel* model = nil;
  dispatch_queue_t queue = nil;
  std::mutex predicting;  // one prediction of this model at a time
  // Output backings of the outputs that go back to JS, made on first use (under `predicting`).
  NSMutableDictionary<NSString*, MLMultiArray*>* hostBackings = [NSMutableDictionary dictionary];
  std::unordered_map<std::string, std::vector<int64_t>> inputShapes, outputShapes;
  std::unordered_map<std::string, DType> outputTypes;
  Stats stats;
  // Entered while this core lives, so that unload() can wait for the MLModel to be released.
  dispatch_group_t loaded = dispatch_group_create();
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

// The JS classes, kept for making instances and checking them.
struct AddonData {
  Napi::FunctionReference model, state;
};

// CoreMLState (state.mm): reset, read, write.
class StateWrap : public Napi::ObjectWrap<StateWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  StateWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StateWrap>(info) {}
  ~StateWrap() override;
  void Attach(Napi::Env env, std::shared_ptr<StateCore> core);
  std::shared_ptr<StateCore> Core(Napi::Env env) const;

 private:
  Napi::Value Reset(const Napi::CallbackInfo& info);
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value Write(const Napi::CallbackInfo& info);
  std::shared_ptr<StateCore> core_;
};

// CoreMLModel: describe, stats, dispose, unload (load.mm), newState (state.mm), predict (predict.mm).
class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {}
  ~ModelWrap() override { Release(); }
  void Attach(std::shared_ptr<ModelCore> core) { core_ = std::move(core); }

 private:
  void Release();
  std::shared_ptr<ModelCore> Live(Napi::Env env) const;
  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value NewState(const Napi::CallbackInfo& info);
  Napi::Value Predict(const Napi::CallbackInfo& info);
  Napi::Value GetStats(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Unload(const Napi::CallbackInfo& info);
  std::shared_ptr<ModelCore> core_;
  std::weak_ptr<ModelCore> released_;  // after dispose(): for an unload() that follows
};

// --- Compute devices (machine.mm)

enum class DeviceKind { None, CPU, GPU, NeuralEngine, Other };
DeviceKind KindOf(id<MLComputeDeviceProtocol> d);  // None for nil

// --- The module's functions

Napi::Value Compile(const Napi::CallbackInfo& info);          // load.mm
Napi::Value Load(const Napi::CallbackInfo& info);             // load.mm
Napi::Value ComputePlan(const Napi::CallbackInfo& info);      // compute_plan.mm
Napi::Value Measure(const Napi::CallbackInfo& info);          // measure.mm
Napi::Value ComputeDevices(const Napi::CallbackInfo& info);   // machine.mm
Napi::Value MemoryFootprint(const Napi::CallbackInfo& info);  // machine.mm
Napi::Value MacOSVersion(const Napi::CallbackInfo& info);     // machine.mm

}  // namespace coreml_addon
