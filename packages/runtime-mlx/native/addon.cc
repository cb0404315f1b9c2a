// Module entry: refuses to load against a libmlx other than the one whose headers it was built with
// (MLX changes C++ signatures, hence the ABI, even between patch releases), then registers the API.
#include <string>

#include "common.h"

namespace rmlx {

namespace {

std::string HeaderVersion() {
  return std::to_string(MLX_VERSION_MAJOR) + "." + std::to_string(MLX_VERSION_MINOR) + "." +
         std::to_string(MLX_VERSION_PATCH);
}

// "0.32.4" matches "0.32.4" and dev builds "0.32.4.dev20260101+abc".
bool SameVersion(const std::string& runtime, const std::string& header) {
  return runtime == header || (runtime.rfind(header, 0) == 0 && runtime.size() > header.size() &&
                               runtime[header.size()] == '.');
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  std::string header = HeaderVersion();
  std::string runtime = mx::version();
  if (!SameVersion(runtime, header)) {
    throw Napi::Error::New(env, "runtime-mlx: the addon was built against MLX " + header +
                                    " headers but loaded libmlx " + runtime +
                                    "; rebuild it (pnpm --filter @anemll-qwen35/runtime-mlx build:native) "
                                    "or reinstall MLX " + header);
  }
  env.SetInstanceData<AddonData>(new AddonData());
  RegisterArray(env, exports);
  RegisterOps(env, exports);
  RegisterFused(env, exports);
  RegisterIo(env, exports);
  RegisterRuntime(env, exports);
  RegisterCpuKernels(env, exports);
  RegisterDistributed(env, exports);
  exports.Set("mlxVersion", Napi::String::New(env, runtime));
  exports.Set("headerVersion", Napi::String::New(env, header));
  exports.Set("builtAgainst", Napi::String::New(env, RUNTIME_MLX_BUILT_AGAINST));
  return exports;
}

}  // namespace rmlx

// NODE_API_MODULE pastes the name into identifiers, so it needs an unqualified function.
static Napi::Object InitRuntimeMlx(Napi::Env env, Napi::Object exports) {
  return rmlx::Init(env, exports);
}

NODE_API_MODULE(runtime_mlx, InitRuntimeMlx)
