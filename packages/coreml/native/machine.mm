// What this Mac has and what this process holds: the macOS version, the compute devices Core ML can
// use (whether there is a Neural Engine at all: virtual Macs have none, and Core ML then runs
// everything elsewhere without a word), and the process's memory footprint (to see what loading
// or unloading a function costs).
//
// Apple APIs: MLAllComputeDevices() (macOS 14), MLCPUComputeDevice, MLGPUComputeDevice.metalDevice,
// MLNeuralEngineComputeDevice.totalCoreCount (macOS 14); -[NSProcessInfo operatingSystemVersion];
// task_info(TASK_VM_INFO) from <mach/task_info.h>: phys_footprint (what Activity Monitor calls
// Memory), ledger_phys_footprint_peak and ledger_tag_neural_footprint.

#include "addon.h"

#include <mach/mach.h>

namespace coreml_addon {

DeviceKind KindOf(id<MLComputeDeviceProtocol> d) {
  if (!d) return DeviceKind::None;
  if ([(id)d isKindOfClass:[MLNeuralEngineComputeDevice class]]) return DeviceKind::NeuralEngine;
  if ([(id)d isKindOfClass:[MLGPUComputeDevice class]]) return DeviceKind::GPU;
  if ([(id)d isKindOfClass:[MLCPUComputeDevice class]]) return DeviceKind::CPU;
  return DeviceKind::Other;
}

namespace {

struct DeviceInfo {
  DeviceKind kind = DeviceKind::Other;
  std::string className;
  int64_t totalCoreCount = -1;  // Neural Engine only
  std::string name;             // GPU only: its Metal device's name ("" when Core ML gives none)
};

const char* KindName(DeviceKind k) {
  switch (k) {
    case DeviceKind::CPU: return "cpu";
    case DeviceKind::GPU: return "gpu";
    case DeviceKind::NeuralEngine: return "neuralEngine";
    case DeviceKind::None:
    case DeviceKind::Other: break;
  }
  return "other";
}

}  // namespace

// computeDevices() → Promise<[{kind: "cpu" | "gpu" | "neuralEngine" | "other", className,
//   totalCoreCount?, name?}]>: MLAllComputeDevices(), in Core ML's order.
Napi::Value ComputeDevices(const Napi::CallbackInfo& info) {
  return Run(info.Env(), WorkQueue(), "computeDevices", [](Job& job) {
    auto devices = std::make_shared<std::vector<DeviceInfo>>();
    for (id<MLComputeDeviceProtocol> d in MLAllComputeDevices()) {
      DeviceInfo di;
      di.kind = KindOf(d);
      di.className = FromNS(NSStringFromClass([(id)d class]));
      if (di.kind == DeviceKind::NeuralEngine) di.totalCoreCount = ((MLNeuralEngineComputeDevice*)d).totalCoreCount;
      if (di.kind == DeviceKind::GPU) {
        // MTLDevice.name by key-value coding: the addon then needs no Metal headers nor framework
        id metal = ((MLGPUComputeDevice*)d).metalDevice;
        id name = metal ? [metal valueForKey:@"name"] : nil;
        if ([name isKindOfClass:[NSString class]]) di.name = FromNS((NSString*)name);
      }
      devices->push_back(std::move(di));
    }
    job.value = [devices](Napi::Env env) -> Napi::Value {
      Napi::Array out = Napi::Array::New(env, devices->size());
      for (size_t i = 0; i < devices->size(); i++) {
        const DeviceInfo& di = (*devices)[i];
        Napi::Object o = Napi::Object::New(env);
        o.Set("kind", KindName(di.kind));
        o.Set("className", di.className);
        if (di.totalCoreCount >= 0) o.Set("totalCoreCount", static_cast<double>(di.totalCoreCount));
        if (di.kind == DeviceKind::GPU) o.Set("name", di.name.empty() ? env.Null() : Napi::String::New(env, di.name));
        out.Set(static_cast<uint32_t>(i), o);
      }
      return out;
    };
  });
}

// memoryFootprint() → {physFootprint, physFootprintPeak, neuralFootprint} in bytes, each null when
// this kernel's task_vm_info lacks it. Cheap (one system call), so it answers on the JS thread.
Napi::Value MemoryFootprint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  task_vm_info_data_t vm = {};
  mach_msg_type_number_t count = TASK_VM_INFO_COUNT;
  const kern_return_t kr = task_info(mach_task_self(), TASK_VM_INFO, reinterpret_cast<task_info_t>(&vm), &count);
  if (kr != KERN_SUCCESS) throw Napi::Error::New(env, std::string("task_info(TASK_VM_INFO) failed: ") + mach_error_string(kr));
  auto field = [&](mach_msg_type_number_t since, double value) -> Napi::Value {
    return count >= since ? static_cast<Napi::Value>(Napi::Number::New(env, value)) : env.Null();
  };
  Napi::Object o = Napi::Object::New(env);
  o.Set("physFootprint", field(TASK_VM_INFO_REV1_COUNT, static_cast<double>(vm.phys_footprint)));
  o.Set("physFootprintPeak", field(TASK_VM_INFO_REV3_COUNT, static_cast<double>(vm.ledger_phys_footprint_peak)));
  o.Set("neuralFootprint", field(TASK_VM_INFO_REV3_COUNT, static_cast<double>(vm.ledger_tag_neural_footprint)));
  return o;
}

Napi::Value MacOSVersion(const Napi::CallbackInfo& info) {
  NSOperatingSystemVersion v = [[NSProcessInfo processInfo] operatingSystemVersion];
  return Napi::String::New(info.Env(), std::to_string(v.majorVersion) + "." + std::to_string(v.minorVersion));
}

}  // namespace coreml_addon
