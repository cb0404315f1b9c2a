"""Tiny Qwen3.5 checkpoints in the official Hugging Face layout, with seeded random weights.

The layout copies the real Qwen3.5 repos (reference §1, §3): a VL wrapper config.json with a
`text_config`, tensors named `model.language_model.*` (plus `lm_head.weight` when untied), a few
`model.visual.*` and `mtp.*` tensors that a text-only loader must drop, two shards named
`model.safetensors-0000N-of-00002.safetensors` with `model.safetensors.index.json`, BF16 everywhere
except `linear_attn.A_log` and `linear_attn.norm.weight` (F32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from files import write_json

# Shapes shared by every fixture (task brief): two DDDA super-blocks.
HIDDEN = 128
LAYERS = 8
HEAD_DIM = 256
NUM_HEADS = 2
NUM_KV_HEADS = 1
LINEAR_HEAD_DIM = 128
CONV_KERNEL = 4
FULL_ATTENTION_INTERVAL = 4
RMS_EPS = 1e-6
ROPE_THETA = 10_000_000
PARTIAL_ROTARY = 0.25
MAX_POSITIONS = 2048  # small on purpose: tests must not size caches from a 262k default

SHARD_NAMES = (
    "model.safetensors-00001-of-00002.safetensors",
    "model.safetensors-00002-of-00002.safetensors",
)
INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class FixtureSpec:
    """What differs between the fixtures."""

    name: str
    tied: bool
    linear_k_heads: int
    linear_v_heads: int
    intermediate: int = 256  # dense MLP width (ignored for MoE)
    num_experts: int = 0  # 0 = dense MLP
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    generation_config: bool = True  # some real repos ship none (e.g. 4B)
    hidden: int = HIDDEN  # hidden_size (the trained fixture is wider)

    @property
    def moe(self) -> bool:
        return self.num_experts > 0


@dataclass(frozen=True)
class Scales:
    """Standard deviations used to draw weights; the seed search may retune them per fixture."""

    embed: float = 0.5  # embedding rows (also the output head when tied)
    lm_head: float = 0.5  # untied output head rows
    norm: float = 0.1  # zero-centred norm weights: y = x/rms * (1 + w)
    gated_norm: float = 0.1  # GDN output norm weight ~ N(1, gated_norm)
    proj_gain: float = 1.0  # linear layers: N(0, (gain / sqrt(fan_in))^2)
    router: float = 0.5  # MoE router rows (router logits std ~ router * sqrt(D) ~ 5.7)


def layer_types() -> list[str]:
    """Layer i is full attention iff (i+1) % 4 == 0 (reference §0)."""
    return [
        "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention" for i in range(LAYERS)
    ]


def padded_vocab(tokenizer_size: int) -> int:
    """Embedding rows: the tokenizer size rounded up to a multiple of 64 (like 248077 -> 248320)."""
    return ((tokenizer_size + 63) // 64) * 64


def text_config(spec: FixtureSpec, vocab_size: int, eos_id: int) -> dict:
    """text_config shaped like the real 0.8B one (reference §1.1), with fixture dimensions."""
    cfg: dict = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "eos_token_id": eos_id,
        "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": spec.hidden,
        "initializer_range": 0.02,
    }
    if not spec.moe:
        cfg["intermediate_size"] = spec.intermediate
    cfg.update(
        {
            "layer_types": layer_types(),
            "linear_conv_kernel_dim": CONV_KERNEL,
            "linear_key_head_dim": LINEAR_HEAD_DIM,
            "linear_num_key_heads": spec.linear_k_heads,
            "linear_num_value_heads": spec.linear_v_heads,
            "linear_value_head_dim": LINEAR_HEAD_DIM,
            "mamba_ssm_dtype": "float32",
            "max_position_embeddings": MAX_POSITIONS,
        }
    )
    if spec.moe:
        cfg.update(
            {
                "model_type": "qwen3_5_moe_text",
                "moe_intermediate_size": spec.moe_intermediate,
                "num_experts": spec.num_experts,
                "num_experts_per_tok": spec.experts_per_tok,
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
                "shared_expert_intermediate_size": spec.shared_intermediate,
            }
        )
    else:
        cfg.update({"mlp_only_layers": [], "model_type": "qwen3_5_text"})
    cfg.update(
        {
            "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False,
            "num_attention_heads": NUM_HEADS,
            "num_hidden_layers": LAYERS,
            "num_key_value_heads": NUM_KV_HEADS,
            "rms_norm_eps": RMS_EPS,
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": [11, 11, 10],
                "rope_type": "default",
                "rope_theta": ROPE_THETA,
                "partial_rotary_factor": PARTIAL_ROTARY,
            },
            "tie_word_embeddings": spec.tied,
            "use_cache": True,
            "vocab_size": vocab_size,
        }
    )
    return cfg


# A deliberately tiny vision tower: the text path never uses it, loaders must drop it.
VISION = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "patch_size": 2, "merge": 2}


def vision_config(hidden: int) -> dict:
    return {
        "deepstack_visual_indexes": [],
        "depth": VISION["depth"],
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": VISION["hidden_size"],
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": VISION["intermediate_size"],
        "model_type": "qwen3_5_vision",
        "num_heads": VISION["num_heads"],
        "num_position_embeddings": 16,
        "out_hidden_size": hidden,
        "patch_size": VISION["patch_size"],
        "spatial_merge_size": VISION["merge"],
        "temporal_patch_size": 2,
    }


def wrapper_config(spec: FixtureSpec, vocab_size: int, token_ids: dict[str, int]) -> dict:
    """The VL wrapper config.json of an official Qwen3.5 repo."""
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if spec.moe else "Qwen3_5ForConditionalGeneration"],
        "image_token_id": token_ids["<|image_pad|>"],
        "model_type": "qwen3_5_moe" if spec.moe else "qwen3_5",
        "text_config": text_config(spec, vocab_size, token_ids["<|endoftext|>"]),
        "tie_word_embeddings": spec.tied,
        "transformers_version": "5.24.0",
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_config": vision_config(spec.hidden),
        "vision_end_token_id": token_ids["<|vision_end|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
    }


def generation_config(token_ids: dict[str, int]) -> dict:
    """generation_config.json: chat stops on <|im_end|> and <|endoftext|> (reference §4.2)."""
    return {
        "do_sample": True,
        "eos_token_id": [token_ids["<|im_end|>"], token_ids["<|endoftext|>"]],
        "pad_token_id": token_ids["<|endoftext|>"],
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "transformers_version": "5.24.0",
    }


class WeightDrawer:
    """Draws every tensor from one seeded stream, in a fixed order, as float32 numpy arrays."""

    def __init__(self, seed: int, scales: Scales):
        self.rng = np.random.default_rng(seed)
        self.s = scales

    def normal(self, shape: tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
        return (mean + std * self.rng.standard_normal(shape)).astype(np.float32)

    def linear(self, out_dim: int, in_dim: int, gain: float | None = None) -> np.ndarray:
        g = self.s.proj_gain if gain is None else gain
        return self.normal((out_dim, in_dim), g / math.sqrt(in_dim))

    def zero_centred_norm(self, dim: int) -> np.ndarray:
        return self.normal((dim,), self.s.norm)


def draw_language_model(spec: FixtureSpec, vocab: int, seed: int, scales: Scales) -> dict[str, tuple[np.ndarray, str]]:
    """All text-model tensors: name -> (float32 array, stored dtype "bf16" | "f32")."""
    w = WeightDrawer(seed, scales)
    D = spec.hidden
    out: dict[str, tuple[np.ndarray, str]] = {}
    p = "model.language_model."
    out[p + "embed_tokens.weight"] = (w.normal((vocab, D), scales.embed), "bf16")

    hk, hv, dk = spec.linear_k_heads, spec.linear_v_heads, LINEAR_HEAD_DIM
    key_dim, value_dim = hk * dk, hv * dk
    conv_dim = 2 * key_dim + value_dim
    for i, kind in enumerate(layer_types()):
        lp = f"{p}layers.{i}."
        out[lp + "input_layernorm.weight"] = (w.zero_centred_norm(D), "bf16")
        if kind == "linear_attention":
            a = lp + "linear_attn."
            out[a + "in_proj_qkv.weight"] = (w.linear(conv_dim, D), "bf16")
            out[a + "in_proj_z.weight"] = (w.linear(value_dim, D), "bf16")
            out[a + "in_proj_b.weight"] = (w.linear(hv, D), "bf16")
            out[a + "in_proj_a.weight"] = (w.linear(hv, D), "bf16")
            # Depthwise causal conv, PyTorch layout [C, 1, K]; kaiming-like scale for fan_in K.
            out[a + "conv1d.weight"] = (w.normal((conv_dim, 1, CONV_KERNEL), 1.0 / math.sqrt(CONV_KERNEL)), "bf16")
            # dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] (Mamba-style init).
            dt = np.exp(w.rng.uniform(math.log(1e-3), math.log(1e-1), hv))
            out[a + "dt_bias"] = ((dt + np.log(-np.expm1(-dt))).astype(np.float32), "bf16")
            # A = exp(A_log) uniform in [1, 16]; stored F32 like the real checkpoints.
            out[a + "A_log"] = (np.log(w.rng.uniform(1.0, 16.0, hv)).astype(np.float32), "f32")
            # Gated RMSNorm weight is used as-is (no 1 + w), drawn around 1; stored F32.
            out[a + "norm.weight"] = (w.normal((dk,), scales.gated_norm, mean=1.0), "f32")
            out[a + "out_proj.weight"] = (w.linear(D, value_dim), "bf16")
        else:
            s = lp + "self_attn."
            # q_proj rows are per-head [query_h (256) | gate_h (256)] blocks.
            out[s + "q_proj.weight"] = (w.linear(2 * NUM_HEADS * HEAD_DIM, D), "bf16")
            out[s + "k_proj.weight"] = (w.linear(NUM_KV_HEADS * HEAD_DIM, D), "bf16")
            out[s + "v_proj.weight"] = (w.linear(NUM_KV_HEADS * HEAD_DIM, D), "bf16")
            out[s + "o_proj.weight"] = (w.linear(D, NUM_HEADS * HEAD_DIM), "bf16")
            out[s + "q_norm.weight"] = (w.zero_centred_norm(HEAD_DIM), "bf16")
            out[s + "k_norm.weight"] = (w.zero_centred_norm(HEAD_DIM), "bf16")
        out[lp + "post_attention_layernorm.weight"] = (w.zero_centred_norm(D), "bf16")
        m = lp + "mlp."
        if spec.moe:
            e, f, fs = spec.num_experts, spec.moe_intermediate, spec.shared_intermediate
            out[m + "gate.weight"] = (w.normal((e, D), scales.router), "bf16")
            # Fused 3-D experts without ".weight": gate rows 0..F-1, up rows F..2F-1.
            out[m + "experts.gate_up_proj"] = (w.normal((e, 2 * f, D), scales.proj_gain / math.sqrt(D)), "bf16")
            out[m + "experts.down_proj"] = (w.normal((e, D, f), scales.proj_gain / math.sqrt(f)), "bf16")
            out[m + "shared_expert.gate_proj.weight"] = (w.linear(fs, D), "bf16")
            out[m + "shared_expert.up_proj.weight"] = (w.linear(fs, D), "bf16")
            out[m + "shared_expert.down_proj.weight"] = (w.linear(D, fs), "bf16")
            out[m + "shared_expert_gate.weight"] = (w.linear(1, D), "bf16")
        else:
            out[m + "gate_proj.weight"] = (w.linear(spec.intermediate, D), "bf16")
            out[m + "up_proj.weight"] = (w.linear(spec.intermediate, D), "bf16")
            out[m + "down_proj.weight"] = (w.linear(D, spec.intermediate), "bf16")
    out[p + "norm.weight"] = (w.zero_centred_norm(D), "bf16")
    if not spec.tied:
        out["lm_head.weight"] = (w.normal((vocab, D), scales.lm_head), "bf16")
    return out


def draw_extras(seed: int, hidden: int = HIDDEN) -> dict[str, tuple[np.ndarray, str]]:
    """Tiny vision-tower and MTP tensors (consistent with vision_config) that loaders must drop."""
    w = WeightDrawer(seed + 7919, Scales())
    vh, vi, pm = VISION["hidden_size"], VISION["intermediate_size"], VISION["patch_size"]
    merged = vh * VISION["merge"] ** 2
    v = "model.visual."
    out: dict[str, tuple[np.ndarray, str]] = {
        v + "patch_embed.proj.weight": (w.normal((vh, 3, 2, pm, pm), 0.1), "bf16"),
        v + "patch_embed.proj.bias": (w.normal((vh,), 0.1), "bf16"),
        v + "pos_embed.weight": (w.normal((16, vh), 0.1), "bf16"),
    }
    for i in range(VISION["depth"]):
        b = f"{v}blocks.{i}."
        for n in ("norm1", "norm2"):
            out[b + n + ".weight"] = (w.normal((vh,), 0.1, mean=1.0), "bf16")
            out[b + n + ".bias"] = (w.normal((vh,), 0.1), "bf16")
        out[b + "attn.qkv.weight"] = (w.linear(3 * vh, vh), "bf16")
        out[b + "attn.qkv.bias"] = (w.normal((3 * vh,), 0.1), "bf16")
        out[b + "attn.proj.weight"] = (w.linear(vh, vh), "bf16")
        out[b + "attn.proj.bias"] = (w.normal((vh,), 0.1), "bf16")
        out[b + "mlp.linear_fc1.weight"] = (w.linear(vi, vh), "bf16")
        out[b + "mlp.linear_fc1.bias"] = (w.normal((vi,), 0.1), "bf16")
        out[b + "mlp.linear_fc2.weight"] = (w.linear(vh, vi), "bf16")
        out[b + "mlp.linear_fc2.bias"] = (w.normal((vh,), 0.1), "bf16")
    out[v + "merger.norm.weight"] = (w.normal((vh,), 0.1, mean=1.0), "bf16")
    out[v + "merger.norm.bias"] = (w.normal((vh,), 0.1), "bf16")
    out[v + "merger.linear_fc1.weight"] = (w.linear(merged, merged), "bf16")
    out[v + "merger.linear_fc1.bias"] = (w.normal((merged,), 0.1), "bf16")
    out[v + "merger.linear_fc2.weight"] = (w.linear(hidden, merged), "bf16")
    out[v + "merger.linear_fc2.bias"] = (w.normal((hidden,), 0.1), "bf16")
    # A few small MTP-head tensors. The real head also has mtp.fc.weight [D, 2D] and a full decoder
    # layer under mtp.layers.0; they are left out to keep the fixtures small.
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{n}.weight"] = (w.zero_centred_norm(hidden), "bf16")
    out["mtp.layers.0.input_layernorm.weight"] = (w.zero_centred_norm(hidden), "bf16")
    out["mtp.layers.0.post_attention_layernorm.weight"] = (w.zero_centred_norm(hidden), "bf16")
    return out


def to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """float32 array -> stored tensor (bf16 uses round-to-nearest-even)."""
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.to(torch.bfloat16) if dtype == "bf16" else t.clone()


def write_sharded(
    tensors: dict[str, tuple[np.ndarray, str]], out_dir: Path, last_shard_prefix: str | None = None
) -> dict[str, torch.Tensor]:
    """Write two shards plus the index; returns the stored tensors by name.

    Tensors keep their insertion order (language model first, then lm_head, visual, mtp); the
    first shard takes tensors until it holds about half of the bytes. With `last_shard_prefix`,
    tensors whose names start with it go to the last shard and are left out of that count, so
    adding them (the trained MTP head) leaves the first shard's bytes as they were.
    """
    stored = {name: to_torch(arr, dt) for name, (arr, dt) in tensors.items()}
    tail = lambda name: last_shard_prefix is not None and name.startswith(last_shard_prefix)  # noqa: E731
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    total = sum(nbytes(t) for name, t in stored.items() if not tail(name))
    shards: list[dict[str, torch.Tensor]] = [{}, {}]
    acc = 0
    for name, t in stored.items():
        k = 1 if tail(name) or acc >= total / 2 else 0
        shards[k][name] = t
        if not tail(name):
            acc += nbytes(t)
    weight_map: dict[str, str] = {}
    for shard, fname in zip(shards, SHARD_NAMES):
        save_file(shard, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in shard})
    index = {"metadata": {"total_size": sum(nbytes(t) for t in stored.values())}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(out_dir / INDEX_NAME, index)
    return stored
