#!/usr/bin/env python3
"""coremltools as an independent oracle for the format tests (test code only).

Reads one JSON request on stdin, writes one JSON answer on stdout:
  {"schema": true}                        -> field numbers and enum values of the Core ML messages
  {"readBlobs": {"file", "items": [{"dtype", "offset"}]}}
                                          -> values read by coremltools' blob reader (fp16 as bit patterns)
  {"writeBlobs": {"file", "items": [{"dtype", "values"}]}}
                                          -> metadata offsets from coremltools' blob writer
  {"makePackage": "path.mlpackage"}       -> writes a small iOS18 program with ct.convert; returns its constants
Several keys may be combined in one request (one Python start-up).
"""

import contextlib
import json
import sys

import numpy as np


def schema():
    from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

    messages, enums = {}, {}

    def walk(d):
        messages[d.full_name] = {f.name: f.number for f in d.fields}
        for n in d.nested_types:
            walk(n)
        for e in d.enum_types:
            enums[e.full_name] = {v.name: v.number for v in e.values}

    for module in (Model_pb2, FeatureTypes_pb2, MIL_pb2):
        for d in module.DESCRIPTOR.message_types_by_name.values():
            walk(d)
        for e in module.DESCRIPTOR.enum_types_by_name.values():
            enums[e.full_name] = {v.name: v.number for v in e.values}
    return {"messages": messages, "enums": enums}


def _np_dtype(name):
    from coremltools.converters.mil.mil import types

    return {
        "fp16": np.float16, "fp32": np.float32, "uint8": np.uint8, "int8": np.int8,
        "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
        "uint1": types.np_uint1_dtype, "uint2": types.np_uint2_dtype, "uint3": types.np_uint3_dtype,
        "uint4": types.np_uint4_dtype, "uint6": types.np_uint6_dtype, "int4": types.np_int4_dtype,
    }[name]


_METHOD = {"fp16": "fp16", "fp32": "float"}


def read_blobs(req):
    from coremltools.libmilstoragepython import _BlobStorageReader

    r = _BlobStorageReader(req["file"])
    out = []
    for it in req["items"]:
        fn = getattr(r, f"read_{_METHOD.get(it['dtype'], it['dtype'])}_data")
        v = np.asarray(fn(it["offset"]))
        if it["dtype"] == "fp16":
            v = v.view(np.uint16)
        out.append([x.item() if hasattr(x, "item") else x for x in v.astype(np.float64 if it["dtype"] == "fp32" else np.int64)])
    return out


def write_blobs(req):
    from coremltools.libmilstoragepython import _BlobStorageWriter

    w = _BlobStorageWriter(req["file"])
    offsets = []
    for it in req["items"]:
        d = it["dtype"]
        if d == "fp16":
            arr = np.array(it["values"], dtype=np.uint16)  # bit patterns, as coremltools passes them
        elif d in ("uint1", "uint2", "uint3", "uint4", "uint6"):
            arr = np.array(it["values"], dtype=np.uint8)
        elif d == "int4":
            arr = np.array(it["values"], dtype=np.int8)
        else:
            arr = np.array(it["values"], dtype=_np_dtype(d))
        offsets.append(int(getattr(w, f"write_{_METHOD.get(d, d)}_data")(np.ascontiguousarray(arr))))
    del w  # flushes and closes the file
    return offsets


def make_package(path):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rs = np.random.RandomState(0)
    w = (rs.randn(32, 16) * 0.1).astype(np.float16)
    idx = rs.randint(0, 16, (32, 16)).astype(types.np_uint4_dtype)
    lut = (rs.randn(4, 1, 16, 1) * 0.1).astype(np.float16)

    @mb.program(
        input_specs=[mb.TensorSpec((1, 4, 16), dtype=types.fp16), mb.StateTensorSpec((1, 4, 32), dtype=types.fp16)],
        opset_version=ct.target.iOS18,
    )
    def prog(x, cache):
        y = mb.linear(x=x, weight=w, bias=np.zeros(32, np.float16), name="y")
        wp = mb.constexpr_lut_to_dense(indices=idx, lut=lut, name="w_pal")
        z = mb.linear(x=x, weight=wp, name="z")
        s = mb.add(x=y, y=z, name="s")
        c = mb.coreml_update_state(state=cache, value=s, name="c")
        return mb.mul(x=c, y=np.float16(2), name="out")

    m = ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS18,
        pass_pipeline=ct.PassPipeline.EMPTY,
        skip_model_load=True,
    )
    m.save(path)
    return {
        "w": w.view(np.uint16).flatten().tolist(),
        "indices": idx.astype(np.uint8).flatten().tolist(),
        "lut": lut.view(np.uint16).flatten().tolist(),
    }


def main():
    req = json.load(sys.stdin)
    out = sys.stdout
    answer = {}
    with contextlib.redirect_stdout(sys.stderr):
        if req.get("schema"):
            answer["schema"] = schema()
        if "readBlobs" in req:
            answer["readBlobs"] = read_blobs(req["readBlobs"])
        if "writeBlobs" in req:
            answer["writeBlobs"] = write_blobs(req["writeBlobs"])
        if "makePackage" in req:
            answer["makePackage"] = make_package(req["makePackage"])
    json.dump(answer, out)


if __name__ == "__main__":
    main()
