"""A small stateful decode step built and saved by coremltools, with numpy expectations.

    python ct_decode_step.py OUT.mlpackage  ->  JSON on stdout: {inputs per step, expected per step}

Used by test/mil/coremltools-package.test.ts: the TypeScript side reads the package with the
format reader, type-checks it with checkProgram (coremltools' own default-filled, const-per-input
program style) and runs it in both interpreter modes. Expectations:
  "fp32": the step computed in float64 from the fp16 parameters;
  "fp16": the same with every fp16 op result rounded to float16 (numpy), like the fp16 mode.
"""
import json
import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.ops.defs.iOS18.compression import (
    constexpr_blockwise_shift_scale,
    constexpr_lut_to_dense,
)

rs = np.random.RandomState(3)
D, CTX, HD = 16, 4, 8
gamma = (1 + 0.1 * rs.randn(D)).astype(np.float16)
beta = (0.1 * rs.randn(D)).astype(np.float16)
wq = (rs.randn(D, D) * 0.25).astype(np.float16)
idx = rs.randint(0, 16, (D, D)).astype(types.np_uint4_dtype)
lut = (rs.randn(2, 1, 16, 1) * 0.25).astype(np.float16)
qdata = rs.randint(-8, 8, (D, D)).astype(np.int8)
qscale = (np.abs(rs.randn(D, 2)) * 0.05 + 0.01).astype(np.float16)


@mb.program(
    input_specs=[
        mb.TensorSpec((1, 1, D), dtype=types.fp16),
        mb.TensorSpec((3,), dtype=types.int32),
        mb.TensorSpec((3,), dtype=types.int32),
        mb.TensorSpec((1, 2, CTX), dtype=types.fp16),
        mb.StateTensorSpec((1, CTX, HD), dtype=types.fp16),
        mb.StateTensorSpec((1, CTX, HD), dtype=types.fp16),
    ],
    opset_version=ct.target.iOS18,
)
def prog(x, begin, end, mask, k_cache, v_cache):
    h = mb.layer_norm(x=x, axes=[-1], gamma=gamma, beta=beta, epsilon=np.float16(1e-5), name="h")
    q = mb.linear(x=h, weight=wq, name="q")
    w_kv = mb.constexpr_lut_to_dense(indices=idx, lut=lut, name="w_kv")
    kv = mb.linear(x=h, weight=w_kv, name="kv")
    k, v = mb.split(x=kv, num_splits=2, axis=-1, name="kv_split")
    kc = mb.coreml_update_state(state=k_cache, value=mb.slice_update(x=mb.read_state(input=k_cache), update=k, begin=begin, end=end), name="kc")
    vc = mb.coreml_update_state(state=v_cache, value=mb.slice_update(x=mb.read_state(input=v_cache), update=v, begin=begin, end=end), name="vc")
    qh = mb.reshape(x=q, shape=[1, 2, HD], name="qh")
    att = mb.scaled_dot_product_attention(query=qh, key=kc, value=vc, attn_mask=mask, name="att")
    o = mb.reshape(x=att, shape=[1, 1, D], name="o")
    g = mb.mul(x=mb.silu(x=o, name="o_silu"), y=mb.sigmoid(x=h, name="h_gate"), name="g")
    w_out = mb.constexpr_blockwise_shift_scale(data=qdata, scale=qscale, name="w_out")
    out = mb.linear(x=g, weight=w_out, name="out")
    probs = mb.softmax(x=out, axis=-1, name="probs")
    top_v, top_i = mb.topk(x=out, k=3, axis=-1, name="top")
    best = mb.reduce_argmax(x=out, axis=-1, name="best")
    return probs, top_v, top_i, best


def reference(x, pos, mask, kc, vc, r):
    """One step in float64; r rounds every fp16 op result (identity for the fp32 expectation)."""
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    h = r((x - mu) / np.sqrt(var + np.float64(np.float16(1e-5))) * gamma + beta)
    q = r(h @ wq.astype(np.float64).T)
    w_kv = r(constexpr_lut_to_dense.decompress(idx, lut, None).astype(np.float64))
    kv = r(h @ w_kv.T)
    k, v = kv[..., :HD], kv[..., HD:]
    kc = kc.copy()
    vc = vc.copy()
    kc[:, pos : pos + 1, :] = k
    vc[:, pos : pos + 1, :] = v
    qh = q.reshape(1, 2, HD)
    s = qh @ np.swapaxes(kc, -1, -2) / np.sqrt(HD) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    att = r((p / p.sum(-1, keepdims=True)) @ vc)
    o = att.reshape(1, 1, D)
    g = r(r(o / (1 + np.exp(-o))) * r(1 / (1 + np.exp(-h))))
    w_out = r(constexpr_blockwise_shift_scale.decompress(qdata, qscale, None).astype(np.float64))
    out = r(g @ w_out.T)
    e = np.exp(out - out.max(-1, keepdims=True))
    probs = r(e / e.sum(-1, keepdims=True))
    order = np.argsort(-out, axis=-1, kind="stable")[..., :3]
    return [probs, np.take_along_axis(out, order, -1), order, out.argmax(-1)], kc, vc


def main():
    path = sys.argv[1]
    m = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                   pass_pipeline=ct.PassPipeline.EMPTY, skip_model_load=True)
    m.save(path)
    f16 = lambda a: np.asarray(a, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    ident = lambda a: a  # noqa: E731
    steps = []
    state = {"fp32": (np.zeros((1, CTX, HD)), np.zeros((1, CTX, HD))), "fp16": (np.zeros((1, CTX, HD)), np.zeros((1, CTX, HD)))}
    for pos in range(2):
        x = (rs.randn(1, 1, D) * 2).astype(np.float16)
        mask = np.where(np.arange(CTX)[None, None, :] <= pos, 0.0, -1e4).repeat(2, 1).astype(np.float16)
        step = {"x": x.astype(np.float64).ravel().tolist(), "begin": [0, pos, 0], "end": [1, pos + 1, HD],
                "mask": mask.astype(np.float64).ravel().tolist(), "expect": {}}
        for mode, r in (("fp32", ident), ("fp16", f16)):
            outs, kc, vc = reference(x, pos, mask.astype(np.float64), *state[mode], r)
            state[mode] = (kc, vc)
            step["expect"][mode] = [np.asarray(o, np.float64).ravel().tolist() for o in outs]
        steps.append(step)
    json.dump({"steps": steps}, sys.stdout)


if __name__ == "__main__":
    main()
