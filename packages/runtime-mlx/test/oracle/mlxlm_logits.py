"""mlx-lm as an independent oracle for runtime-mlx's checkpoint formats (CPU, fp32).

usage: mlxlm_logits.py JOBS_JSON
  JOBS_JSON: [{"dir": CHECKPOINT_DIR, "ids": [...], "out": OUT_F32, "bits": null | 4 | 8}, ...]

For each job, loads the checkpoint with mlx-lm's own loader (strict: every parameter present, nothing left over).
An HF-layout checkpoint is cast to float32 before mlx-lm's sanitize adds 1 to the zero-centred norms
(as tools/oracle/oracle_mlx.py does, so the +1 is not rounded to bf16). With BITS, the model is then
quantized by mlx-lm's quantize_model (group 64, affine, the model's own quant_predicate). Writes the
logits of every prompt position, float32 row-major [T, V], to OUT_F32. One process serves every job
(importing mlx_lm takes seconds).
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import _get_classes, load_model, quantize_model


def float32_classes(config):
    model_class, args_class = _get_classes(config)

    class Float32Model(model_class):
        def sanitize(self, weights):
            up = {k: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in weights.items()}
            return super().sanitize(up)

    return Float32Model, args_class


def run(path: Path, ids: list[int], out: str, bits: int | None) -> None:
    model, config = load_model(path, strict=True, get_model_classes=float32_classes)
    if bits is not None:
        model.set_dtype(mx.float32)
        model, _ = quantize_model(model, config, 64, bits)
    logits = model(mx.array([ids]))[0].astype(mx.float32)
    np.asarray(logits).astype(np.float32).tofile(out)


def main():
    mx.set_default_device(mx.cpu)
    for job in json.loads(sys.argv[1]):
        run(Path(job["dir"]), job["ids"], job["out"], job.get("bits"))


if __name__ == "__main__":
    main()
