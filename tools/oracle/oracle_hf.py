"""First oracle: Hugging Face transformers, fp32, eager attention, torch reference kernels.

Loads a fixture directory with `Qwen3_5ForCausalLM` / `Qwen3_5MoeForCausalLM` (which read the VL
wrapper's text_config and strip the `model.language_model.` prefix), checks that every text tensor
was loaded bit-exactly and that only `model.visual.*` / `mtp.*` were dropped, then runs a prefill
and a greedy decode with the model's own cache.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

# Fused kernels would replace the torch reference paths (reference §6): refuse to run with them.
FUSED_KERNEL_MODULES = ("fla", "causal_conv1d", "kernels")


def assert_reference_kernels() -> None:
    present = [m for m in FUSED_KERNEL_MODULES if importlib.util.find_spec(m) is not None]
    if present:
        raise SystemExit(f"oracle_hf: fused-kernel packages installed ({present}); HF must use torch paths")


@dataclass
class HfRun:
    prompt_logits: np.ndarray  # [T, V]
    hidden_states: np.ndarray  # [L+1, T, D]; [0] = embeddings, [L] = after the final norm
    last_layer_prenorm: np.ndarray  # [T, D]; output of the last decoder layer, before model.norm
    decode_logits: np.ndarray  # [N, V]; row i = logits after feeding generated[i]
    generated: list[int]  # N+1 ids; generated[0] = argmax(prompt_logits[-1])
    full_vs_cached_max_abs: float  # one uncached forward over prompt+generated vs prefill/decode
    router_gaps: list[float] = field(default_factory=list)  # MoE: top-k vs next router logit gaps


def load_model(model_dir: Path, moe: bool, stored: dict[str, torch.Tensor]) -> torch.nn.Module:
    """from_pretrained in fp32/eager; fail loudly unless every text tensor loaded exactly."""
    if moe:
        from transformers import Qwen3_5MoeForCausalLM as cls
    else:
        from transformers import Qwen3_5ForCausalLM as cls
    model, info = cls.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v and k != "unexpected_keys"}
    # Unexpected keys may only be the VL/MTP extras (HF usually filters them before reporting).
    bad_unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith(("mtp.", "model.visual."))]
    if problems or bad_unexpected:
        raise SystemExit(f"oracle_hf: loading {model_dir} reported {problems} unexpected={bad_unexpected}")
    model.eval()

    state = model.state_dict()
    expected: set[str] = set()
    for name, t in stored.items():
        if name.startswith(("mtp.", "model.visual.")):
            continue
        target = name.replace("model.language_model.", "model.", 1)
        expected.add(target)
        if target not in state:
            raise SystemExit(f"oracle_hf: checkpoint tensor {name} has no model parameter {target}")
        got = state[target]
        if got.dtype != torch.float32 or not torch.equal(got, t.float()):
            raise SystemExit(f"oracle_hf: parameter {target} differs from checkpoint tensor {name}")
    tied = "lm_head.weight" not in stored
    if tied:
        if not torch.equal(state["lm_head.weight"], stored["model.language_model.embed_tokens.weight"].float()):
            raise SystemExit("oracle_hf: tied lm_head does not equal the embedding")
        expected.add("lm_head.weight")
    missing = sorted(set(state) - expected)
    if missing:
        raise SystemExit(f"oracle_hf: model parameters not covered by the checkpoint: {missing}")
    return model


def _cache_of(out) -> object:
    """The cache object of a model output (transformers 5 renamed past_key_values to cache)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def run(model_dir: Path, moe: bool, stored: dict[str, torch.Tensor], prompt_ids: list[int], n_decode: int) -> HfRun:
    assert_reference_kernels()
    torch.manual_seed(0)
    model = load_model(model_dir, moe, stored)
    layers = model.model.layers

    # Capture the last layer's output (pre final norm) and, for MoE, every router's logits.
    captured: dict[str, torch.Tensor] = {}
    router_logits: list[torch.Tensor] = []
    hooks = [layers[-1].register_forward_hook(lambda _m, _i, o: captured.__setitem__("last", o[0] if isinstance(o, tuple) else o))]
    if moe:
        k = model.config.num_experts_per_tok
        for layer in layers:
            hooks.append(layer.mlp.gate.register_forward_hook(lambda _m, _i, o: router_logits.append(o[0].detach())))

    with torch.no_grad():
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        out = model(input_ids=ids, use_cache=True, output_hidden_states=True)
        prompt_logits = out.logits[0].float().numpy().copy()
        hidden = np.stack([h[0].float().numpy() for h in out.hidden_states])
        prenorm = captured["last"][0].float().numpy().copy()
        cache = _cache_of(out)

        generated = [int(np.argmax(prompt_logits[-1]))]
        decode_rows = []
        for _ in range(n_decode):
            step = model(input_ids=torch.tensor([[generated[-1]]]), cache=cache, use_cache=True)
            cache = _cache_of(step)
            row = step.logits[0, -1].float().numpy().copy()
            decode_rows.append(row)
            generated.append(int(np.argmax(row)))

        # Consistency of HF's own paths: one uncached (chunked) forward over everything fed.
        fed = prompt_ids + generated[:n_decode]
        full = model(input_ids=torch.tensor([fed]), use_cache=False).logits[0].float().numpy()
    for h in hooks:
        h.remove()

    decode_logits = np.stack(decode_rows)
    cached = np.concatenate([prompt_logits, decode_logits])
    full_diff = float(np.max(np.abs(full - cached)))

    gaps: list[float] = []
    for rl in router_logits:  # [tokens, E] per call and layer
        srt = torch.sort(rl.float(), dim=-1, descending=True).values
        gaps.extend((srt[:, k - 1] - srt[:, k]).tolist())

    return HfRun(prompt_logits, hidden, prenorm, decode_logits, generated, full_diff, gaps)
