// A timed prediction loop on zero inputs (costplan's measured cost): warm-up predictions, then
// timed ones, with an MLState when the model declares states.
//
// Apple APIs: -[MLModel predictionFromFeatures:error:], -[MLModel newState] and
// -[MLModel predictionFromFeatures:usingState:error:] (macOS 15).

#include "addon.h"

#include <algorithm>
#include <chrono>

namespace coreml_addon {

// measure(compiledPath, computeUnits, functionName | null, warmup, runs)
//   → Promise<{averageMs, medianMs, minMs, maxMs, runs, warmup}>
// Zero inputs shaped by each input's constraint (states are the MLState's, not inputs), warm-up
// predictions, then timed ones.
Napi::Value Measure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ModelArgs args = ModelArgsOf(info);
  const int warmup = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Int32Value() : 3;
  const int runs = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().Int32Value() : 20;
  if (warmup < 0 || runs < 1 || runs > 100000) throw Napi::RangeError::New(env, "measure needs warmup >= 0 and 1 <= runs <= 100000");
  return Run(env, WorkQueue(), "measure", [path = args.path, units = args.units, function = args.function, warmup, runs](Job& job) {
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

}  // namespace coreml_addon
