"""Train the multi-token-prediction (MTP) head of fixtures/tiny-trained on its frozen trunk.

Qwen3.5 checkpoints carry an MTP head under `mtp.*` (README "The MTP head"): from the main model's
final hidden state at position t (after its final norm) and the embedding of token t+1 it predicts
token t+2, through two zero-centred norms, a fc over [embedding | hidden], one full-attention
decoder layer with its own KV cache (RoPE at position t) and a final norm, scored by the main
model's (shared) lm_head. This module builds that head from Hugging Face's own Qwen3.5 blocks
(`Qwen3_5DecoderLayer` of a full-attention layer, `Qwen3_5RMSNorm`) and trains it the way the
architecture is trained — next-next-token cross-entropy on the main model's hidden states — with
the trunk (embedding, layers, final norm, tied lm_head) frozen: the main model's weights and
goldens do not move.

Deterministic like train_tiny.py: seeded, one torch thread, deterministic algorithms; batches are
drawn with numpy's seeded generator from trunk hidden states computed once over non-overlapping
windows of the training stream. The result is cached beside the trunk's
(`~/.cache/anemll-qwen35/tiny-trained-mtp-<key>/`), keyed on the trunk's stored tensors, the
token streams, the settings and the library versions.

The forward here is the *training* forward (whole sequences, causal mask, no cache); the goldens
come from oracle_mtp.py, an independent forward with an explicit KV cache, checked against this one.
"""

from __future__ import annotations

import hashlib
import json
import math
import time

import numpy as np
import torch

import corpus_kjv
import fit
import make_fixtures as mf
from files import write_json

SEED = 0
SEQ = 256  # positions per training window (as the trunk was trained); each needs tokens t+1 and t+2
BATCH = 16
STEPS = 1000
INIT_STD = 0.02  # HF's initializer_range for the head's matrices; its norms start at 0 (1 + w = 1)
HIDDEN_BATCH = 16  # windows per trunk forward when precomputing hidden states

# The head's tensors in checkpoint order (the names real Qwen3.5 checkpoints use, prefix "mtp.").
LAYER = "layers.0."
HEAD_NAMES = (
    "fc.weight",
    "pre_fc_norm_embedding.weight",
    "pre_fc_norm_hidden.weight",
    LAYER + "input_layernorm.weight",
    LAYER + "self_attn.q_proj.weight",
    LAYER + "self_attn.k_proj.weight",
    LAYER + "self_attn.v_proj.weight",
    LAYER + "self_attn.o_proj.weight",
    LAYER + "self_attn.q_norm.weight",
    LAYER + "self_attn.k_norm.weight",
    LAYER + "post_attention_layernorm.weight",
    LAYER + "mlp.gate_proj.weight",
    LAYER + "mlp.up_proj.weight",
    LAYER + "mlp.down_proj.weight",
    "norm.weight",
)


def log(msg: str) -> None:
    print(msg, flush=True)


class MtpHead(torch.nn.Module):
    """The MTP head in Qwen3.5's layout; state_dict keys are the checkpoint names without "mtp."."""

    def __init__(self, config):
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

        super().__init__()
        D, eps = config.hidden_size, config.rms_norm_eps
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(D, eps=eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(D, eps=eps)
        self.fc = torch.nn.Linear(2 * D, D, bias=False)
        # a decoder layer built at the index of the first full-attention layer: HF picks the block
        # type from config.layer_types[index]; nothing else depends on it without a cache
        self.layers = torch.nn.ModuleList([Qwen3_5DecoderLayer(config, config.layer_types.index("full_attention"))])
        self.norm = Qwen3_5RMSNorm(D, eps=eps)

    def forward(self, hidden, next_embeds, position_embeddings, mask):
        """hidden [B, T, D] (main model, after its final norm) and next_embeds [B, T, D] (embedding
        of token t+1) -> the head's output hidden state [B, T, D], after mtp.norm (what lm_head
        scores and what a recursive draft feeds back as the next `hidden`)."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], dim=-1))
        x = self.layers[0](x, position_embeddings=position_embeddings, attention_mask=mask)
        return self.norm(x)


def causal_mask(t: int) -> torch.Tensor:
    return torch.full((t, t), float("-inf")).triu(1)[None, None]


def rope(trunk, t: int):
    """(cos, sin) of the trunk's own rotary embedding for positions 0..t-1 (text-only: 1-D RoPE)."""
    pos = torch.arange(t)[None]
    dummy = torch.zeros(1, t, trunk.config.hidden_size)
    return trunk.model.rotary_emb(dummy, pos)


def new_head(trunk) -> MtpHead:
    torch.manual_seed(SEED)
    head = MtpHead(trunk.config).float()
    with torch.no_grad():
        for p in head.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, INIT_STD)
            else:
                p.zero_()  # zero-centred norms: 1 + w = 1
    return head


def logits_of(trunk, out: torch.Tensor) -> torch.Tensor:
    return trunk.lm_head(out)


def head_forward(trunk, head: MtpHead, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
    """Whole-sequence training forward: positions 0..T-1, causal; returns the head's output hidden."""
    t = hidden.shape[1]
    with torch.no_grad():
        emb = trunk.model.embed_tokens(next_ids)
    return head(hidden, emb, rope(trunk, t), causal_mask(t))


def trunk_hidden(trunk, ids: torch.Tensor) -> torch.Tensor:
    """The main model's final hidden states (after model.norm) for a batch of windows [B, T]."""
    with torch.no_grad():
        return trunk.model(input_ids=ids, use_cache=False).last_hidden_state.float()


def windows(ids: np.ndarray) -> np.ndarray:
    """Non-overlapping windows of SEQ + 2 tokens (positions 0..SEQ-1 plus their t+1, t+2 tokens)."""
    n = (len(ids) - 2) // SEQ
    return np.stack([ids[k * SEQ : k * SEQ + SEQ + 2] for k in range(n)])


def precompute_hidden(trunk, wins: np.ndarray, what: str) -> torch.Tensor:
    out = torch.empty(len(wins), SEQ, trunk.config.hidden_size)
    started = time.perf_counter()
    for s in range(0, len(wins), HIDDEN_BATCH):
        x = torch.from_numpy(wins[s : s + HIDDEN_BATCH, :SEQ]).long()
        out[s : s + len(x)] = trunk_hidden(trunk, x)
        done = s + len(x)
        if done % (HIDDEN_BATCH * 40) == 0 or done == len(wins):
            log(f"mtp: {what} hidden states {done}/{len(wins)} windows, {(time.perf_counter() - started) / 60:.1f} min")
    return out


def settings(steps: int) -> dict:
    return {
        "seed": SEED, "threads": 1, "steps": steps, "batch": BATCH, "seq": SEQ,
        "optimizer": fit.OPTIMIZER,
        "peak_lr": fit.PEAK_LR, "warmup": fit.WARMUP, "final_lr_fraction": fit.FINAL_LR_FRACTION,
        "weight_decay": fit.WEIGHT_DECAY, "clip": fit.CLIP, "init_std": INIT_STD,
        "trained": "the head only; trunk (embedding, layers, final norm, tied lm_head) frozen",
        "data": f"trunk hidden states over non-overlapping {SEQ}-token windows of the training stream",
        "loss": "next-next-token cross-entropy: position t sees hidden_t and token t+1, predicts token t+2",
    }


def window_loss(trunk, head, hidden: torch.Tensor, wins: torch.Tensor) -> torch.Tensor:
    out = head_forward(trunk, head, hidden, wins[:, 1 : SEQ + 1])
    logits = logits_of(trunk, out)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), wins[:, 2 : SEQ + 2].reshape(-1))


def heldout_loss(trunk, head, hidden: torch.Tensor, wins: torch.Tensor) -> float:
    head.eval()
    with torch.no_grad():
        loss = float(window_loss(trunk, head, hidden, wins))
    head.train()
    return loss


def train(trunk, head, train_h, train_w, held_h, held_w, steps: int) -> dict:
    rng = np.random.default_rng(SEED)

    def step_loss() -> torch.Tensor:
        pick = torch.from_numpy(rng.integers(0, len(train_w), size=BATCH))
        return window_loss(trunk, head, train_h[pick], train_w[pick])

    head.train()
    heldout = lambda: heldout_loss(trunk, head, held_h, held_w)  # noqa: E731
    return fit.fit(list(head.parameters()), step_loss, heldout, steps, BATCH * SEQ, "mtp")


def trunk_digest(stored: dict[str, torch.Tensor]) -> str:
    """sha256 over the text model's stored tensors (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for name in sorted(stored):
        if name.startswith(("mtp.", "model.visual.")):
            continue
        t = stored[name].contiguous()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
    return h.hexdigest()


def trained_or_cached(trunk, stored, train_ids: np.ndarray, held_ids: np.ndarray, steps: int, name: str):
    """The trained head and its record; reuses an identical earlier run from the cache folder."""
    key = hashlib.sha256()
    key.update(trunk_digest(stored).encode())
    key.update(hashlib.sha256(train_ids.tobytes()).digest() + hashlib.sha256(held_ids.tobytes()).digest())
    key.update(json.dumps([settings(steps), corpus_kjv.DUMP_SHA256, mf.versions()], sort_keys=True).encode())
    cached = corpus_kjv.cache_dir().parent / f"{name}-mtp-{key.hexdigest()[:16]}"
    head = new_head(trunk)
    if (cached / "result.json").exists():
        from safetensors.torch import load_file

        log(f"mtp: reusing the head of an identical earlier run ({cached})")
        head.load_state_dict(load_file(str(cached / "head.safetensors")), strict=True)
        return head, json.loads((cached / "result.json").read_text())
    for p in trunk.parameters():
        p.requires_grad_(False)
    train_w = torch.from_numpy(windows(train_ids)).long()
    held_w = torch.from_numpy(windows(held_ids)).long()
    log(f"mtp: {len(train_w)} training windows, {len(held_w)} held-out windows of {SEQ} positions")
    t0, c0 = time.perf_counter(), time.process_time()
    train_h = precompute_hidden(trunk, train_w.numpy(), "training")
    held_h = precompute_hidden(trunk, held_w.numpy(), "held-out")
    hidden_seconds, hidden_cpu = time.perf_counter() - t0, time.process_time() - c0
    c1 = time.process_time()
    result = train(trunk, head, train_h, train_w, held_h, held_w, steps)
    result["train_cpu_seconds"] = time.process_time() - c1
    result["hidden_seconds"], result["hidden_cpu_seconds"] = hidden_seconds, hidden_cpu
    from safetensors.torch import save_file

    cached.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(cached / "head.safetensors"))
    write_json(cached / "result.json", result)
    return head, result


def checkpoint_tensors(head: MtpHead) -> dict[str, tuple[np.ndarray, str]]:
    """The head under its checkpoint names, in checkpoint order, all stored as BF16."""
    state = head.state_dict()
    if set(state) != set(HEAD_NAMES):
        raise SystemExit(f"train_mtp: head parameters {sorted(set(state) ^ set(HEAD_NAMES))} differ from the layout")
    return {f"mtp.{n}": (np.ascontiguousarray(state[n].detach().float().numpy()), "bf16") for n in HEAD_NAMES}


def load_stored(head: MtpHead, stored: dict[str, torch.Tensor]) -> MtpHead:
    """The head with the weights as stored in the checkpoint (BF16-rounded), in float32."""
    head.load_state_dict({n: stored[f"mtp.{n}"].float() for n in HEAD_NAMES}, strict=True)
    head.eval()
    return head


def teacher_forced(trunk, head, ids: np.ndarray) -> dict:
    """On a token stream, in SEQ windows as trained: next-next-token loss, top-1 accuracy against the
    true token t+2, and agreement with the main model's greedy prediction for position t+1 (given
    the true text up to t+1: the draft a verifier would accept if the main model had emitted t+1)."""
    wins = torch.from_numpy(windows(ids)).long()
    total, hits, agree, count = 0.0, 0, 0, 0
    with torch.no_grad():
        for s in range(0, len(wins), HIDDEN_BATCH):
            w = wins[s : s + HIDDEN_BATCH]
            hid = trunk_hidden(trunk, w[:, : SEQ + 1])  # positions 0..SEQ: h_t and h_{t+1}
            main_next = logits_of(trunk, hid[:, 1:]).argmax(-1)  # main greedy for t+2, context up to t+1
            logits = logits_of(trunk, head_forward(trunk, head, hid[:, :SEQ], w[:, 1 : SEQ + 1]))
            target = w[:, 2 : SEQ + 2]
            total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"))
            draft = logits.argmax(-1)
            hits += int((draft == target).sum())
            agree += int((draft == main_next).sum())
            count += target.numel()
    loss = total / count
    return {
        "positions": count,
        "next_next_token_loss": round(loss, 4),
        "next_next_token_perplexity": round(math.exp(loss), 3),
        "top1_vs_true_token": round(hits / count, 4),
        "top1_vs_main_greedy": round(agree / count, 4),
    }


def training_logits(trunk, head, hidden: np.ndarray, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The training forward on one sequence: hidden [T, D] and token ids of positions 1..T ->
    (logits [T, V], head hidden [T, D])."""
    with torch.no_grad():
        out = head_forward(trunk, head, torch.from_numpy(hidden)[None], torch.tensor([ids]))
        return logits_of(trunk, out)[0].numpy(), out[0].numpy()


def training_draft(trunk, head, hidden: np.ndarray, ids: list[int], t: int, steps: int) -> dict:
    """A recursive draft from position t with the training forward: the sequence of (hidden, next
    token) pairs is the true one up to t, then each step appends (its own output hidden, its own
    greedy token) at the next position and runs the whole causal sequence again (no cache)."""
    hs = [hidden[i] for i in range(t + 1)]
    toks = [ids[i + 1] for i in range(t + 1)]
    logits_rows, hidden_rows, drafted = [], [], []
    for _ in range(steps):
        logits, out = training_logits(trunk, head, np.stack(hs), toks)
        logits_rows.append(logits[-1])
        hidden_rows.append(out[-1])
        drafted.append(int(np.argmax(logits[-1])))
        hs.append(out[-1])
        toks.append(drafted[-1])
    return {"logits": np.stack(logits_rows), "hidden": np.stack(hidden_rows), "ids": drafted}


def parameters(head: MtpHead) -> int:
    return sum(p.numel() for p in head.parameters())


def record(result: dict, steps: int, n_params: int, final: dict) -> dict:
    """The `mtp` section of training.json (without the acceptance, added by the caller)."""
    return {
        "parameters": n_params,
        "settings": settings(steps),
        "final": final,
        "heldout_loss": result["heldout_loss"],
        "train_loss": result["train_loss"],
        "timing": {
            "hidden_states_seconds": round(result["hidden_seconds"], 1),
            "hidden_states_cpu_seconds": round(result["hidden_cpu_seconds"], 1),
            "train_seconds": round(result["seconds"], 1),
            "train_cpu_seconds": round(result["train_cpu_seconds"], 1),
            "tokens_per_second": round(steps * BATCH * SEQ / result["seconds"]),
        },
    }
