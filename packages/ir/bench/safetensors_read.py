"""Python side of bench/safetensors-read.ts: read every tensor of a safetensors checkpoint.

numpy has no bfloat16, so safetensors.numpy.load_file / safe_open(framework="np") refuse the
BF16 tensors of a Qwen3.5 checkpoint ("data type 'bfloat16' not understood"). Two readers that do
handle BF16 are timed instead:
  - safetensors.deserialize: the safetensors Rust core parsing each whole file read into memory,
    each tensor then viewed as a numpy array (uint16 for BF16);
  - mlx.core.load: MLX's own safetensors loader (lazy), forced with mx.eval.
Each method reads every file once to warm the page cache, then runs --runs times; prints JSON.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import safetensors

NP_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "I8": np.int8,
    "U8": np.uint8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
    "BOOL": np.bool_,
}


def shard_files(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, name) for name in files]
    return [os.path.join(folder, "model.safetensors")]


def read_deserialize(files):
    total = 0
    for path in files:
        with open(path, "rb") as f:
            raw = f.read()
        for _name, t in safetensors.deserialize(raw):
            arr = np.frombuffer(t["data"], dtype=NP_DTYPES[t["dtype"]]).reshape(t["shape"])
            total += arr.nbytes
    return total


def read_mlx(files):
    import mlx.core as mx

    total = 0
    for path in files:
        arrays = mx.load(path)
        mx.eval(list(arrays.values()))
        total += sum(a.nbytes for a in arrays.values())
    return total


def measure(fn, files, runs):
    fn(files)  # warm
    times = []
    total = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        total = fn(files)
        times.append(time.perf_counter() - t0)
    return {"bytes": total, "seconds": times, "median_s": statistics.median(times)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    files = shard_files(args.dir)
    out = {"safetensors_version": safetensors.__version__, "numpy_version": np.__version__, "methods": {}}
    out["methods"]["safetensors.deserialize"] = measure(read_deserialize, files, args.runs)
    try:
        import mlx.core as mx

        out["mlx_version"] = mx.__version__
        out["methods"]["mlx.core.load"] = measure(read_mlx, files, args.runs)
    except ImportError as err:  # mlx is optional for this comparison
        out["mlx_error"] = str(err)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
