// One prediction: JS inputs copied in, a state's buffers bound (carried halves and KV caches, with
// their output backings) and kept after the step, the other outputs copied out to JS.
//
// Apple APIs: -[MLModel predictionFromFeatures:options:error:], and with an MLState
// -[MLModel predictionFromFeatures:usingState:options:error:] (macOS 15); MLPredictionOptions.outputBackings
// (IOSurface-backed fp16 arrays, which the ANE can write into).

#include "addon.h"

#include <cstring>

namespace coreml_addon {

namespace {

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
    if (core.outputShapes.count(c.output) == 0) {
      // read here, written by another function of the package (an MTP chain's per-row GDN states,
      // which only its verify function returns): bound as it is and left unchanged
      features[ToNS(c.input)] = [MLFeatureValue featureValueWithMultiArray:c.buf[c.cur]];
      continue;
    }
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

// The JS input `name` ({data, shape, dtype}), copied: the JS array may change while Core ML runs.
HostTensor InputArg(Napi::Env env, const std::string& name, Napi::Value v) {
  if (!v.IsObject()) throw Napi::TypeError::New(env, "input " + name + " must be {data, shape, dtype}");
  Napi::Object t = v.As<Napi::Object>();
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
  b.bytes.assign(src, src + bytes);
  return b;
}

}  // namespace

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
    inputs->push_back(InputArg(env, name, in.Get(name)));
    bytesIn += inputs->back().bytes.size();
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

}  // namespace coreml_addon
