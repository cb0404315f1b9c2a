"""Second oracle: mlx-lm on the CPU, fp32, from the same checkpoint directory.

mlx-lm's own loader reads the VL wrapper config, drops `model.visual.*` / `mtp.*`, splits the
fused experts and bakes `1 + w` into the zero-centred norm weights (its `sanitize`). That bake
would happen in the stored dtype (bf16) and round `1 + w` to 8 bits, so the model class is wrapped
to cast every floating weight to float32 *before* its sanitize runs; the math is mlx-lm's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import _get_classes, load_model


@dataclass
class MlxRun:
    prompt_logits: np.ndarray  # [T, V]
    decode_logits: np.ndarray  # [N, V]
    generated: list[int]  # N+1 ids, same convention as the HF run


def _float32_classes(config: dict):
    """mlx-lm's model class for this config, with weights cast to float32 before sanitize."""
    model_class, args_class = _get_classes(config)

    class Float32Model(model_class):
        def sanitize(self, weights):
            up = {k: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in weights.items()}
            return super().sanitize(up)

    return Float32Model, args_class


def run(model_dir: Path, prompt_ids: list[int], n_decode: int) -> MlxRun:
    mx.set_default_device(mx.cpu)
    # strict=True: any tensor left over after sanitize, or any parameter not loaded, is an error.
    model, _ = load_model(model_dir, strict=True, get_model_classes=_float32_classes)
    model.set_dtype(mx.float32)
    dtypes = {v.dtype for _, v in tree_flatten(model.parameters())}
    if dtypes != {mx.float32}:
        raise SystemExit(f"oracle_mlx: parameters are not all float32: {dtypes}")

    cache = make_prompt_cache(model)
    logits = model(mx.array([prompt_ids]), cache=cache)
    mx.eval(logits)
    prompt_logits = np.array(logits[0], dtype=np.float32)

    generated = [int(np.argmax(prompt_logits[-1]))]
    rows = []
    for _ in range(n_decode):
        step = model(mx.array([[generated[-1]]]), cache=cache)
        mx.eval(step)
        row = np.array(step[0, -1], dtype=np.float32)
        rows.append(row)
        generated.append(int(np.argmax(row)))
    return MlxRun(prompt_logits, np.stack(rows), generated)
