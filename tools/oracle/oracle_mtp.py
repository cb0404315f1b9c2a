"""Third oracle: Qwen3.5's multi-token-prediction (MTP) head, one position at a time with a KV cache.

Written from the architecture's published description (README "The MTP head"; vLLM
qwen3_5_mtp.py / qwen3_next_mtp.py, the spec-decode loop in vllm/v1/spec_decode/eagle.py), in
plain float32 torch operations on the checkpoint's `mtp.*` tensors — no model class, and nothing
from the training code (train_mtp.py), whose whole-sequence forward it is checked against. The
main model's hidden states come from the HF oracle (oracle_hf.load_model), after the final norm.

For position t, with the main model's final hidden state h_t and the token x_{t+1}:

    e   = RMSNorm1p(embed[x_{t+1}], mtp.pre_fc_norm_embedding)     # the main model's embedding
    h   = RMSNorm1p(h_t, mtp.pre_fc_norm_hidden)
    x   = mtp.fc @ concat(e, h)                                     # embedding first; no bias
    x   = full-attention decoder layer mtp.layers.0 at RoPE position t, appending its K/V to the
          head's own cache (entry t) and attending over entries 0..t
    out = RMSNorm1p(x, mtp.norm)
    logits = lm_head @ out                                          # the main model's lm_head

`logits` predicts x_{t+2}. A recursive draft feeds `out` back as the next hidden state, with its
own greedy token, at position t+1, t+2, ... (vLLM's "mtp" method). Every norm is zero-centred:
y = x / sqrt(mean(x^2) + eps) * (1 + w).

Usage: oracle_mtp.py [FIXTURE_DIR]  — recomputes the MTP goldens of a fixture (default
fixtures/tiny-trained) and checks them against its golden-mtp.safetensors.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import oracle_hf


@dataclass(frozen=True)
class MtpConfig:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float
    eps: float

    @staticmethod
    def of(fixture: Path) -> MtpConfig:
        cfg = json.loads((fixture / "config.json").read_text())
        t = cfg.get("text_config", cfg)
        rope = t["rope_parameters"]
        return MtpConfig(
            hidden=t["hidden_size"],
            heads=t["num_attention_heads"],
            kv_heads=t["num_key_value_heads"],
            head_dim=t["head_dim"],
            rotary_dim=int(t["head_dim"] * rope["partial_rotary_factor"]),
            rope_theta=float(rope["rope_theta"]),
            eps=float(t["rms_norm_eps"]),
        )


def rms_norm_1p(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * (1 + w)."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


class Cache:
    """The head's own KV cache: entry p holds the post-norm, post-RoPE key and the value of position p."""

    def __init__(self, keys: list[torch.Tensor] | None = None, values: list[torch.Tensor] | None = None):
        self.keys = keys or []
        self.values = values or []

    def __len__(self) -> int:
        return len(self.keys)

    def prefix(self, n: int) -> Cache:
        """A copy holding entries 0..n-1 (what a draft starting at position n sees)."""
        return Cache(self.keys[:n], self.values[:n])


class MtpOracle:
    def __init__(self, fixture: Path, stored: dict[str, torch.Tensor]):
        self.cfg = MtpConfig.of(fixture)
        self.w = {k[len("mtp.") :]: v.float() for k, v in stored.items() if k.startswith("mtp.")}
        self.embed = stored["model.language_model.embed_tokens.weight"].float()
        self.lm_head = stored["lm_head.weight"].float() if "lm_head.weight" in stored else self.embed
        c = self.cfg
        half = c.rotary_dim // 2
        # inv_freq[i] = theta^(-2i / rotary_dim), i = 0 .. rotary_dim/2 - 1 (float64, then float32)
        self.inv_freq = torch.tensor([c.rope_theta ** (-2.0 * i / c.rotary_dim) for i in range(half)], dtype=torch.float64)

    def rope(self, x: torch.Tensor, position: int) -> torch.Tensor:
        """Rotate-half RoPE on the first rotary_dim dims of each head [n, head_dim]; the rest pass."""
        half = self.cfg.rotary_dim // 2
        angle = position * self.inv_freq
        cos, sin = torch.cos(angle).float(), torch.sin(angle).float()
        x1, x2, rest = x[:, :half], x[:, half : 2 * half], x[:, 2 * half :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)

    def step(self, cache: Cache, hidden: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One position: the main model's (or a previous step's) hidden state and the next token ->
        (logits [V], output hidden [D]); appends this position's K/V to `cache` (position = len(cache))."""
        c, w = self.cfg, self.w
        H, Hkv, hd = c.heads, c.kv_heads, c.head_dim
        position = len(cache)
        e = rms_norm_1p(self.embed[token], w["pre_fc_norm_embedding.weight"], c.eps)
        h = rms_norm_1p(hidden, w["pre_fc_norm_hidden.weight"], c.eps)
        x = w["fc.weight"] @ torch.cat([e, h])

        # gated full attention (q_proj rows: per head [query (hd) | gate (hd)])
        p = "layers.0."
        a = rms_norm_1p(x, w[p + "input_layernorm.weight"], c.eps)
        qg = (w[p + "self_attn.q_proj.weight"] @ a).view(H, 2 * hd)
        q, gate = qg[:, :hd], qg[:, hd:].reshape(H * hd)
        k = (w[p + "self_attn.k_proj.weight"] @ a).view(Hkv, hd)
        v = (w[p + "self_attn.v_proj.weight"] @ a).view(Hkv, hd)
        q = self.rope(rms_norm_1p(q, w[p + "self_attn.q_norm.weight"], c.eps), position)
        k = self.rope(rms_norm_1p(k, w[p + "self_attn.k_norm.weight"], c.eps), position)
        cache.keys.append(k)
        cache.values.append(v)
        K, V = torch.stack(cache.keys), torch.stack(cache.values)  # [P, Hkv, hd]
        heads = []
        for i in range(H):
            j = i // (H // Hkv)  # GQA: query head i reads kv head floor(i / (H / Hkv))
            scores = (K[:, j] @ q[i]) / math.sqrt(hd)
            heads.append(torch.softmax(scores, dim=0) @ V[:, j])
        o = torch.cat(heads) * torch.sigmoid(gate)
        x = x + w[p + "self_attn.o_proj.weight"] @ o

        # SwiGLU MLP
        m = rms_norm_1p(x, w[p + "post_attention_layernorm.weight"], c.eps)
        up = torch.nn.functional.silu(w[p + "mlp.gate_proj.weight"] @ m) * (w[p + "mlp.up_proj.weight"] @ m)
        x = x + w[p + "mlp.down_proj.weight"] @ up

        out = rms_norm_1p(x, w["norm.weight"], c.eps)
        return self.lm_head @ out, out

    def sequence(self, hidden: np.ndarray, ids: list[int]) -> tuple[np.ndarray, np.ndarray, Cache]:
        """Teacher-forced over a sequence: position t gets (hidden[t], ids[t + 1]) for t < len(hidden)
        -> logits [T, V], output hidden [T, D] and the filled cache."""
        cache = Cache()
        rows, outs = [], []
        with torch.no_grad():
            for t in range(len(hidden)):
                logits, out = self.step(cache, torch.from_numpy(hidden[t]), ids[t + 1])
                rows.append(logits.numpy())
                outs.append(out.numpy())
        return np.stack(rows), np.stack(outs), cache

    def draft(self, cache: Cache, hidden: np.ndarray, ids: list[int], t: int, steps: int) -> dict:
        """A recursive greedy draft from position t. `cache` holds the teacher-forced entries 0..t-1
        (or more; only those are used). Step 0 gets (hidden[t], ids[t + 1]) at position t; step s > 0
        gets (step s-1's output hidden, step s-1's greedy token) at position t + s."""
        c = cache.prefix(t)
        rows, outs, drafted = [], [], []
        h, token = torch.from_numpy(hidden[t]), ids[t + 1]
        with torch.no_grad():
            for _ in range(steps):
                logits, h = self.step(c, h, token)
                token = int(torch.argmax(logits))
                rows.append(logits.numpy())
                outs.append(h.numpy())
                drafted.append(token)
        return {"logits": np.stack(rows), "hidden": np.stack(outs), "ids": drafted}


def main_hidden(model, ids: list[int]) -> np.ndarray:
    """The main model's final hidden states (after model.norm) for a sequence [T, D] (HF, uncached)."""
    with torch.no_grad():
        return model.model(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state[0].float().numpy()


def greedy(model, prompt_ids: list[int], n: int) -> list[int]:
    """n greedy tokens after the prompt with HF's cached decode (no stop tokens)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        generated = [int(torch.argmax(out.logits[0, -1]))]
        cache = oracle_hf._cache_of(out)
        while len(generated) < n:
            step = model(input_ids=torch.tensor([[generated[-1]]]), cache=cache, use_cache=True)
            cache = oracle_hf._cache_of(step)
            generated.append(int(torch.argmax(step.logits[0, -1])))
    return generated


# Acceptance protocol on held-out text: every verse of the held-out book is a prompt; the main model
# continues it greedily for ACCEPT_TOKENS tokens; a speculation may start at every position t from
# the prompt's last one (the main model has just emitted the first generated token) while the
# continuation still holds MAX_GAMMA + 1 tokens after t: 1 emitted + MAX_GAMMA to verify.
ACCEPT_TOKENS = 36
MAX_GAMMA = 4


def acceptance(model, oracle: MtpOracle, prompts: list[list[int]]) -> tuple[dict, dict[str, np.ndarray]]:
    """Greedy speculative acceptance of the head's recursive drafts against the main model's own
    greedy tokens: for γ = 1..MAX_GAMMA, the accepted length at a start t is the longest prefix of
    the γ drafted tokens equal to the main model's tokens t+2 .. t+γ+1."""
    seqs, offsets, prompt_lens, positions, which, drafts = [], [0], [], [], [], []
    for s, prompt in enumerate(prompts):
        seq = prompt + greedy(model, prompt, ACCEPT_TOKENS)
        hidden = main_hidden(model, seq)
        _, _, cache = oracle.sequence(hidden[:-1], seq)
        n = len(prompt)
        for t in range(n - 1, len(seq) - MAX_GAMMA - 1):
            drafts.append(oracle.draft(cache, hidden, seq, t, MAX_GAMMA)["ids"])
            positions.append(t)
            which.append(s)
        seqs.extend(seq)
        offsets.append(len(seqs))
        prompt_lens.append(n)
    flat = np.asarray(seqs, dtype=np.int64)
    off = np.asarray(offsets, dtype=np.int64)
    d = np.asarray(drafts, dtype=np.int64)
    truth = np.stack([flat[off[s] + t + 2 : off[s] + t + 2 + MAX_GAMMA] for s, t in zip(which, positions)])
    match = np.cumprod(d == truth, axis=1)  # [starts, MAX_GAMMA]: 1 while every draft so far matched
    stats = {}
    for g in range(1, MAX_GAMMA + 1):
        accepted = match[:, :g].sum(axis=1)
        stats[str(g)] = {
            "mean_accepted": round(float(accepted.mean()), 4),
            "acceptance_rate": round(float(accepted.mean() / g), 4),
            "tokens_per_verify_call": round(float(1 + accepted.mean()), 4),
            "all_accepted": round(float((accepted == g).mean()), 4),
        }
    depth, reached = [], np.ones(len(match), dtype=bool)  # P(draft k accepted | drafts < k accepted)
    for k in range(MAX_GAMMA):
        depth.append(round(float(match[reached, k].mean()), 4) if reached.any() else None)
        reached = match[:, k].astype(bool)
    doc = {
        "prompts": len(prompts),
        "continuation_tokens": ACCEPT_TOKENS,
        "starts": len(d),
        "gamma": stats,
        "conditional_acceptance_by_depth": depth,
    }
    tensors = {
        "ruth_ids": flat,
        "ruth_offsets": off,
        "ruth_prompt_lengths": np.asarray(prompt_lens, dtype=np.int64),
        "ruth_draft_sequence": np.asarray(which, dtype=np.int64),
        "ruth_draft_positions": np.asarray(positions, dtype=np.int64),
        "ruth_drafts": d,
    }
    return doc, tensors


# Where the stored drafts start: the golden sequence's last prompt position (the main model has just
# emitted generated_ids[0]) and a later one; four positions of the held-out text.
GOLDEN_DRAFT_FROM = "last prompt position, and 5 positions later"
HELDOUT_POSITIONS = 128  # teacher-forced rows stored for the held-out text (positions 0..127)
HELDOUT_DRAFTS = (0, 42, 85, 127)
DRAFT_STEPS = 3


def goldens(fixture: Path, stored: dict[str, torch.Tensor], golden_ids: list[int], n_prompt: int,
            heldout_ids: list[int], prompts: list[list[int]]) -> tuple[dict[str, np.ndarray], dict, MtpOracle]:
    """Every MTP golden of a fixture: teacher-forced logits on the golden sequence (prompt +
    greedy continuation) and on the start of the held-out text, recursive drafts, acceptance."""
    model = oracle_hf.load_model(fixture, False, stored)
    oracle = MtpOracle(fixture, stored)
    out: dict[str, np.ndarray] = {}
    for key, ids, starts in (
        ("golden", golden_ids, (n_prompt - 1, n_prompt + 4)),
        ("heldout", heldout_ids[: HELDOUT_POSITIONS + 1], HELDOUT_DRAFTS),
    ):
        hidden = main_hidden(model, ids)[:-1]  # positions 0..T-2: each has a next token
        logits, outs, cache = oracle.sequence(hidden, ids)
        drafts = [oracle.draft(cache, hidden, ids, t, DRAFT_STEPS) for t in starts]
        out[f"{key}_ids"] = np.asarray(ids, dtype=np.int64)
        out[f"{key}_hidden"] = hidden.astype(np.float32)
        out[f"{key}_logits"] = logits.astype(np.float32)
        out[f"{key}_mtp_hidden"] = outs.astype(np.float32)
        out[f"{key}_draft_positions"] = np.asarray(starts, dtype=np.int64)
        out[f"{key}_draft_ids"] = np.asarray([d["ids"] for d in drafts], dtype=np.int64)
        out[f"{key}_draft_logits"] = np.stack([d["logits"] for d in drafts]).astype(np.float32)
        out[f"{key}_draft_hidden"] = np.stack([d["hidden"] for d in drafts]).astype(np.float32)
    doc, tensors = acceptance(model, oracle, prompts)
    out.update(tensors)
    return out, doc, oracle


def main() -> None:
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file

    import checkpoint as ck

    fixture = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "fixtures" / "tiny-trained"
    torch.set_num_threads(1)
    oracle_hf.assert_reference_kernels()
    stored: dict[str, torch.Tensor] = {}
    for name in ck.SHARD_NAMES:
        stored.update(load_file(str(fixture / name)))
    want = load_numpy(str(fixture / "golden-mtp.safetensors"))
    doc = json.loads((fixture / "golden-mtp.json").read_text())
    prompts = [want["ruth_ids"][a : a + n].tolist() for a, n in zip(want["ruth_offsets"][:-1], want["ruth_prompt_lengths"])]
    n_prompt = doc["golden"]["n_prompt_tokens"]
    got, acc, _ = goldens(fixture, stored, want["golden_ids"].tolist(), n_prompt, want["heldout_ids"].tolist(), prompts)
    worst = 0.0
    for k, v in want.items():
        d = float(np.max(np.abs(got[k].astype(np.float64) - v))) if v.dtype.kind == "f" else float(np.any(got[k] != v))
        print(f"{k}: {'max |d| ' if v.dtype.kind == 'f' else 'differs '}{d:.3e}")
        worst = max(worst, d)
    if acc != doc["acceptance"]:
        raise SystemExit(f"oracle_mtp: acceptance differs: {acc} vs {doc['acceptance']}")
    if worst > 1e-4:
        raise SystemExit(f"oracle_mtp: goldens differ by {worst:.3e}")
    print(f"oracle_mtp: {fixture} matches its golden-mtp.safetensors (max |d| {worst:.3e})")


if __name__ == "__main__":
    main()
