// MLComputePlan of a compiled model (macOS 14.4): per operation, nested blocks included, the device
// Core ML prefers, the devices that support it, and its estimated share of the work.
//
// Apple APIs: +[MLComputePlan loadContentsOfURL:configuration:completionHandler:],
// MLComputePlan.modelStructure.program, -computeDeviceUsageForMLProgramOperation: and
// -estimatedCostOfMLProgramOperation: (all macOS 14.4).

#include "addon.h"

namespace coreml_addon {

namespace {

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

// costplan's device names; "" for none, or a kind this addon does not know.
std::string DeviceName(id<MLComputeDeviceProtocol> d) {
  switch (KindOf(d)) {
    case DeviceKind::NeuralEngine: return "ANE";
    case DeviceKind::GPU: return "GPU";
    case DeviceKind::CPU: return "CPU";
    case DeviceKind::None:
    case DeviceKind::Other: break;
  }
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

}  // namespace

// computePlan(compiledPath, computeUnits, functionName | null, timeoutMs)
//   → Promise<{functions: [{name, operations: [{operatorName, outputs, preferred, supported, cost}]}]}>
// Every function of the program, or with functionName that one alone (an error when the program
// has no such function). Operations of nested blocks follow the operation that holds them.
Napi::Value ComputePlan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ModelArgs args = ModelArgsOf(info);
  const double timeoutMs = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : 300000;
  if (!(timeoutMs > 0)) throw Napi::RangeError::New(env, "computePlan: timeoutMs must be > 0");
  return Run(env, WorkQueue(), "computePlan", [path = args.path, units = args.units, function = args.function, timeoutMs](Job& job) {
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
      // With a function named, the plan is that function's (the configuration selects it): only
      // its operations are read.
      NSArray<NSString*>* names = [program.functions.allKeys sortedArrayUsingSelector:@selector(compare:)];
      if (!function.empty()) {
        if (!program.functions[ToNS(function)]) {
          job.error = path + " has no function " + function + " (it has " + FromNS([names componentsJoinedByString:@", "]) + ")";
          return;
        }
        names = @[ ToNS(function) ];
      }
      auto functions = std::make_shared<std::vector<PlanFunction>>();
      for (NSString* name in names) {
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

}  // namespace coreml_addon
