"""Expected outputs for the MIL op numerics tests (test/mil/ops-numerics.test.ts).

Independent of the TypeScript interpreter: numpy (float64, float16 ufuncs), MLX (conv, SDPA,
layer_norm) and coremltools' own decompression code (constexpr ops) compute every expectation.

    /work/main/.venv/bin/python packages/ir/test/mil/oracle/ops_oracle.py

writes ops_cases.json next to this file. Each case lists the op, its inputs (runtime or const),
literal parameters and, per precision mode, the expected outputs:
  fp32 mode: the float64 result rounded to float32;
  fp16 mode: for fp16-typed outputs the numpy float16 result (a float16 ufunc where numpy has
             one, else the exact result rounded to float16); other dtypes as in fp32 mode.
"""
import json
import pathlib

import mlx.core as mx
import numpy as np
from coremltools.converters.mil.mil.ops.defs.iOS18.compression import (
    constexpr_blockwise_shift_scale,
    constexpr_lut_to_dense,
)

rng = np.random.default_rng(20240607)
cases = []


def f16(shape, scale=1.0, lo=None):
    a = rng.standard_normal(shape) * scale
    if lo is not None:
        a = np.abs(a) + lo
    return a.astype(np.float16)


def short(a, digits):
    """Shortest decimal text that reads back to the same float32/float16 value."""
    return [float(f"{v:.{digits}g}") for v in np.asarray(a, np.float64).ravel().tolist()]


def tj(a, dtype, const=False):
    a = np.asarray(a)
    if dtype == "bool":
        data = a.astype(bool).ravel().tolist()
    elif dtype in ("fp16", "fp32"):
        data = short(a, 6 if dtype == "fp16" else 9)
    else:
        data = a.astype(np.int64).ravel().tolist()
    d = {"dtype": dtype, "shape": list(a.shape), "data": data}
    if const:
        d["const"] = True
    return d


def out(a, dtype):
    a = np.asarray(a)
    if dtype in ("fp16", "fp32"):
        data = short(a, 6) if a.dtype == np.float16 else short(a.astype(np.float32), 9)
    elif dtype == "bool":
        data = a.astype(bool).astype(int).ravel().tolist()
    else:
        data = a.astype(np.int64).ravel().tolist()
    return {"dtype": dtype, "shape": list(a.shape), "data": data}


def add(name, op, inputs, params, fp32, fp16=None, dtypes=None):
    """fp32/fp16: lists of arrays; dtypes: declared output dtypes."""
    dtypes = dtypes or ["fp16"] * len(fp32)
    e32 = [out(np.asarray(a).astype(np.float32) if d in ("fp16", "fp32") else a, d) for a, d in zip(fp32, dtypes)]
    if fp16 is None:
        fp16 = [np.asarray(a).astype(np.float16) if d == "fp16" else a for a, d in zip(fp32, dtypes)]
    e16 = [out(np.asarray(a).astype(np.float32) if d == "fp32" else a, d) for a, d in zip(fp16, dtypes)]
    cases.append({"name": name, "op": op, "inputs": inputs, "params": params, "expect": {"fp32": e32, "fp16": e16}})


D = np.float64

# ---- binary elementwise (fp16 in: numpy float16 ufuncs give the fp16 expectation) ----------
x = f16((2, 3, 4)); y = f16((3, 1))
add("add_broadcast", "add", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [x.astype(D) + y.astype(D)], [x + y])
x = f16((4, 5)); y = f16(())
add("sub_scalar", "sub", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [x.astype(D) - y.astype(D)], [x - y])
x = f16((3, 4)); y = f16((1, 4))
add("mul_row", "mul", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [x.astype(D) * y.astype(D)], [x * y])
x = f16((2, 5)); y = f16((2, 5), lo=0.5)
add("real_div", "real_div", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [x.astype(D) / y.astype(D)], [x / y])
x = f16((6,)); y = f16((6,))
add("maximum", "maximum", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [np.maximum(x, y).astype(D)])
add("minimum", "minimum", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [np.minimum(x, y).astype(D)])
x = f16((5,), lo=0.2); y = f16((5,))
add("pow", "pow", {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [x.astype(D) ** y.astype(D)], [x ** y])
x = np.array([7, -7, 7, -7, 0], np.float32); y = np.array([2, 2, -2, -2, 3], np.float32)
add("floor_div_fp32", "floor_div", {"x": tj(x, "fp32"), "y": tj(y, "fp32")}, {}, [np.floor_divide(x, y)], dtypes=["fp32"])
add("mod_fp32", "mod", {"x": tj(x, "fp32"), "y": tj(y, "fp32")}, {}, [np.mod(x, y)], dtypes=["fp32"])
xi = rng.integers(-1000, 1000, (3, 4)).astype(np.int32); yi = rng.integers(-1000, 1000, (4,)).astype(np.int32)
add("add_int32", "add", {"x": tj(xi, "int32"), "y": tj(yi, "int32")}, {}, [xi + yi], dtypes=["int32"])
add("mul_int32", "mul", {"x": tj(xi, "int32"), "y": tj(yi, "int32")}, {}, [xi * yi], dtypes=["int32"])
x = f16((3, 4)); y = x.copy(); y[0, :2] = f16((2,))
for op, fn in [("equal", np.equal), ("less", np.less), ("greater_equal", np.greater_equal)]:
    add(f"{op}_bool", op, {"x": tj(x, "fp16"), "y": tj(y, "fp16")}, {}, [fn(x, y)], dtypes=["bool"])
b1 = rng.random((4,)) > 0.5; b2 = rng.random((2, 4)) > 0.5
add("logical_and", "logical_and", {"x": tj(b1, "bool"), "y": tj(b2, "bool")}, {}, [np.logical_and(b1, b2)], dtypes=["bool"])

# ---- unary -----------------------------------------------------------------------------------
xs = f16((2, 8), scale=2.0)
xp = f16((2, 8), lo=0.05)
unary = {
    "abs": (xs, np.abs),
    "square": (xs, np.square),
    "sqrt": (xp, np.sqrt),
    "exp": (xs, np.exp),
    "tanh": (xs, np.tanh),
    "sigmoid": (xs, lambda v: 1 / (1 + np.exp(-v))),
    "silu": (xs, lambda v: v / (1 + np.exp(-v))),
    "softplus": (xs, lambda v: np.log1p(np.exp(v))),
    "relu": (xs, lambda v: np.maximum(v, 0)),
}
for op, (v, fn) in unary.items():
    add(op, op, {"x": tj(v, "fp16")}, {}, [fn(v.astype(D))])
add("rsqrt_eps", "rsqrt", {"x": tj(xp, "fp16")}, {"epsilon": 1e-3}, [1 / np.sqrt(xp.astype(D) + np.float32(1e-3))])
add("log_default_eps", "log", {"x": tj(xp, "fp16")}, {}, [np.log(xp.astype(D))])
add("inverse_fp32", "inverse", {"x": tj(xp.astype(np.float32), "fp32")}, {"epsilon": 0.0}, [1 / xp.astype(D)], dtypes=["fp32"])

# ---- reductions, softmax, layer_norm ------------------------------------------------------------
x = f16((2, 3, 4))
add("reduce_sum_axis1", "reduce_sum", {"x": tj(x, "fp16")}, {"axes": [1]}, [x.astype(D).sum(1)])
add("reduce_mean_keep", "reduce_mean", {"x": tj(x, "fp16")}, {"axes": [-1], "keep_dims": True}, [x.astype(D).mean(-1, keepdims=True)])
add("reduce_max_02", "reduce_max", {"x": tj(x, "fp16")}, {"axes": [0, 2]}, [x.astype(D).max((0, 2))])
add("reduce_sum_all", "reduce_sum", {"x": tj(x, "fp16")}, {}, [np.asarray(x.astype(D).sum())])
add("reduce_argmax", "reduce_argmax", {"x": tj(x, "fp16")}, {"axis": 1}, [x.argmax(1)], dtypes=["int32"])
add("softmax_last", "softmax", {"x": tj(x, "fp16")}, {}, [np.exp(x.astype(D)) / np.exp(x.astype(D)).sum(-1, keepdims=True)])
add("softmax_axis1", "softmax", {"x": tj(x, "fp16")}, {"axis": 1}, [np.exp(x.astype(D)) / np.exp(x.astype(D)).sum(1, keepdims=True)])
g = f16((4,)); be = f16((4,))
ln = mx.fast.layer_norm(mx.array(x.astype(np.float32)), mx.array(g.astype(np.float32)), mx.array(be.astype(np.float32)), 1e-5)
add("layer_norm_last", "layer_norm", {"x": tj(x, "fp16"), "gamma": tj(g, "fp16", True), "beta": tj(be, "fp16", True)},
    {"axes": [-1], "epsilon": 1e-5}, [np.array(ln)])
xd = x.astype(D); mu = xd.mean((1, 2), keepdims=True); var = ((xd - mu) ** 2).mean((1, 2), keepdims=True)
add("layer_norm_12", "layer_norm", {"x": tj(x, "fp16")}, {"axes": [1, 2], "epsilon": 1e-3}, [(xd - mu) / np.sqrt(var + 1e-3)])
xc = f16((3, 4))
add("cumsum_excl_rev", "cumsum", {"x": tj(xc, "fp16")}, {"axis": 1, "exclusive": True, "reverse": True},
    [np.flip(np.cumsum(np.flip(xc.astype(D), 1), 1), 1) - xc.astype(D)])

# ---- linear / matmul / conv -----------------------------------------------------------------------
x = f16((1, 3, 12)); w = f16((10, 12), scale=0.3); bias = f16((10,))
add("linear_bias", "linear", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True), "bias": tj(bias, "fp16", True)}, {},
    [x.astype(D) @ w.astype(D).T + bias.astype(D)])
x = f16((1, 1, 128)); w = f16((34, 128), scale=0.1)  # matvec through the SIMD kernel (+ 2 tail rows)
add("linear_matvec", "linear", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True)}, {}, [x.astype(D) @ w.astype(D).T])
x = f16((5, 64)); w = f16((20, 64), scale=0.1)  # several rows, scalar kernel
add("linear_rows", "linear", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True)}, {}, [x.astype(D) @ w.astype(D).T])
a = f16((2, 3, 4)); bm = f16((4, 5))
add("matmul_batch", "matmul", {"x": tj(a, "fp16"), "y": tj(bm, "fp16")}, {}, [a.astype(D) @ bm.astype(D)])
a = f16((2, 1, 3, 8)); bm = f16((4, 5, 8))
add("matmul_bcast_ty", "matmul", {"x": tj(a, "fp16"), "y": tj(bm, "fp16")}, {"transpose_y": True},
    [a.astype(D) @ np.swapaxes(bm.astype(D), -1, -2)])
a = f16((6, 3)); bm = f16((6, 2))
add("matmul_tx", "matmul", {"x": tj(a, "fp16"), "y": tj(bm, "fp16")}, {"transpose_x": True}, [a.astype(D).T @ bm.astype(D)])
v = f16((4,)); bm = f16((4, 3))
add("matmul_vec", "matmul", {"x": tj(v, "fp16"), "y": tj(bm, "fp16")}, {}, [v.astype(D) @ bm.astype(D)])


def mlx_conv(x, w, stride, pad_lo, pad_hi, dil, groups):
    """x [N, C, *S], w [Co, Ci/g, *K] (MIL layout) via MLX's channels-last conv."""
    nd = x.ndim - 2
    xl = np.moveaxis(x.astype(np.float32), 1, -1)
    wl = np.moveaxis(w.astype(np.float32), 1, -1)
    y = mx.conv_general(mx.array(xl), mx.array(wl), stride=stride, padding=(pad_lo, pad_hi), kernel_dilation=dil, groups=groups)
    return np.moveaxis(np.array(y), -1, 1)


x = f16((1, 6, 5)); w = f16((6, 1, 3)); bias = f16((6,))
add("conv_depthwise_causal", "conv", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True), "bias": tj(bias, "fp16", True)},
    {"pad_type": "custom", "pad": [2, 0], "groups": 6},
    [mlx_conv(x, w, [1], [2], [0], [1], 6) + bias.astype(np.float32)[None, :, None]])
x = f16((1, 4, 7, 6)); w = f16((5, 4, 3, 3), scale=0.3)
# "same" with stride 2: total pad max(0, s*ceil(i/s) - i + k - s) split floor/ceil
add("conv2d_same_s2", "conv", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True)}, {"pad_type": "same", "strides": [2, 2]},
    [mlx_conv(x, w, [2, 2], [1, 0], [1, 1], [1, 1], 1)])
x = f16((2, 8, 1, 3)); w = f16((12, 8, 1, 1), scale=0.3)
add("conv_pointwise", "conv", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True)}, {}, [mlx_conv(x, w, [1, 1], [0, 0], [0, 0], [1, 1], 1)])
x = f16((1, 4, 9)); w = f16((4, 2, 3))
add("conv_grouped_dilated", "conv", {"x": tj(x, "fp16"), "weight": tj(w, "fp16", True)}, {"groups": 2, "dilations": [2], "pad_type": "valid"},
    [mlx_conv(x, w, [1], [0], [0], [2], 2)])

# ---- tensor transformations ---------------------------------------------------------------------
a = f16((2, 2, 3)); b_ = f16((2, 1, 3)); c = f16((2, 3, 3))
add("concat3", "concat", {"values": [tj(a, "fp16"), tj(b_, "fp16"), tj(c, "fp16")]}, {"axis": 1}, [np.concatenate([a, b_, c], 1).astype(D)])
a = f16((2, 3)); b_ = f16((2, 3))
add("concat_interleave", "concat", {"values": [tj(a, "fp16"), tj(b_, "fp16")]}, {"axis": 0, "interleave": True},
    [np.stack([a, b_], 1).reshape(4, 3).astype(D)])
x = f16((2, 7))
add("split_sizes", "split", {"x": tj(x, "fp16")}, {"axis": 1, "split_sizes": [2, 4, 1]}, [x[:, :2], x[:, 2:6], x[:, 6:]])
x = f16((4, 6, 5))
add("slice_stride_masks", "slice_by_index", {"x": tj(x, "fp16")},
    {"begin": [1, -5, 0], "end": [0, -1, 3], "stride": [1, 2, 1], "end_mask": [True, False, False], "squeeze_mask": [False, False, True]},
    [x[1:, -5:-1:2, 0]])
add("slice_negative_stride", "slice_by_index", {"x": tj(x, "fp16")},
    {"begin": [3, 0, 4], "end": [0, 6, 0], "stride": [-1, 1, -2], "begin_mask": [False, True, False], "end_mask": [True, True, False]},
    [x[3::-1, :, 4:0:-2]])
u = f16((2, 1, 5))
xu = x.copy(); xu[1:3, 2:3, :] = u
add("slice_update", "slice_update", {"x": tj(x, "fp16"), "update": tj(u, "fp16"), "begin": tj(np.array([1, 2, 0]), "int32")},
    {"end": [3, 3, 5]}, [xu])
x = f16((2, 3, 4))
add("reshape_zero_neg", "reshape", {"x": tj(x, "fp16")}, {"shape": [0, -1, 2]}, [x.reshape(2, 6, 2)])
add("transpose", "transpose", {"x": tj(x, "fp16")}, {"perm": [2, 0, 1]}, [x.transpose(2, 0, 1)])
add("expand_dims", "expand_dims", {"x": tj(x, "fp16")}, {"axes": [0, -1]}, [x[None, ..., None]])
xs1 = f16((1, 3, 1, 2))
add("squeeze_all", "squeeze", {"x": tj(xs1, "fp16")}, {}, [xs1.reshape(3, 2)])
e = f16((5, 3)); ids = np.array([[4, 0], [2, -1]], np.int32)
add("gather_axis0", "gather", {"x": tj(e, "fp16", True), "indices": tj(ids, "int32")}, {}, [np.take(e, ids, axis=0)])
xg = f16((2, 4, 3)); idb = np.array([[3, 1], [0, 0]], np.int32)
add("gather_batch_dims", "gather", {"x": tj(xg, "fp16"), "indices": tj(idb, "int32")}, {"axis": 1, "batch_dims": 1},
    [np.stack([np.take(xg[i], idb[i], axis=0) for i in range(2)])])
ida = rng.integers(0, 3, (2, 4, 2)).astype(np.int32)
add("gather_along_axis", "gather_along_axis", {"x": tj(xg, "fp16"), "indices": tj(ida, "int32")}, {"axis": 2},
    [np.take_along_axis(xg, ida, axis=2)])
cond = rng.random((3, 1)) > 0.5; a = f16((3, 4)); b_ = f16((4,))
add("select", "select", {"cond": tj(cond, "bool"), "a": tj(a, "fp16"), "b": tj(b_, "fp16")}, {}, [np.where(cond, a, b_)])
xf = (rng.standard_normal((2, 3)) * 10).astype(np.float32)
add("cast_int32", "cast", {"x": tj(xf, "fp32")}, {"dtype": "int32"}, [np.trunc(xf).astype(np.int32)], dtypes=["int32"])
add("cast_fp16", "cast", {"x": tj(xf, "fp32")}, {"dtype": "fp16"}, [xf.astype(D)])
add("fill", "fill", {}, {"shape": [2, 3], "value": 1.5}, [np.full((2, 3), 1.5)], dtypes=["fp32"])
xt = f16((2, 6))
order = np.argsort(-xt.astype(D), axis=1, kind="stable")[:, :3]
add("topk", "topk", {"x": tj(xt, "fp16")}, {"k": 3}, [np.take_along_axis(xt, order, 1), order], dtypes=["fp16", "int32"])
order = np.argsort(xt.astype(D), axis=0, kind="stable")[:1]
add("topk_ascending_axis0", "topk", {"x": tj(xt, "fp16")}, {"k": 1, "axis": 0, "ascending": True},
    [np.take_along_axis(xt, order, 0), order], dtypes=["fp16", "int32"])
xb = f16((2, 4, 4))
add("band_part_causal", "band_part", {"x": tj(xb, "fp16")}, {"lower": -1, "upper": 0}, [np.tril(xb)])
xt2 = f16((2, 3))
add("tile", "tile", {"x": tj(xt2, "fp16")}, {"reps": [2, 1]}, [np.tile(xt2, (2, 1))])

# ---- attention -----------------------------------------------------------------------------------
q = f16((1, 2, 3, 8)); k = f16((1, 2, 5, 8)); v = f16((1, 2, 5, 4)); m = f16((1, 1, 3, 5))
sd = mx.fast.scaled_dot_product_attention(mx.array(q.astype(np.float32)), mx.array(k.astype(np.float32)), mx.array(v.astype(np.float32)),
                                          scale=1 / np.sqrt(8), mask=mx.array(m.astype(np.float32)))
add("sdpa_float_mask", "scaled_dot_product_attention",
    {"query": tj(q, "fp16"), "key": tj(k, "fp16"), "value": tj(v, "fp16"), "attn_mask": tj(m, "fp16")}, {}, [np.array(sd)])
mb = np.tril(np.ones((3, 5), bool), 2)
sd = mx.fast.scaled_dot_product_attention(mx.array(q.astype(np.float32)), mx.array(k.astype(np.float32)), mx.array(v.astype(np.float32)),
                                          scale=1 / np.sqrt(8), mask=mx.array(mb))
add("sdpa_bool_mask", "scaled_dot_product_attention",
    {"query": tj(q, "fp16"), "key": tj(k, "fp16"), "value": tj(v, "fp16"), "attn_mask": tj(mb, "bool")}, {}, [np.array(sd)])

# ---- weight decompression (coremltools' own decompress as the oracle) -----------------------------
idx = rng.integers(0, 4, (6, 4)).astype(np.uint8)
lut = f16((2, 1, 4, 1))
add("lut_uint2_grouped", "constexpr_lut_to_dense", {"indices": tj(idx, "uint2", True), "lut": tj(lut, "fp16", True)}, {},
    [constexpr_lut_to_dense.decompress(idx, lut, None)])
idx = rng.integers(0, 16, (4, 3)).astype(np.uint8)
lut = f16((1, 3, 16, 2))
add("lut_uint4_vector", "constexpr_lut_to_dense", {"indices": tj(idx, "uint4", True), "lut": tj(lut, "fp16", True)}, {"vector_axis": 0},
    [constexpr_lut_to_dense.decompress(idx, lut, 0)])
data = rng.integers(-8, 8, (4, 8)).astype(np.int8)
scale = f16((4, 2), lo=0.01); off = rng.integers(-8, 8, (4, 2)).astype(np.int8)
add("bss_int4_offset", "constexpr_blockwise_shift_scale",
    {"data": tj(data, "int4", True), "scale": tj(scale, "fp16", True), "offset": tj(off, "int4", True)}, {},
    # fp16 scale: the decompressed weight is fp16, as on the device (both interpreter modes)
    [constexpr_blockwise_shift_scale.decompress(data, scale, off.astype(np.float16))], [constexpr_blockwise_shift_scale.decompress(data, scale, off.astype(np.float16))])
data = rng.integers(0, 256, (2, 6)).astype(np.uint8)
scale = np.abs(rng.standard_normal((1, 3))).astype(np.float32)
add("bss_uint8_fp32", "constexpr_blockwise_shift_scale", {"data": tj(data, "uint8", True), "scale": tj(scale, "fp32", True)}, {},
    [constexpr_blockwise_shift_scale.decompress(data, scale, None)], dtypes=["fp32"])

# ---- fp16 chains: intermediate rounding matters --------------------------------------------------
a = f16((16,), scale=3.0); b_ = f16((16,), scale=3.0); c = f16((16,), scale=0.01)
cases.append({
    "name": "chain_mul_add", "op": "__chain_mul_add",
    "inputs": {"x": tj(a, "fp16"), "y": tj(b_, "fp16"), "z": tj(c, "fp16")}, "params": {},
    "expect": {"fp32": [out((a.astype(np.float32) * b_.astype(np.float32) + c.astype(np.float32)), "fp16")],
               "fp16": [out((a * b_) + c, "fp16")]},
})

# ---- coremltools' own type inference for each case (opset iOS18) ---------------------------------
import coremltools as ct  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import Function, types  # noqa: E402

NP = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": bool,
      "int4": types.np_int4_dtype, "uint2": types.np_uint2_dtype, "uint4": types.np_uint4_dtype}
BUILTIN = {"fp16": types.fp16, "fp32": types.fp32, "int32": types.int32, "bool": types.bool}


def ct_infer(case):
    """Builds the case's op with coremltools' MIL builder and returns the inferred output types."""
    placeholders = {}
    for k, v in case["inputs"].items():
        for i, t in enumerate(v if isinstance(v, list) else [v]):
            if not t.get("const"):
                placeholders[f"{k}_{i}"] = mb.placeholder(shape=tuple(t["shape"]), dtype=BUILTIN[t["dtype"]], allow_rank0_input=True)
    with Function(placeholders, opset_version=ct.target.iOS18) as fn:
        kw = {}
        for k, v in case["inputs"].items():
            if isinstance(v, list):
                kw[k] = [fn.inputs[f"{k}_{i}"] for i in range(len(v))]
            elif not v.get("const"):
                kw[k] = fn.inputs[f"{k}_0"]
            else:
                arr = np.array(v["data"], dtype=np.float64 if v["dtype"] in ("fp16", "fp32") else np.int64).reshape(v["shape"])
                val = arr.astype(NP[v["dtype"]])
                kw[k] = val if case["op"].startswith("constexpr_") else mb.const(val=val)
        for k, v in case["params"].items():
            if isinstance(v, list) and all(isinstance(e, bool) for e in v):
                v = np.array(v, dtype=bool)
            elif isinstance(v, list):
                v = np.array(v, dtype=np.int32)
            elif isinstance(v, float) and k == "epsilon" and "gamma" in case["inputs"]:
                v = NP[case["inputs"]["gamma"]["dtype"]](v)  # epsilon shares gamma's type domain
            kw[k] = v
        outs = getattr(mb, case["op"])(**kw)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return [{"dtype": types.builtin_to_string(o.dtype), "shape": [int(d) for d in o.shape]} for o in outs]


for case in cases:
    if case["op"].startswith("__"):
        continue
    case["coremltools"] = ct_infer(case)

path = pathlib.Path(__file__).with_name("ops_cases.json")
path.write_text(json.dumps({"generator": "ops_oracle.py", "numpy": np.__version__, "mlx": mx.__version__, "cases": cases}) + "\n")
print(f"wrote {len(cases)} cases to {path}")
