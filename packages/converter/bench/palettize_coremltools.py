"""coremltools' own k-means palettization (the function palettize_weights uses for
per_grouped_channel) on the same fp16 weights our benchmark palettizes. Reads <dir>/tensors.json and
the raw fp16 files it names; prints one JSON line per tensor: seconds and reconstruction MSE."""
import json
import sys
import time

import numpy as np
from coremltools.optimize.coreml._quantization_passes import palettize_weights

root = sys.argv[1]
bits = int(sys.argv[2])
group = int(sys.argv[3])
workers = int(sys.argv[4])
for t in json.load(open(f"{root}/tensors.json")):
    w = np.fromfile(f"{root}/{t['file']}", dtype=np.float16).reshape(t["shape"])
    start = time.perf_counter()
    params = palettize_weights.grouped_channelwise_compress(
        w, "KMEANS", bits, channel_axis=0, channel_group_size=group, num_kmeans_workers=workers
    )
    seconds = time.perf_counter() - start
    lut = np.asarray(params.lut, dtype=np.float32)  # [groups, 1, 2^bits, 1]
    idx = np.asarray(params.indices).reshape(t["shape"]).astype(np.int64)
    groups = lut.shape[0]
    rows_per_group = w.shape[0] // groups
    table = lut.reshape(groups, -1)
    recon = np.take_along_axis(
        np.repeat(table, rows_per_group, axis=0), idx.reshape(w.shape[0], -1), axis=1
    ).reshape(w.shape)
    mse = float(np.mean((recon - w.astype(np.float32)) ** 2))
    print(json.dumps({"name": t["name"], "seconds": seconds, "mse": mse}), flush=True)
