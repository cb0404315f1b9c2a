"""The training loop of the trained fixture, shared by its trunk (train_tiny.py) and its MTP head
(train_mtp.py): AdamW (β 0.9/0.95) with weight decay on matrices only, linear warm-up then cosine
decay to a fraction of the peak, gradient clipping, the held-out loss every EVAL_EVERY steps."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

PEAK_LR = 2e-3
WARMUP = 30
FINAL_LR_FRACTION = 0.1
WEIGHT_DECAY = 0.1
CLIP = 1.0
EVAL_EVERY = 50
OPTIMIZER = "AdamW(betas=(0.9, 0.95), eps=1e-8), weight decay on matrices only"


def lr_at(step: int, steps: int) -> float:
    if step < WARMUP:
        return PEAK_LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return PEAK_LR * (FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * t)))


def fit(
    params: list[torch.nn.Parameter],
    step_loss: Callable[[], torch.Tensor],
    heldout_loss: Callable[[], float],
    steps: int,
    tokens_per_step: int,
    tag: str,
) -> dict:
    """`steps` optimizer steps on `params`, each on the loss `step_loss()` draws and computes;
    returns the loss per step, the held-out loss at step 0 and every EVAL_EVERY steps, and the
    wall time."""
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=PEAK_LR,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    curve: list[float] = []
    evals: list[dict] = [{"step": 0, "loss": round(heldout_loss(), 4)}]
    print(f"{tag}: step 0 held-out loss {evals[0]['loss']}", flush=True)
    started = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        loss = step_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        curve.append(round(loss.item(), 4))
        done = step + 1
        if done % EVAL_EVERY == 0 or done == steps:
            evals.append({"step": done, "loss": round(heldout_loss(), 4)})
            el = time.perf_counter() - started
            print(
                f"{tag}: step {done}/{steps} loss {np.mean(curve[-EVAL_EVERY:]):.3f} held-out {evals[-1]['loss']:.3f}"
                f" lr {lr_at(step, steps):.2e} {done * tokens_per_step / el:.0f} tok/s {el / 60:.1f} min",
                flush=True,
            )
    return {"train_loss": curve, "heldout_loss": evals, "seconds": time.perf_counter() - started}
