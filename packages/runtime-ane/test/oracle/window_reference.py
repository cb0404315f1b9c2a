"""Independent numpy (float64) Qwen3.5 forward for the ring-mode test: full-attention layers see
only the first `sinks` tokens and the most recent `ctx - sinks` (this one included), while the
Gated DeltaNet layers carry their state over the whole history. Written from the model's
definition (HF's Qwen3.5 text model: zero-centred RMSNorm, gated attention with partial RoPE, the
recurrent gated delta rule, SwiGLU), reading the checkpoint's safetensors directly; nothing here
comes from the converter, the interpreter or the chain runner.

stdin:  {"checkpoint": DIR, "ids": [...], "ctx": C, "sinks": S, "from": F}
stdout: {"logits": [[...] for every position >= F]}
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def read_checkpoint(folder):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for file in sorted(set(index["weight_map"].values())):
        raw = (folder / file).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            buf = raw[base + a : base + b]
            if t["dtype"] == "BF16":
                x = (np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif t["dtype"] == "F32":
                x = np.frombuffer(buf, dtype=np.float32)
            else:
                raise ValueError(f"{name}: dtype {t['dtype']} not handled")
            out[name] = x.astype(np.float64).reshape(t["shape"])
    return out


def rms_1p(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def main():
    req = json.load(sys.stdin)
    folder = Path(req["checkpoint"])
    cfg = json.loads((folder / "config.json").read_text())
    tc = cfg.get("text_config", cfg)
    w = read_checkpoint(folder)
    P = "model.language_model."
    D = tc["hidden_size"]
    eps = tc["rms_norm_eps"]
    H, Hkv, hd = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    K = tc["linear_conv_kernel_dim"]
    rope = tc.get("rope_parameters", {})
    theta = rope.get("rope_theta", tc.get("rope_theta"))
    rot = int(hd * rope.get("partial_rotary_factor", tc.get("partial_rotary_factor", 1.0)))
    inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    types = tc["layer_types"]
    ctx, sinks = req["ctx"], req["sinks"]
    ids = req["ids"]
    T = len(ids)
    embed = w[P + "embed_tokens.weight"]
    head = w.get("lm_head.weight", embed)

    def rope_apply(x, p):  # x [heads, hd]
        ang = p * inv_freq
        c, s = np.cos(ang), np.sin(ang)
        half = rot // 2
        x1, x2 = x[:, :half], x[:, half:rot]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[:, rot:]], axis=1)

    def visible(p, j):
        return j <= p and (j < sinks or j > p - (ctx - sinks))

    h = embed[ids]  # [T, D]
    for L, kind in enumerate(types):
        pre = f"{P}layers.{L}."
        x = rms_1p(h, w[pre + "input_layernorm.weight"], eps)
        out = np.zeros_like(x)
        if kind == "full_attention":
            a = pre + "self_attn."
            qg = (x @ w[a + "q_proj.weight"].T).reshape(T, H, 2 * hd)
            q, gate = qg[:, :, :hd], qg[:, :, hd:].reshape(T, H * hd)
            k = (x @ w[a + "k_proj.weight"].T).reshape(T, Hkv, hd)
            v = (x @ w[a + "v_proj.weight"].T).reshape(T, Hkv, hd)
            q = rms_1p(q, w[a + "q_norm.weight"], eps)
            k = rms_1p(k, w[a + "k_norm.weight"], eps)
            q = np.stack([rope_apply(q[t], t) for t in range(T)])
            k = np.stack([rope_apply(k[t], t) for t in range(T)])
            o = np.zeros((T, H, hd))
            for t in range(T):
                keys = [j for j in range(T) if visible(t, j)]
                for hh in range(H):
                    g = hh // (H // Hkv)
                    s = np.array([q[t, hh] @ k[j, g] for j in keys]) / math.sqrt(hd)
                    e = np.exp(s - s.max())
                    o[t, hh] = (e / e.sum()) @ v[keys, g]
            o = o.reshape(T, H * hd) * (1.0 / (1.0 + np.exp(-gate)))
            out = o @ w[a + "o_proj.weight"].T
        else:
            a = pre + "linear_attn."
            mixed = x @ w[a + "in_proj_qkv.weight"].T  # [T, conv_dim]
            z = (x @ w[a + "in_proj_z.weight"].T).reshape(T, Hv, dv)
            b = x @ w[a + "in_proj_b.weight"].T
            al = x @ w[a + "in_proj_a.weight"].T
            cw = w[a + "conv1d.weight"][:, 0, :]  # [conv_dim, K]
            X = np.concatenate([np.zeros((K - 1, mixed.shape[1])), mixed], axis=0)
            conv = silu(np.stack([np.sum(cw * X[t : t + K].T, axis=1) for t in range(T)]))
            kd = Hk * dk
            q = l2norm(conv[:, :kd].reshape(T, Hk, dk)) / math.sqrt(dk)
            k = l2norm(conv[:, kd : 2 * kd].reshape(T, Hk, dk))
            v = conv[:, 2 * kd :].reshape(T, Hv, dv)
            r = Hv // Hk
            q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)
            beta = 1.0 / (1.0 + np.exp(-b))
            g = -np.exp(w[a + "A_log"]) * softplus(al + w[a + "dt_bias"])
            S = np.zeros((Hv, dk, dv))
            o = np.zeros((T, Hv, dv))
            for t in range(T):
                for j in range(Hv):
                    S[j] *= np.exp(g[t, j])
                    delta = (v[t, j] - S[j].T @ k[t, j]) * beta[t, j]
                    S[j] += np.outer(k[t, j], delta)
                    o[t, j] = S[j].T @ q[t, j]
            n = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps)
            o = w[a + "norm.weight"] * n * silu(z)
            out = o.reshape(T, Hv * dv) @ w[a + "out_proj.weight"].T
        h = h + out
        x = rms_1p(h, w[pre + "post_attention_layernorm.weight"], eps)
        m = pre + "mlp."
        h = h + (silu(x @ w[m + "gate_proj.weight"].T) * (x @ w[m + "up_proj.weight"].T)) @ w[m + "down_proj.weight"].T
    h = rms_1p(h, w[P + "norm.weight"], eps)
    start = req.get("from", 0)
    logits = h[start:] @ head.T
    json.dump({"logits": logits.tolist()}, sys.stdout)


if __name__ == "__main__":
    main()
