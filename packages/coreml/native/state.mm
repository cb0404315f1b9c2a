// Chain state on the native side: the package's MLState and the buffers a chain carries between
// steps (newState), and the state wrapper JS holds: reset, read and write, each on the state's
// serial queue in the order asked for (runtime-ane's snapshot and restore use read and write).
//
// Apple APIs: -[MLModel newState] and -[MLState getMultiArrayForStateNamed:handler:] (macOS 15),
// MLModelDescription.stateDescriptionsByName (macOS 15).

#include "addon.h"

#include <cstring>

namespace coreml_addon {

namespace {

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

int64_t RowsArg(const Napi::CallbackInfo& info, size_t at, const char* what) {
  if (info.Length() <= at || !info[at].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(what) + ": rows must be a number");
  const double r = info[at].As<Napi::Number>().DoubleValue();
  if (!(r >= 0 && r < 1e9) || r != static_cast<double>(static_cast<int64_t>(r))) throw Napi::RangeError::New(info.Env(), std::string(what) + ": rows must be an integer >= 0");
  return static_cast<int64_t>(r);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// newState

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

// ---------------------------------------------------------------------------------------------
// The state wrapper

Napi::Function StateWrap::Define(Napi::Env env) {
  return DefineClass(env, "CoreMLState", {InstanceMethod("reset", &StateWrap::Reset), InstanceMethod("read", &StateWrap::Read),
                                          InstanceMethod("write", &StateWrap::Write)});
}

StateWrap::~StateWrap() {
  if (!core_) return;
  Napi::MemoryManagement::AdjustExternalMemory(Env(), -core_->bytes);
  dispatch_queue_t queue = core_->queue;
  ReleaseOn(queue, std::move(core_));
}

void StateWrap::Attach(Napi::Env env, std::shared_ptr<StateCore> core) {
  core_ = std::move(core);
  Napi::MemoryManagement::AdjustExternalMemory(env, core_->bytes);
}

std::shared_ptr<StateCore> StateWrap::Core(Napi::Env env) const {
  if (!core_) throw Napi::TypeError::New(env, "a CoreMLState comes from model.newState()");
  return core_;
}

// Zeroes the state, on its queue: ordered after the predictions asked for before, and before
// those asked for after. Returns a promise that settles when done (callers may ignore it).
Napi::Value StateWrap::Reset(const Napi::CallbackInfo& info) {
  std::shared_ptr<StateCore> st = Core(info.Env());
  return Run(info.Env(), st->queue, "state reset", [st](Job& job) {
    ZeroState(*st);
    job.value = [](Napi::Env env) { return env.Undefined(); };
  });
}

// read(rows) → Promise<ArrayBuffer[]>: dense copies of every array (ForEachStateArray's order),
// KV rows [0, rows) only; on the state's queue, after the predictions asked for before.
Napi::Value StateWrap::Read(const Napi::CallbackInfo& info) {
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
Napi::Value StateWrap::Write(const Napi::CallbackInfo& info) {
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

}  // namespace coreml_addon
