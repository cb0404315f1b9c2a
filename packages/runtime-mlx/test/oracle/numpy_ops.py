"""Independent numpy (float64) reference for the runtime-mlx op tests.

Reads {"cases": [{"id", "op", "inputs": {name: {"shape", "data"}}, "params"}]} on stdin and writes
{id: {"shape", "data"}} (or a list of those) on stdout. Nothing here calls MLX: every op is written
from its mathematical definition (or numpy's equivalent) so that the tests compare two
implementations.
"""

import json
import math
import sys

import numpy as np


def arr(inputs, name, dtype=np.float64):
    t = inputs[name]
    return np.asarray(t["data"], dtype=dtype).reshape(t["shape"])


def out(x):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
    return {"shape": list(x.shape), "data": x.reshape(-1).astype(np.float64).tolist()}


def axes_of(p, key="axes"):
    a = p.get(key)
    if a is None:
        return None
    return tuple(a) if isinstance(a, list) else a


def logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=axis) if axis is not None else r.reshape(())


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def conv1d(x, w, stride, padding, dilation, groups):
    # x [N, L, Cin], w [Cout, K, Cin/groups]  (MLX's channels-last layout)
    n, length, cin = x.shape
    cout, k, cin_g = w.shape
    xp = np.pad(x, ((0, 0), (padding, padding), (0, 0)))
    span = dilation * (k - 1) + 1
    lout = (xp.shape[1] - span) // stride + 1
    cout_g = cout // groups
    y = np.zeros((n, lout, cout))
    for o in range(cout):
        g = o // cout_g
        for t in range(lout):
            window = xp[:, t * stride : t * stride + span : dilation, g * cin_g : (g + 1) * cin_g]  # [N, K, cin_g]
            y[:, t, o] = np.einsum("nkc,kc->n", window, w[o])
    return y


def rope(x, dims, traditional, base, scale, offset):
    # positions run along axis -2; only the first `dims` features rotate
    length = x.shape[-2]
    half = dims // 2
    inv_freq = base ** (-np.arange(half) * 2.0 / dims)
    pos = (offset + np.arange(length)) * scale
    theta = pos[:, None] * inv_freq[None, :]  # [L, half]
    cos, sin = np.cos(theta), np.sin(theta)
    y = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * cos - b * sin
        y[..., 1:dims:2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:dims]
        y[..., :half] = a * cos - b * sin
        y[..., half:dims] = a * sin + b * cos
    return y


def sdpa(q, k, v, scale, mask, mask_array):
    # q [B, Hq, L, D], k/v [B, Hkv, S, D]; query head h reads kv head h // (Hq / Hkv)
    hq, hkv = q.shape[1], k.shape[1]
    rep = hq // hkv
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = np.einsum("bhld,bhsd->bhls", q, k) * scale
    length, kv_len = q.shape[2], k.shape[2]
    if mask == "causal":
        allowed = np.arange(kv_len)[None, :] <= np.arange(length)[:, None] + (kv_len - length)
        s = np.where(allowed, s, -np.inf)
    elif mask == "bool":
        s = np.where(mask_array.astype(bool), s, -np.inf)
    elif mask == "additive":
        s = s + mask_array
    return np.einsum("bhls,bhsd->bhld", softmax(s, -1), v)


def unpack(wq, bits):
    # Affine packing: element i of a 32-bit word sits at bits [i*bits, (i+1)*bits), low bits first.
    wq = wq.astype(np.uint64)
    per = 32 // bits
    parts = [(wq >> np.uint64(bits * i)) & np.uint64((1 << bits) - 1) for i in range(per)]
    return np.stack(parts, axis=-1).reshape(*wq.shape[:-1], wq.shape[-1] * per).astype(np.float64)


def dequant(wq, scales, biases, group, bits):
    q = unpack(wq, bits)
    s = np.repeat(scales, group, axis=-1)
    b = np.repeat(biases, group, axis=-1)
    return q * s + b


UNARY = {
    "abs": np.abs,
    "negative": np.negative,
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "square": np.square,
    "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin,
    "cos": np.cos,
    "floor": np.floor,
    "ceil": np.ceil,
    "erf": np.vectorize(math.erf),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
}

BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logaddexp": np.logaddexp,
    "remainder": np.remainder,
    "floorDivide": np.floor_divide,
    "equal": np.equal,
    "notEqual": np.not_equal,
    "greater": np.greater,
    "greaterEqual": np.greater_equal,
    "less": np.less,
    "lessEqual": np.less_equal,
}

REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def run(case):
    op, i, p = case["op"], case["inputs"], case.get("params", {})
    if op in UNARY:
        return out(UNARY[op](arr(i, "a")))
    if op in BINARY:
        a = arr(i, "a") if "a" in i else np.float64(p["a"])
        b = arr(i, "b") if "b" in i else np.float64(p["b"])
        return out(BINARY[op](a, b))
    if op in REDUCE:
        return out(REDUCE[op](arr(i, "a"), axis=axes_of(p), keepdims=p.get("keepdims", False)))
    if op == "logsumexp":
        return out(logsumexp(arr(i, "a"), axis=axes_of(p), keepdims=p.get("keepdims", False)))
    if op == "argmax":
        return out(np.argmax(arr(i, "a"), axis=p["axis"]))
    if op == "argmin":
        return out(np.argmin(arr(i, "a"), axis=p["axis"]))
    if op == "softmax":
        return out(softmax(arr(i, "a"), axes_of(p)))
    if op == "cumsum":
        return out(np.cumsum(arr(i, "a"), axis=p["axis"]))
    if op == "matmul":
        return out(arr(i, "a") @ arr(i, "b"))
    if op == "transpose":
        return out(np.transpose(arr(i, "a"), p.get("axes")))
    if op == "concatenate":
        return out(np.concatenate([arr(i, n) for n in p["names"]], axis=p["axis"]))
    if op == "split":
        return [out(x) for x in np.split(arr(i, "a"), p["sections"], axis=p["axis"])]
    if op == "slice":
        a = arr(i, "a")
        idx = tuple(slice(s, e, st) for s, e, st in zip(p["start"], p["stop"], p["strides"]))
        return out(a[idx])
    if op == "sliceUpdate":
        a = arr(i, "a").copy()
        idx = tuple(slice(s, e) for s, e in zip(p["start"], p["stop"]))
        a[idx] = arr(i, "update")
        return out(a)
    if op == "take":
        return out(np.take(arr(i, "a"), arr(i, "indices", np.int64), axis=p["axis"]))
    if op == "takeAlongAxis":
        return out(np.take_along_axis(arr(i, "a"), arr(i, "indices", np.int64), axis=p["axis"]))
    if op == "where":
        return out(np.where(arr(i, "cond") != 0, arr(i, "x"), arr(i, "y")))
    if op == "repeat":
        return out(np.repeat(arr(i, "a"), p["repeats"], axis=p["axis"]))
    if op == "sortDesc":
        return out(-np.sort(-arr(i, "a"), axis=-1))
    if op == "conv1d":
        return out(conv1d(arr(i, "x"), arr(i, "w"), p["stride"], p["padding"], p["dilation"], p["groups"]))
    if op == "rmsNorm":
        x = arr(i, "x")
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + p["eps"])
        return out(y * arr(i, "w") if "w" in i else y)
    if op == "rope":
        return out(rope(arr(i, "x"), p["dims"], p["traditional"], p["base"], p["scale"], p["offset"]))
    if op == "sdpa":
        m = arr(i, "mask") if "mask" in i else None
        return out(sdpa(arr(i, "q"), arr(i, "k"), arr(i, "v"), p["scale"], p.get("mask"), m))
    if op == "dequantize":
        return out(dequant(arr(i, "wq", np.uint32), arr(i, "scales"), arr(i, "biases"), p["group"], p["bits"]))
    if op == "quantizedMatmul":
        w = dequant(arr(i, "wq", np.uint32), arr(i, "scales"), arr(i, "biases"), p["group"], p["bits"])
        return out(arr(i, "x") @ w.T)
    if op == "gatherMm":
        a, b = arr(i, "a"), arr(i, "b")
        lhs, rhs = arr(i, "lhs", np.int64), arr(i, "rhs", np.int64)
        return out(np.stack([a[l] @ b[r] for l, r in zip(lhs, rhs)]))
    if op == "gatherQmm":
        x = arr(i, "x")
        w = dequant(arr(i, "wq", np.uint32), arr(i, "scales"), arr(i, "biases"), p["group"], p["bits"])
        lhs, rhs = arr(i, "lhs", np.int64), arr(i, "rhs", np.int64)
        return out(np.stack([x[l] @ w[r].T for l, r in zip(lhs, rhs)]))
    raise ValueError(f"unknown oracle op {op}")


def main():
    request = json.load(sys.stdin)
    with np.errstate(all="ignore"):
        results = {case["id"]: run(case) for case in request["cases"]}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
