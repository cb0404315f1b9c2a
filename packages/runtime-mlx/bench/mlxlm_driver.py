"""mlx-lm side of bench/mlx-vs-mlxlm.ts: one timed generation with mlx-lm's own stream_generate.

usage: mlxlm_driver.py SCENARIO_JSON
  {"model": DIR, "dtype": "float32" | "bfloat16" | null, "bits": 4 | 8 | null,
   "prompt": [ids...], "max_tokens": N, "warmup_prompt": [ids...]}

Loads DIR with mlx-lm's loader (for float32, the weights are cast before its sanitize, as
tools/oracle/oracle_mlx.py does), casts to `dtype` when given, quantizes
with mlx-lm's quantize_model (group 64, affine, the model's quant_predicate) when `bits` is given,
runs one short warm-up generation (CPU JIT and allocator warm), resets MLX's peak-memory counter,
then runs stream_generate once with EOS disabled and prints one JSON line with its final response's
prompt_tps, generation_tps and peak_memory (mlx-lm's own definitions, see generate.py).
"""

import json
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step, stream_generate
from mlx_lm.tokenizer_utils import StreamingDetokenizer, TokenizerWrapper
from mlx_lm.utils import _get_classes, load_model, quantize_model


class SilentDetokenizer(StreamingDetokenizer):
    """Token ids only: the benchmark needs no text (the checkpoints have random weights)."""

    def reset(self):
        self.tokens = []
        self.offset = 0
        self.text = ""

    def add_token(self, token):
        self.tokens.append(token)

    def finalize(self):
        pass

    @property
    def last_segment(self):
        return ""


class NoEosTokenizer(TokenizerWrapper):
    """What stream_generate reads from a tokenizer (detokenizer, eos ids), with no EOS."""

    def __init__(self):
        self._tokenizer = None
        self._detokenizer = SilentDetokenizer()
        self._eos_token_ids = set()


def float32_classes(config):
    """mlx-lm's model class, casting weights to float32 before its sanitize adds the norms' +1
    (otherwise the +1 is rounded in bf16 and the fp32 runs differ from ours in the last bits)."""
    model_class, args_class = _get_classes(config)

    class Float32Model(model_class):
        def sanitize(self, weights):
            up = {k: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in weights.items()}
            return super().sanitize(up)

    return Float32Model, args_class


def main():
    s = json.loads(sys.argv[1])
    mx.set_default_device(mx.cpu)
    t = time.perf_counter()
    classes = float32_classes if s.get("dtype") == "float32" else _get_classes
    model, config = load_model(Path(s["model"]), strict=True, get_model_classes=classes)
    if s.get("dtype"):
        model.set_dtype(getattr(mx, s["dtype"]))
    if s.get("bits"):
        model, _ = quantize_model(model, config, 64, s["bits"])
    mx.eval(model.parameters())
    load_s = time.perf_counter() - t

    for _ in generate_step(mx.array(s["warmup_prompt"]), model, max_tokens=2):
        pass
    peak_with_load = mx.get_peak_memory() / 1e9
    mx.reset_peak_memory()
    mx.clear_cache()

    last = None
    tokens = []
    for response in stream_generate(model, NoEosTokenizer(), mx.array(s["prompt"]), max_tokens=s["max_tokens"]):
        last = response
        tokens.append(response.token)
    print(
        json.dumps(
            {
                "prompt_tps": last.prompt_tps,
                "generation_tps": last.generation_tps,
                "peak_memory_gb": last.peak_memory,
                "peak_memory_with_load_gb": peak_with_load,
                "generation_tokens": last.generation_tokens,
                "load_s": load_s,
                "tokens": tokens,
                "mlx_version": mx.__version__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
