// The MLX ops the Qwen3.5 port uses, each a thin positional wrapper: argument checks here, logic in TS.
#include "common.h"

namespace rmlx {

namespace {

using UnaryFn = mx::array (*)(const mx::array&, mx::StreamOrDevice);
using BinaryFn = mx::array (*)(const mx::array&, const mx::array&, mx::StreamOrDevice);
using ReduceAxesFn = mx::array (*)(const mx::array&, const std::vector<int>&, bool, mx::StreamOrDevice);
using ReduceAllFn = mx::array (*)(const mx::array&, bool, mx::StreamOrDevice);
using ArgReduceAxisFn = mx::array (*)(const mx::array&, int, bool, mx::StreamOrDevice);

// Composite elementwise ops, in the same shape as MLX's so the templates below take them.
mx::array Silu(const mx::array& x, mx::StreamOrDevice s) {
  return mx::multiply(x, mx::sigmoid(x, s), s);
}
mx::array Softplus(const mx::array& x, mx::StreamOrDevice s) {
  // softplus(x) = log(1 + e^x) = logaddexp(x, 0): stable for large |x|.
  return mx::logaddexp(x, mx::array(0.0f, x.dtype()), s);
}
mx::array Contiguous(const mx::array& x, mx::StreamOrDevice s) {
  return mx::contiguous(x, false, s);
}

// op(a)
template <Lit name, UnaryFn F>
Napi::Value Unary(const Napi::CallbackInfo& info) {
  Args args(info, name.s);
  return Wrap(info.Env(), F(args.array(0, "a"), {}));
}

// op(a, b): either side may be a JS number (a weak scalar typed like the other side).
template <Lit name, BinaryFn F>
Napi::Value Binary(const Napi::CallbackInfo& info) {
  Args args(info, name.s);
  bool aScalar = info.Length() > 0 && (info[0].IsNumber() || info[0].IsBoolean());
  if (aScalar) {
    mx::array b = args.arrayOrScalar(1, "b", nullptr);
    return Wrap(info.Env(), F(args.arrayOrScalar(0, "a", &b), b, {}));
  }
  const mx::array& a = args.array(0, "a");
  return Wrap(info.Env(), F(a, args.arrayOrScalar(1, "b", &a), {}));
}

// op(a, axes?, keepdims?)
template <Lit name, ReduceAxesFn FAxes, ReduceAllFn FAll>
Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Args args(info, name.s);
  const mx::array& a = args.array(0, "a");
  auto axes = args.axes(1, "axes");
  bool keepdims = args.boolean(2, "keepdims", false);
  return Wrap(info.Env(), axes ? FAxes(a, *axes, keepdims, {}) : FAll(a, keepdims, {}));
}

// op(a, axis?, keepdims?) for argmax / argmin.
template <Lit name, ArgReduceAxisFn FAxis, ReduceAllFn FAll>
Napi::Value ArgReduce(const Napi::CallbackInfo& info) {
  Args args(info, name.s);
  const mx::array& a = args.array(0, "a");
  auto axis = args.optInteger(1, "axis");
  bool keepdims = args.boolean(2, "keepdims", false);
  return Wrap(info.Env(), axis ? FAxis(a, *axis, keepdims, {}) : FAll(a, keepdims, {}));
}

// softmax(a, axes?, precise?)
Napi::Value Softmax(const Napi::CallbackInfo& info) {
  Args args(info, "softmax");
  const mx::array& a = args.array(0, "a");
  auto axes = args.axes(1, "axes");
  bool precise = args.boolean(2, "precise", false);
  return Wrap(info.Env(), axes ? mx::softmax(a, *axes, precise) : mx::softmax(a, precise));
}

// cumsum(a, axis, reverse?, inclusive?)
Napi::Value Cumsum(const Napi::CallbackInfo& info) {
  Args args(info, "cumsum");
  return Wrap(info.Env(), mx::cumsum(args.array(0, "a"), args.integer(1, "axis"), args.boolean(2, "reverse", false),
                                     args.boolean(3, "inclusive", true)));
}

// matmul(a, b)
Napi::Value Matmul(const Napi::CallbackInfo& info) {
  Args args(info, "matmul");
  return Wrap(info.Env(), mx::matmul(args.array(0, "a"), args.array(1, "b")));
}

// reshape(a, shape)
Napi::Value Reshape(const Napi::CallbackInfo& info) {
  Args args(info, "reshape");
  std::vector<int> dims = args.ints(1, "shape");  // may hold one -1
  return Wrap(info.Env(), mx::reshape(args.array(0, "a"), mx::Shape(dims.begin(), dims.end())));
}

// transpose(a, axes?)
Napi::Value Transpose(const Napi::CallbackInfo& info) {
  Args args(info, "transpose");
  const mx::array& a = args.array(0, "a");
  return Wrap(info.Env(), args.has(1) ? mx::transpose(a, args.ints(1, "axes")) : mx::transpose(a));
}

// expandDims(a, axes)
Napi::Value ExpandDims(const Napi::CallbackInfo& info) {
  Args args(info, "expandDims");
  return Wrap(info.Env(), mx::expand_dims(args.array(0, "a"), *args.axes(1, "axes")));
}

// squeeze(a, axes?)
Napi::Value Squeeze(const Napi::CallbackInfo& info) {
  Args args(info, "squeeze");
  const mx::array& a = args.array(0, "a");
  auto axes = args.axes(1, "axes");
  return Wrap(info.Env(), axes ? mx::squeeze(a, *axes) : mx::squeeze(a));
}

// flatten(a, startAxis?, endAxis?)
Napi::Value Flatten(const Napi::CallbackInfo& info) {
  Args args(info, "flatten");
  return Wrap(info.Env(),
              mx::flatten(args.array(0, "a"), args.integer(1, "startAxis", 0), args.integer(2, "endAxis", -1)));
}

// broadcastTo(a, shape)
Napi::Value BroadcastTo(const Napi::CallbackInfo& info) {
  Args args(info, "broadcastTo");
  return Wrap(info.Env(), mx::broadcast_to(args.array(0, "a"), args.shape(1, "shape")));
}

// astype(a, dtype)
Napi::Value Astype(const Napi::CallbackInfo& info) {
  Args args(info, "astype");
  return Wrap(info.Env(), mx::astype(args.array(0, "a"), args.dtype(1, "dtype")));
}

// concatenate(arrays, axis?)
Napi::Value Concatenate(const Napi::CallbackInfo& info) {
  Args args(info, "concatenate");
  return Wrap(info.Env(), mx::concatenate(args.arrays(0, "arrays"), args.integer(1, "axis", 0)));
}

// stack(arrays, axis?)
Napi::Value Stack(const Napi::CallbackInfo& info) {
  Args args(info, "stack");
  return Wrap(info.Env(), mx::stack(args.arrays(0, "arrays"), args.integer(1, "axis", 0)));
}

// split(a, sectionsOrIndices: number | number[], axis?)
Napi::Value Split(const Napi::CallbackInfo& info) {
  Args args(info, "split");
  const mx::array& a = args.array(0, "a");
  int axis = args.integer(2, "axis", 0);
  if (info.Length() > 1 && info[1].IsNumber()) {
    return WrapList(info.Env(), mx::split(a, args.integer(1, "sections"), axis));
  }
  std::vector<int> indices = args.ints(1, "indices");
  return WrapList(info.Env(), mx::split(a, mx::Shape(indices.begin(), indices.end()), axis));
}

// slice(a, start, stop, strides?): one entry per axis; negative indices count from the end.
Napi::Value Slice(const Napi::CallbackInfo& info) {
  Args args(info, "slice");
  const mx::array& a = args.array(0, "a");
  std::vector<int> start = args.ints(1, "start");
  std::vector<int> stop = args.ints(2, "stop");
  mx::Shape st(start.begin(), start.end()), sp(stop.begin(), stop.end());
  if (args.has(3)) {
    std::vector<int> strides = args.ints(3, "strides");
    return Wrap(info.Env(), mx::slice(a, st, sp, mx::Shape(strides.begin(), strides.end())));
  }
  return Wrap(info.Env(), mx::slice(a, st, sp));
}

// sliceUpdate(src, update, start, stop, strides?): a new array equal to src with the slice replaced.
Napi::Value SliceUpdate(const Napi::CallbackInfo& info) {
  Args args(info, "sliceUpdate");
  const mx::array& src = args.array(0, "src");
  const mx::array& update = args.array(1, "update");
  std::vector<int> start = args.ints(2, "start");
  std::vector<int> stop = args.ints(3, "stop");
  mx::Shape st(start.begin(), start.end()), sp(stop.begin(), stop.end());
  if (args.has(4)) {
    std::vector<int> strides = args.ints(4, "strides");
    return Wrap(info.Env(), mx::slice_update(src, update, st, sp, mx::Shape(strides.begin(), strides.end())));
  }
  return Wrap(info.Env(), mx::slice_update(src, update, st, sp));
}

// take(a, indices: MxArray | number, axis?)  (embedding lookup: take(table, ids, 0))
Napi::Value Take(const Napi::CallbackInfo& info) {
  Args args(info, "take");
  const mx::array& a = args.array(0, "a");
  auto axis = args.optInteger(2, "axis");
  if (info.Length() > 1 && info[1].IsNumber()) {
    int index = args.integer(1, "index");
    return Wrap(info.Env(), axis ? mx::take(a, index, *axis) : mx::take(a, index));
  }
  const mx::array& indices = args.array(1, "indices");
  return Wrap(info.Env(), axis ? mx::take(a, indices, *axis) : mx::take(a, indices));
}

// takeAlongAxis(a, indices, axis)
Napi::Value TakeAlongAxis(const Napi::CallbackInfo& info) {
  Args args(info, "takeAlongAxis");
  return Wrap(info.Env(),
              mx::take_along_axis(args.array(0, "a"), args.array(1, "indices"), args.integer(2, "axis")));
}

// where(condition, x, y): x and y may be numbers.
Napi::Value Where(const Napi::CallbackInfo& info) {
  Args args(info, "where");
  const mx::array& cond = args.array(0, "condition");
  bool xArray = info.Length() > 1 && !info[1].IsNumber() && !info[1].IsBoolean();
  if (xArray) {
    const mx::array& x = args.array(1, "x");
    return Wrap(info.Env(), mx::where(cond, x, args.arrayOrScalar(2, "y", &x)));
  }
  mx::array y = args.arrayOrScalar(2, "y", nullptr);
  bool yArray = !(info[2].IsNumber() || info[2].IsBoolean());
  return Wrap(info.Env(), mx::where(cond, args.arrayOrScalar(1, "x", yArray ? &y : nullptr), y));
}

// repeat(a, repeats, axis?)  (mx.repeat: each element repeated consecutively, as mlx-lm's GQA uses)
Napi::Value Repeat(const Napi::CallbackInfo& info) {
  Args args(info, "repeat");
  const mx::array& a = args.array(0, "a");
  int repeats = args.integer(1, "repeats");
  auto axis = args.optInteger(2, "axis");
  return Wrap(info.Env(), axis ? mx::repeat(a, repeats, *axis) : mx::repeat(a, repeats));
}

// topk(a, k, axis?): the k largest values (unordered), along axis (default last).
Napi::Value Topk(const Napi::CallbackInfo& info) {
  Args args(info, "topk");
  return Wrap(info.Env(), mx::topk(args.array(0, "a"), args.integer(1, "k"), args.integer(2, "axis", -1)));
}

// argpartition(a, kth, axis?)
Napi::Value Argpartition(const Napi::CallbackInfo& info) {
  Args args(info, "argpartition");
  return Wrap(info.Env(),
              mx::argpartition(args.array(0, "a"), args.integer(1, "kth"), args.integer(2, "axis", -1)));
}

// argsort(a, axis?)
Napi::Value Argsort(const Napi::CallbackInfo& info) {
  Args args(info, "argsort");
  return Wrap(info.Env(), mx::argsort(args.array(0, "a"), args.integer(1, "axis", -1)));
}

// sort(a, axis?)
Napi::Value Sort(const Napi::CallbackInfo& info) {
  Args args(info, "sort");
  return Wrap(info.Env(), mx::sort(args.array(0, "a"), args.integer(1, "axis", -1)));
}

// quantize(w, groupSize?, bits?, mode?) -> [wq, scales, biases]  (affine: biases present)
Napi::Value Quantize(const Napi::CallbackInfo& info) {
  Args args(info, "quantize");
  return WrapList(info.Env(), mx::quantize(args.array(0, "w"), args.optInteger(1, "groupSize"),
                                           args.optInteger(2, "bits"), args.string(3, "mode", "affine")));
}

// dequantize(wq, scales, biases?, groupSize?, bits?, mode?, dtype?)
Napi::Value Dequantize(const Napi::CallbackInfo& info) {
  Args args(info, "dequantize");
  return Wrap(info.Env(), mx::dequantize(args.array(0, "wq"), args.array(1, "scales"), args.optArray(2, "biases"),
                                         args.optInteger(3, "groupSize"), args.optInteger(4, "bits"),
                                         args.string(5, "mode", "affine"), std::nullopt,
                                         args.optDtype(6, "dtype")));
}

// quantizedMatmul(x, wq, scales, biases?, transpose?, groupSize?, bits?, mode?)
Napi::Value QuantizedMatmul(const Napi::CallbackInfo& info) {
  Args args(info, "quantizedMatmul");
  return Wrap(info.Env(),
              mx::quantized_matmul(args.array(0, "x"), args.array(1, "wq"), args.array(2, "scales"),
                                   args.optArray(3, "biases"), args.boolean(4, "transpose", true),
                                   args.optInteger(5, "groupSize"), args.optInteger(6, "bits"),
                                   args.string(7, "mode", "affine")));
}

// gatherMm(a, b, lhsIndices?, rhsIndices?, sortedIndices?)  (MoE experts, unquantized)
Napi::Value GatherMm(const Napi::CallbackInfo& info) {
  Args args(info, "gatherMm");
  return Wrap(info.Env(), mx::gather_mm(args.array(0, "a"), args.array(1, "b"), args.optArray(2, "lhsIndices"),
                                        args.optArray(3, "rhsIndices"), args.boolean(4, "sortedIndices", false)));
}

// gatherQmm(x, wq, scales, biases?, lhsIndices?, rhsIndices?, transpose?, groupSize?, bits?, mode?, sorted?)
Napi::Value GatherQmm(const Napi::CallbackInfo& info) {
  Args args(info, "gatherQmm");
  return Wrap(info.Env(),
              mx::gather_qmm(args.array(0, "x"), args.array(1, "wq"), args.array(2, "scales"),
                             args.optArray(3, "biases"), args.optArray(4, "lhsIndices"),
                             args.optArray(5, "rhsIndices"), args.boolean(6, "transpose", true),
                             args.optInteger(7, "groupSize"), args.optInteger(8, "bits"),
                             args.string(9, "mode", "affine"), std::nullopt, args.boolean(10, "sortedIndices", false)));
}

// conv1d(x [N, L, Cin], w [Cout, K, Cin/groups], stride?, padding?, dilation?, groups?)
Napi::Value Conv1d(const Napi::CallbackInfo& info) {
  Args args(info, "conv1d");
  return Wrap(info.Env(), mx::conv1d(args.array(0, "x"), args.array(1, "w"), args.integer(2, "stride", 1),
                                     args.integer(3, "padding", 0), args.integer(4, "dilation", 1),
                                     args.integer(5, "groups", 1)));
}

// rmsNorm(x, weight | null, eps)
Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
  Args args(info, "rmsNorm");
  return Wrap(info.Env(), mx::fast::rms_norm(args.array(0, "x"), args.optArray(1, "weight"),
                                             static_cast<float>(args.number(2, "eps"))));
}

// layerNorm(x, weight | null, bias | null, eps)
Napi::Value LayerNorm(const Napi::CallbackInfo& info) {
  Args args(info, "layerNorm");
  return Wrap(info.Env(), mx::fast::layer_norm(args.array(0, "x"), args.optArray(1, "weight"),
                                               args.optArray(2, "bias"), static_cast<float>(args.number(3, "eps"))));
}

// rope(x, dims, traditional, base | null, scale, offset: number | MxArray, freqs?)
Napi::Value Rope(const Napi::CallbackInfo& info) {
  Args args(info, "rope");
  const mx::array& x = args.array(0, "x");
  int dims = args.integer(1, "dims");
  bool traditional = args.boolean(2, "traditional", false);
  std::optional<float> base;
  if (args.has(3)) base = static_cast<float>(args.number(3, "base"));
  float scale = static_cast<float>(args.number(4, "scale", 1.0));
  auto freqs = args.optArray(6, "freqs");
  if (info.Length() > 5 && info[5].IsObject()) {
    return Wrap(info.Env(), mx::fast::rope(x, dims, traditional, base, scale, args.array(5, "offset"), freqs));
  }
  return Wrap(info.Env(), mx::fast::rope(x, dims, traditional, base, scale, args.integer(5, "offset", 0), freqs));
}

// sdpa(q [B,Hq,L,D], k [B,Hkv,S,D], v [B,Hkv,S,Dv], scale, mask: "causal" | MxArray | null, sinks?)
Napi::Value Sdpa(const Napi::CallbackInfo& info) {
  Args args(info, "scaledDotProductAttention");
  const mx::array& q = args.array(0, "q");
  const mx::array& k = args.array(1, "k");
  const mx::array& v = args.array(2, "v");
  float scale = static_cast<float>(args.number(3, "scale"));
  std::string mode;
  std::optional<mx::array> maskArr;
  if (args.has(4)) {
    if (info[4].IsString()) {
      mode = args.string(4, "mask");
      if (mode != "causal") args.fail(4, "mask", "\"causal\", an MxArray or null");
    } else {
      maskArr = args.array(4, "mask");
      mode = "array";
    }
  }
  return Wrap(info.Env(),
              mx::fast::scaled_dot_product_attention(q, k, v, scale, mode, maskArr, args.optArray(5, "sinks")));
}

// randomSeed(seed)
Napi::Value RandomSeed(const Napi::CallbackInfo& info) {
  Args args(info, "randomSeed");
  mx::random::seed(static_cast<uint64_t>(args.number(0, "seed")));
  return info.Env().Undefined();
}

// randomCategorical(logits, axis?, numSamples?)
Napi::Value RandomCategorical(const Napi::CallbackInfo& info) {
  Args args(info, "randomCategorical");
  const mx::array& logits = args.array(0, "logits");
  int axis = args.integer(1, "axis", -1);
  auto n = args.optInteger(2, "numSamples");
  return Wrap(info.Env(), n ? mx::random::categorical(logits, axis, *n) : mx::random::categorical(logits, axis));
}

// randomUniform(shape, dtype?, low?, high?)
Napi::Value RandomUniform(const Napi::CallbackInfo& info) {
  Args args(info, "randomUniform");
  mx::Shape shape = args.shape(0, "shape");
  mx::Dtype dtype = args.has(1) ? args.dtype(1, "dtype") : mx::float32;
  mx::array lo(static_cast<float>(args.number(2, "low", 0.0)));
  mx::array hi(static_cast<float>(args.number(3, "high", 1.0)));
  return Wrap(info.Env(), mx::random::uniform(lo, hi, shape, dtype));
}

// randomNormal(shape, dtype?, loc?, scale?)
Napi::Value RandomNormal(const Napi::CallbackInfo& info) {
  Args args(info, "randomNormal");
  mx::Shape shape = args.shape(0, "shape");
  mx::Dtype dtype = args.has(1) ? args.dtype(1, "dtype") : mx::float32;
  return Wrap(info.Env(), mx::random::normal(shape, dtype, static_cast<float>(args.number(2, "loc", 0.0)),
                                             static_cast<float>(args.number(3, "scale", 1.0))));
}

}  // namespace

void RegisterOps(Napi::Env env, Napi::Object exports) {
  // elementwise, one input
  exports.Set("abs", Fn<Unary<"abs", &mx::abs>>(env, "abs"));
  exports.Set("negative", Fn<Unary<"negative", &mx::negative>>(env, "negative"));
  exports.Set("exp", Fn<Unary<"exp", &mx::exp>>(env, "exp"));
  exports.Set("log", Fn<Unary<"log", &mx::log>>(env, "log"));
  exports.Set("log1p", Fn<Unary<"log1p", &mx::log1p>>(env, "log1p"));
  exports.Set("sigmoid", Fn<Unary<"sigmoid", &mx::sigmoid>>(env, "sigmoid"));
  exports.Set("tanh", Fn<Unary<"tanh", &mx::tanh>>(env, "tanh"));
  exports.Set("sqrt", Fn<Unary<"sqrt", &mx::sqrt>>(env, "sqrt"));
  exports.Set("rsqrt", Fn<Unary<"rsqrt", &mx::rsqrt>>(env, "rsqrt"));
  exports.Set("square", Fn<Unary<"square", &mx::square>>(env, "square"));
  exports.Set("reciprocal", Fn<Unary<"reciprocal", &mx::reciprocal>>(env, "reciprocal"));
  exports.Set("sin", Fn<Unary<"sin", &mx::sin>>(env, "sin"));
  exports.Set("cos", Fn<Unary<"cos", &mx::cos>>(env, "cos"));
  exports.Set("floor", Fn<Unary<"floor", &mx::floor>>(env, "floor"));
  exports.Set("ceil", Fn<Unary<"ceil", &mx::ceil>>(env, "ceil"));
  exports.Set("erf", Fn<Unary<"erf", &mx::erf>>(env, "erf"));
  exports.Set("logicalNot", Fn<Unary<"logicalNot", &mx::logical_not>>(env, "logicalNot"));
  exports.Set("silu", Fn<Unary<"silu", &Silu>>(env, "silu"));
  exports.Set("softplus", Fn<Unary<"softplus", &Softplus>>(env, "softplus"));
  exports.Set("contiguous", Fn<Unary<"contiguous", &Contiguous>>(env, "contiguous"));
  // elementwise, two inputs (numbers allowed on either side)
  exports.Set("add", Fn<Binary<"add", &mx::add>>(env, "add"));
  exports.Set("subtract", Fn<Binary<"subtract", &mx::subtract>>(env, "subtract"));
  exports.Set("multiply", Fn<Binary<"multiply", &mx::multiply>>(env, "multiply"));
  exports.Set("divide", Fn<Binary<"divide", &mx::divide>>(env, "divide"));
  exports.Set("power", Fn<Binary<"power", &mx::power>>(env, "power"));
  exports.Set("maximum", Fn<Binary<"maximum", &mx::maximum>>(env, "maximum"));
  exports.Set("minimum", Fn<Binary<"minimum", &mx::minimum>>(env, "minimum"));
  exports.Set("logaddexp", Fn<Binary<"logaddexp", &mx::logaddexp>>(env, "logaddexp"));
  exports.Set("remainder", Fn<Binary<"remainder", &mx::remainder>>(env, "remainder"));
  exports.Set("floorDivide", Fn<Binary<"floorDivide", &mx::floor_divide>>(env, "floorDivide"));
  exports.Set("equal", Fn<Binary<"equal", &mx::equal>>(env, "equal"));
  exports.Set("notEqual", Fn<Binary<"notEqual", &mx::not_equal>>(env, "notEqual"));
  exports.Set("greater", Fn<Binary<"greater", &mx::greater>>(env, "greater"));
  exports.Set("greaterEqual", Fn<Binary<"greaterEqual", &mx::greater_equal>>(env, "greaterEqual"));
  exports.Set("less", Fn<Binary<"less", &mx::less>>(env, "less"));
  exports.Set("lessEqual", Fn<Binary<"lessEqual", &mx::less_equal>>(env, "lessEqual"));
  exports.Set("logicalAnd", Fn<Binary<"logicalAnd", &mx::logical_and>>(env, "logicalAnd"));
  exports.Set("logicalOr", Fn<Binary<"logicalOr", &mx::logical_or>>(env, "logicalOr"));
  exports.Set("matmul", Fn<Matmul>(env, "matmul"));
  // reductions
  exports.Set("sum", Fn<Reduce<"sum", &mx::sum, &mx::sum>>(env, "sum"));
  exports.Set("mean", Fn<Reduce<"mean", &mx::mean, &mx::mean>>(env, "mean"));
  exports.Set("max", Fn<Reduce<"max", &mx::max, &mx::max>>(env, "max"));
  exports.Set("min", Fn<Reduce<"min", &mx::min, &mx::min>>(env, "min"));
  exports.Set("prod", Fn<Reduce<"prod", &mx::prod, &mx::prod>>(env, "prod"));
  exports.Set("logsumexp", Fn<Reduce<"logsumexp", &mx::logsumexp, &mx::logsumexp>>(env, "logsumexp"));
  exports.Set("argmax", Fn<ArgReduce<"argmax", &mx::argmax, &mx::argmax>>(env, "argmax"));
  exports.Set("argmin", Fn<ArgReduce<"argmin", &mx::argmin, &mx::argmin>>(env, "argmin"));
  exports.Set("softmax", Fn<Softmax>(env, "softmax"));
  exports.Set("cumsum", Fn<Cumsum>(env, "cumsum"));
  // shapes, indexing, selection
  exports.Set("reshape", Fn<Reshape>(env, "reshape"));
  exports.Set("transpose", Fn<Transpose>(env, "transpose"));
  exports.Set("expandDims", Fn<ExpandDims>(env, "expandDims"));
  exports.Set("squeeze", Fn<Squeeze>(env, "squeeze"));
  exports.Set("flatten", Fn<Flatten>(env, "flatten"));
  exports.Set("broadcastTo", Fn<BroadcastTo>(env, "broadcastTo"));
  exports.Set("astype", Fn<Astype>(env, "astype"));
  exports.Set("concatenate", Fn<Concatenate>(env, "concatenate"));
  exports.Set("stack", Fn<Stack>(env, "stack"));
  exports.Set("split", Fn<Split>(env, "split"));
  exports.Set("slice", Fn<Slice>(env, "slice"));
  exports.Set("sliceUpdate", Fn<SliceUpdate>(env, "sliceUpdate"));
  exports.Set("take", Fn<Take>(env, "take"));
  exports.Set("takeAlongAxis", Fn<TakeAlongAxis>(env, "takeAlongAxis"));
  exports.Set("where", Fn<Where>(env, "where"));
  exports.Set("repeat", Fn<Repeat>(env, "repeat"));
  exports.Set("topk", Fn<Topk>(env, "topk"));
  exports.Set("argpartition", Fn<Argpartition>(env, "argpartition"));
  exports.Set("argsort", Fn<Argsort>(env, "argsort"));
  exports.Set("sort", Fn<Sort>(env, "sort"));
  // linear algebra and quantization
  exports.Set("quantize", Fn<Quantize>(env, "quantize"));
  exports.Set("dequantize", Fn<Dequantize>(env, "dequantize"));
  exports.Set("quantizedMatmul", Fn<QuantizedMatmul>(env, "quantizedMatmul"));
  exports.Set("gatherMm", Fn<GatherMm>(env, "gatherMm"));
  exports.Set("gatherQmm", Fn<GatherQmm>(env, "gatherQmm"));
  exports.Set("conv1d", Fn<Conv1d>(env, "conv1d"));
  // fast kernels
  exports.Set("rmsNorm", Fn<RmsNorm>(env, "rmsNorm"));
  exports.Set("layerNorm", Fn<LayerNorm>(env, "layerNorm"));
  exports.Set("rope", Fn<Rope>(env, "rope"));
  exports.Set("scaledDotProductAttention", Fn<Sdpa>(env, "scaledDotProductAttention"));
  // random
  exports.Set("randomSeed", Fn<RandomSeed>(env, "randomSeed"));
  exports.Set("randomCategorical", Fn<RandomCategorical>(env, "randomCategorical"));
  exports.Set("randomUniform", Fn<RandomUniform>(env, "randomUniform"));
  exports.Set("randomNormal", Fn<RandomNormal>(env, "randomNormal"));
}

}  // namespace rmlx
