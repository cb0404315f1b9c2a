// safetensors through MLX's own reader/writer (arrays load lazily: the file is read at eval).
#include <unordered_map>

#include "common.h"

namespace rmlx {

namespace {

// loadSafetensors(path) -> { arrays: Record<string, MxArray>, metadata: Record<string, string> }
Napi::Value LoadSafetensors(const Napi::CallbackInfo& info) {
  Args args(info, "loadSafetensors");
  std::string path = args.string(0, "path");
  auto [arrays, metadata] = mx::load_safetensors(path);
  Napi::Env env = info.Env();
  Napi::Object outArrays = Napi::Object::New(env);
  for (auto& [name, a] : arrays) outArrays.Set(name, Wrap(env, a));
  Napi::Object outMeta = Napi::Object::New(env);
  for (auto& [key, value] : metadata) outMeta.Set(key, Napi::String::New(env, value));
  Napi::Object out = Napi::Object::New(env);
  out.Set("arrays", outArrays);
  out.Set("metadata", outMeta);
  return out;
}

// saveSafetensors(path, arrays: Record<string, MxArray>, metadata?: Record<string, string>)
// MLX appends ".safetensors" to a path without that suffix; the TS layer always passes one.
Napi::Value SaveSafetensors(const Napi::CallbackInfo& info) {
  Args args(info, "saveSafetensors");
  std::string path = args.string(0, "path");
  if (!args.has(1) || !info[1].IsObject()) args.fail(1, "arrays", "an object of name -> MxArray");
  Napi::Object obj = info[1].As<Napi::Object>();
  std::unordered_map<std::string, mx::array> arrays;
  Napi::Array names = obj.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); ++i) {
    std::string name = names.Get(i).As<Napi::String>().Utf8Value();
    arrays.emplace(name, ArrayFromValue(info.Env(), obj.Get(name), "saveSafetensors", "tensor '" + name + "'"));
  }
  std::unordered_map<std::string, std::string> metadata;
  if (args.has(2)) {
    if (!info[2].IsObject()) args.fail(2, "metadata", "an object of string -> string");
    Napi::Object meta = info[2].As<Napi::Object>();
    Napi::Array keys = meta.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); ++i) {
      std::string key = keys.Get(i).As<Napi::String>().Utf8Value();
      Napi::Value value = meta.Get(key);
      if (!value.IsString()) args.fail(2, "metadata", "an object of string -> string ('" + key + "' is not a string)");
      metadata.emplace(key, value.As<Napi::String>().Utf8Value());
    }
  }
  mx::save_safetensors(path, std::move(arrays), std::move(metadata));
  return info.Env().Undefined();
}

}  // namespace

void RegisterIo(Napi::Env env, Napi::Object exports) {
  exports.Set("loadSafetensors", Fn<LoadSafetensors>(env, "loadSafetensors"));
  exports.Set("saveSafetensors", Fn<SaveSafetensors>(env, "saveSafetensors"));
}

}  // namespace rmlx
