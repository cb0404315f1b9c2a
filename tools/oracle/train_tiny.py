"""Train fixtures/tiny-trained: a 7-million-parameter Qwen3.5 that has learned the King James Bible.

One command, seeded, on the CPU (45-60 minutes on one core of a busy 2-core machine):

    .venv-oracle/bin/python tools/oracle/train_tiny.py

  1. corpus: the KJV from Debian's `bible-kjv-text` 4.38 (corpus_kjv.py; public domain), one verse
     per line, the Book of Ruth held out;
  2. tokenizer: a 4,000-id byte-level BPE trained on the training verses with the Qwen3.5 pipeline,
     plus the 33 Qwen3.5 special tokens in official order (make_tokenizer.py), 4,033 ids,
     embedding padded to 4,096 rows;
  3. model: Hugging Face `Qwen3_5ForCausalLM` built from the fixture's own config.json (two DDDA
     super-blocks: Gated DeltaNet x3 + gated full attention, partial RoPE 0.25, tied embeddings),
     HF's initialisation, trained in fp32 with AdamW on random 256-token windows of the training
     stream (fixed steps, warm-up then cosine decay, gradient clipping);
  4. fixture: the weights in the official layout (BF16, F32 A_log and gated norm, two shards,
     visual/MTP extras; checkpoint.py), goldens from HF fp32 and mlx-lm (make_fixtures.py) for a raw
     corpus-style prompt, and next to them: training.json (settings, corpus, versions, the loss
     curve), loss.svg, words.txt (every word of the training text, for the demo's test),
     heldout.txt and heldout.safetensors (the first 513 tokens of Ruth and HF fp32 teacher-forced
     logits for them: the quantization benchmark's reference).

Deterministic: seeded, one torch thread, deterministic algorithms; a rerun with the same
library versions on the same CPU gives byte-identical weights and goldens (only the `timing` entry
of training.json changes). CI never runs this; the fixture is committed.

Usage: train_tiny.py [--steps N] [--out DIR]   (--steps/--out for a quick trial run, not the fixture)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file as load_torch
from safetensors.torch import save_file as save_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint as ck  # noqa: E402
import corpus_kjv  # noqa: E402
import fit  # noqa: E402
import make_fixtures as mf  # noqa: E402
import make_tokenizer as mt  # noqa: E402
import oracle_hf  # noqa: E402
import oracle_mtp  # noqa: E402
import train_mtp  # noqa: E402
from files import write_atomic, write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = "tiny-trained"
SPEC = ck.FixtureSpec(name=NAME, tied=True, linear_k_heads=2, linear_v_heads=2, intermediate=512, hidden=256)
DESCRIPTION = (
    "trained on the King James Bible (Debian bible-kjv-text 4.38, public domain; Ruth held out): "
    "hidden 256, dense MLP 512, tied embeddings, GDN Hk = Hv = 2, 4,000-id BPE"
)
BPE_SIZE = 4000

SEED = 0
THREADS = 1  # one thread: reproducible reductions, and far faster than two on a busy 2-core machine
SEQ = 256  # tokens per training window
BATCH = 16  # windows per step (4,096 tokens)
STEPS = 600  # about 2.5 M tokens, 2.4 passes over the 1.0 M-token training stream
EVAL_EVERY = fit.EVAL_EVERY
BENCH_TOKENS = 513  # held-out tokens for the quantization benchmark: 512 teacher-forced positions

# Raw-text golden prompts, tried in order, then the first four words of every 250th training verse;
# the first whose greedy run passes make_fixtures.vet (margins >= 0.05 at every step) is used.
GOLDEN_PROMPTS = [
    "And God said,",
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the",
    "The LORD is my shepherd;",
    "And it came to pass,",
    "Then Jesus said unto them,",
    "And he said unto them,",
]


def log(msg: str) -> None:
    print(msg, flush=True)


def seed_everything() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def build_tokenizer(train_text: str, out: Path):
    """Train the BPE on the training verses; write tokenizer files and the chat template into `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "kjv-train.txt"
        corpus.write_text(train_text, encoding="utf-8")
        tok = mt.train_bpe(corpus, BPE_SIZE)
    mt.add_special_tokens(tok)
    write_atomic(out / "tokenizer.json", (tok.to_str(pretty=False) + "\n").encode("utf-8"))
    write_json(out / "tokenizer_config.json", mt.tokenizer_config(tok))
    write_atomic(out / "chat_template.jinja", (HERE / "chat_template.jinja").read_bytes())
    probes = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in [*mt.PROBES, *GOLDEN_PROMPTS]]
    mt.check_transformers_agrees(out, probes, BPE_SIZE)
    return tok


def token_ids(tok) -> dict[str, int]:
    names = ("<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    return {n: tok.token_to_id(n) for n in names}


def new_model(build: Path) -> torch.nn.Module:
    """Qwen3_5ForCausalLM from the config.json in `build` (the VL wrapper's text_config), HF init."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig.from_pretrained(str(build))
    config._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(config)
    return model.float()


def settings(steps: int) -> dict:
    return {
        "seed": SEED, "threads": THREADS, "steps": steps, "batch": BATCH, "seq": SEQ,
        "optimizer": fit.OPTIMIZER,
        "peak_lr": fit.PEAK_LR, "warmup": fit.WARMUP, "final_lr_fraction": fit.FINAL_LR_FRACTION,
        "weight_decay": fit.WEIGHT_DECAY, "clip": fit.CLIP, "bpe_size": BPE_SIZE,
    }


def heldout_loss(model: torch.nn.Module, ids: np.ndarray) -> float:
    """Mean next-token cross-entropy over the held-out stream, in SEQ-token windows."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, SEQ):
            x = torch.from_numpy(ids[s : s + SEQ + 1]).long()[None]
            if x.shape[1] < 2:
                break
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(logits[0], x[0, 1:], reduction="sum")
            total += float(loss)
            count += x.shape[1] - 1
    model.train()
    return total / count


def train(model: torch.nn.Module, train_ids: np.ndarray, held_ids: np.ndarray, steps: int) -> dict:
    rng = np.random.default_rng(SEED)
    stream = torch.from_numpy(train_ids).long()

    def step_loss() -> torch.Tensor:
        starts = rng.integers(0, len(stream) - SEQ - 1, size=BATCH)
        x = torch.stack([stream[s : s + SEQ + 1] for s in starts])
        logits = model(input_ids=x[:, :-1], use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    model.train()
    return fit.fit(list(model.parameters()), step_loss, lambda: heldout_loss(model, held_ids), steps, BATCH * SEQ, "train")


def trained_or_cached(model: torch.nn.Module, build: Path, train_ids, held_ids, steps: int) -> dict:
    """Train, or load the weights and curve of an earlier run with the very same inputs and settings
    (kept in the cache folder, so that a failure after training does not cost the training)."""
    key = hashlib.sha256()
    for f in ("config.json", "tokenizer.json"):
        key.update((build / f).read_bytes())
    key.update(json.dumps([settings(steps), corpus_kjv.DUMP_SHA256, mf.versions()], sort_keys=True).encode())
    cached = corpus_kjv.cache_dir().parent / f"{NAME}-{key.hexdigest()[:16]}"
    if (cached / "result.json").exists():
        log(f"train: reusing the weights of an identical earlier run ({cached})")
        missing, unexpected = model.load_state_dict(load_torch(str(cached / "weights.safetensors")), strict=False)
        if unexpected or missing != ["lm_head.weight"]:  # the tied head is the embedding
            raise SystemExit(f"train_tiny: cached weights in {cached} do not fit: {missing} {unexpected}")
        return json.loads((cached / "result.json").read_text())
    result = train(model, train_ids, held_ids, steps)
    cached.mkdir(parents=True, exist_ok=True)
    save_torch({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}, str(cached / "weights.safetensors"))
    write_json(cached / "result.json", result)
    return result


def trained_tensors(model: torch.nn.Module, vocab: int) -> dict[str, tuple[np.ndarray, str]]:
    """The trained weights under their checkpoint names, in the fixture layout's order and dtypes."""
    layout = ck.draw_language_model(SPEC, vocab, 0, ck.Scales())  # names, shapes and stored dtypes
    state = model.state_dict()
    out = {}
    for name, (template, dtype) in layout.items():
        t = state[name.replace("model.language_model.", "model.", 1)].detach().float().numpy()
        if t.shape != template.shape:
            raise SystemExit(f"train_tiny: {name} has shape {t.shape}, the layout says {template.shape}")
        out[name] = (np.ascontiguousarray(t), dtype)
    covered = {n.replace("model.language_model.", "model.", 1) for n in layout} | {"lm_head.weight"}
    if set(state) - covered:
        raise SystemExit(f"train_tiny: parameters not in the layout: {sorted(set(state) - covered)}")
    return out


def corpus_words(text: str) -> list[str]:
    return sorted({w.lower() for w in re.findall(r"[A-Za-z]+", text)})


def loss_svg(curve: list[float], evals: list[dict], title: str = f"{NAME}: cross-entropy (nats/token)") -> str:
    """A plain SVG line chart of the training loss (mean of each 10 steps) and the held-out loss.
    Hand-written: one chart does not justify adding a plotting library to the pinned venv."""
    w, h, left, right, top, bottom = 720, 400, 60, 20, 30, 50
    smooth = [(i + 10, float(np.mean(curve[i : i + 10]))) for i in range(0, len(curve), 10)]
    points = smooth + [(e["step"], e["loss"]) for e in evals]
    xmax = max(1, len(curve))
    ymax = math.ceil(max(y for _, y in points))
    ymin = math.floor(min(y for _, y in points))
    sx = lambda x: left + (w - left - right) * x / xmax  # noqa: E731
    sy = lambda y: top + (h - top - bottom) * (ymax - y) / max(1, ymax - ymin)  # noqa: E731
    line = lambda pts: " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
    ]
    for y in range(ymin, ymax + 1):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y}</text>')
    for x in range(0, xmax + 1, max(1, xmax // 6 // 50 * 50)):
        parts.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x}</text>')
    parts += [
        f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">step ({BATCH} x {SEQ} tokens)</text>',
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line(smooth)}"/>',
        f'<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{line([(e["step"], e["loss"]) for e in evals])}"/>',
        f'<text x="{w - right - 160}" y="{top + 20}" fill="#1f77b4">training (10-step mean)</text>',
        f'<text x="{w - right - 160}" y="{top + 36}" fill="#d62728">held-out (Ruth)</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def pick_golden_prompt(
    tok, build: Path, stored: dict, tok_ids: dict, verses: list, trial: bool
) -> tuple[tuple, oracle_hf.HfRun]:
    """The first candidate prompt that passes make_fixtures.vet (a trial run takes the first)."""
    stop = {tok_ids["<|endoftext|>"], tok_ids["<|im_end|>"]}
    openings = [" ".join(v.text.split()[:4]) for v in verses[::250]]
    for text in GOLDEN_PROMPTS + openings:
        ids = tok.encode(text, add_special_tokens=False).ids
        hf = oracle_hf.run(build, False, stored, ids, mf.N_DECODE)
        reason = mf.vet(hf, tok.get_vocab_size(), stop)
        if reason is None:
            log(f"goldens: prompt {text!r} accepted, greedy continuation {tok.decode(hf.generated)!r}")
            return (text, ids, False, None), hf
        log(f"goldens: prompt {text!r} rejected ({reason})")
        if trial:
            log("goldens: trial run (--out): keeping it anyway")
            return (text, ids, False, None), hf
    raise SystemExit("train_tiny: no golden prompt passed the margin checks")


def heldout_reference(build: Path, stored: dict, ids: list[int]) -> np.ndarray:
    """HF fp32 logits, one uncached forward over ids[:-1] (teacher forcing)."""
    model = oracle_hf.load_model(build, False, stored)
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids[:-1]]), use_cache=False).logits[0].float().numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", type=Path, default=None, help="a trial run: write here instead of fixtures/tiny-trained")
    ap.add_argument("--mtp-steps", type=int, default=train_mtp.STEPS)
    ap.add_argument(
        "--mtp-only", action="store_true",
        help="train only the MTP head, on the committed fixtures/tiny-trained trunk (its other files are kept)",
    )
    args = ap.parse_args()
    seed_everything()
    transformers.utils.logging.disable_progress_bar()
    oracle_hf.assert_reference_kernels()
    if args.mtp_only:
        mtp_only(args)
        return

    train_verses, held_verses = corpus_kjv.split()
    train_text, held_text = corpus_kjv.as_text(train_verses), corpus_kjv.as_text(held_verses)
    log(f"corpus: {len(train_verses)} training verses, {len(held_verses)} held out ({corpus_kjv.HELD_OUT_BOOK})")

    build = mf.FIXTURES / f".build-{NAME}" if args.out is None else args.out.parent / f".build-{args.out.name}"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    try:
        tok = build_tokenizer(train_text, build)
        tok_ids = token_ids(tok)
        vocab = ck.padded_vocab(tok.get_vocab_size())
        write_json(build / "config.json", ck.wrapper_config(SPEC, vocab, tok_ids))
        write_json(build / "generation_config.json", ck.generation_config(tok_ids))
        train_ids = np.asarray(tok.encode(train_text, add_special_tokens=False).ids, dtype=np.int64)
        held_ids = np.asarray(tok.encode(held_text, add_special_tokens=False).ids, dtype=np.int64)
        log(f"tokens: {len(train_ids)} training, {len(held_ids)} held out; vocab {tok.get_vocab_size()} ids, {vocab} rows")

        model = new_model(build)
        n_params = sum(p.numel() for p in model.parameters())
        log(f"model: {n_params} parameters ({n_params - vocab * SPEC.hidden} without the embedding)")
        result = trained_or_cached(model, build, train_ids, held_ids, args.steps)

        tensors = trained_tensors(model, vocab)
        tensors.update(ck.draw_extras(SEED, SPEC.hidden))
        stored = ck.write_sharded(tensors, build)
        del model

        prompt, hf = pick_golden_prompt(tok, build, stored, tok_ids, train_verses, trial=args.out is not None)
        bench_ids = [int(i) for i in held_ids[:BENCH_TOKENS]]
        save_numpy(
            {"ids": np.asarray(bench_ids, dtype=np.int64), "logits": heldout_reference(build, stored, bench_ids)},
            str(build / "heldout.safetensors"),
            metadata={"format": "np"},
        )
        write_atomic(build / "heldout.txt", held_text.encode("ascii"))
        write_atomic(build / "words.txt", "".join(w + "\n" for w in corpus_words(train_text)).encode("ascii"))
        final_train = float(np.mean(result["train_loss"][-EVAL_EVERY:]))
        training = {
            "corpus": {
                "package": "bible-kjv-text",
                "version": corpus_kjv.PACKAGES["bible-kjv-text"][0],
                "reader": f"bible-kjv {corpus_kjv.PACKAGES['bible-kjv'][0]} (bible -f Gen1:1-Rev22:21)",
                "licence": corpus_kjv.LICENCE,
                "dump_sha256": corpus_kjv.DUMP_SHA256,
                "held_out": f"the Book of {corpus_kjv.HELD_OUT_BOOK} ({len(held_verses)} verses)",
                "training_verses": len(train_verses),
                "training_tokens": len(train_ids),
                "held_out_tokens": len(held_ids),
            },
            "model": {"parameters": n_params, "hidden": SPEC.hidden, "intermediate": SPEC.intermediate, "vocab_rows": vocab},
            "settings": settings(args.steps),
            "final": {"train_loss_last_50": round(final_train, 4), "heldout_loss": result["heldout_loss"][-1]["loss"],
                      "heldout_perplexity": round(math.exp(result["heldout_loss"][-1]["loss"]), 3)},
            "heldout_loss": result["heldout_loss"],
            "train_loss": result["train_loss"],
            "versions": mf.versions(),
            "timing": {"train_seconds": round(result["seconds"], 1), "tokens_per_second": round(args.steps * BATCH * SEQ / result["seconds"])},
        }
        write_json(build / "training.json", training)
        write_atomic(build / "loss.svg", loss_svg(result["train_loss"], result["heldout_loss"]).encode("utf-8"))
        header = {"training": {k: training[k] for k in ("corpus", "model", "settings", "final")}}
        golden = mf.write_goldens(build, SPEC, DESCRIPTION, header, tok_hf(build), prompt, hf)
        add_mtp_head(build, tok, train_ids, held_ids, training, golden, args.mtp_steps)
        finish(build, args.out)
        log(f"train_tiny: done -> {args.out or mf.FIXTURES / NAME}")
    finally:
        if build.exists():
            shutil.rmtree(build)


def layout_order(vocab: int) -> list[str]:
    """Checkpoint order of the text model and the vision extras (the MTP head follows them)."""
    extras = [n for n in ck.draw_extras(SEED, SPEC.hidden) if not n.startswith("mtp.")]
    return [*ck.draw_language_model(SPEC, vocab, 0, ck.Scales()), *extras]


def read_stored(build: Path) -> dict[str, torch.Tensor]:
    stored: dict[str, torch.Tensor] = {}
    for name in ck.SHARD_NAMES:
        stored.update(load_torch(str(build / name)))
    return stored


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def check_against_training(trunk, head, gold: dict[str, np.ndarray]) -> dict:
    """The oracle's goldens vs the training code's whole-sequence forward on the same inputs."""
    out = {}
    for key in ("golden", "heldout"):
        ids = gold[f"{key}_ids"].tolist()
        hidden = gold[f"{key}_hidden"]
        logits, mtp_hidden = train_mtp.training_logits(trunk, head, hidden, ids[1 : len(hidden) + 1])
        worst = max(max_abs(logits, gold[f"{key}_logits"]), max_abs(mtp_hidden, gold[f"{key}_mtp_hidden"]))
        for i, t in enumerate(gold[f"{key}_draft_positions"].tolist()):
            d = train_mtp.training_draft(trunk, head, hidden, ids, t, oracle_mtp.DRAFT_STEPS)
            if d["ids"] != gold[f"{key}_draft_ids"][i].tolist():
                raise SystemExit(f"train_tiny: {key} draft from {t}: training {d['ids']} vs oracle {gold[f'{key}_draft_ids'][i]}")
            worst = max(worst, max_abs(d["logits"], gold[f"{key}_draft_logits"][i]), max_abs(d["hidden"], gold[f"{key}_draft_hidden"][i]))
        out[key] = float(f"{worst:.3e}")
        log(f"mtp: oracle vs training forward, {key}: max |d| {worst:.3e} (logits, head hidden, drafts)")
    if max(out.values()) > MAX_MTP_ORACLE_DIFF:
        raise SystemExit(f"train_tiny: the MTP oracle and the training forward differ by {max(out.values()):.3e} > {MAX_MTP_ORACLE_DIFF}")
    out["tolerance"] = MAX_MTP_ORACLE_DIFF
    return out


MAX_MTP_ORACLE_DIFF = 1e-4  # both fp32; the same math in another order (measured: see golden-mtp.json)

MTP_FACTS = {
    "hidden_input": "the main model's final hidden state at position t, AFTER model.norm (what lm_head scores)",
    "fc_input": "concat([pre_fc_norm_embedding(embed[token t+1]), pre_fc_norm_hidden(hidden_t)]): embedding first",
    "fc": "mtp.fc.weight [D, 2D], no bias",
    "layer": "mtp.layers.0: a full-attention decoder layer like the main model's (gated attention, q/k norms, "
    "partial RoPE, SwiGLU MLP, two zero-centred pre-norms), with its own KV cache",
    "positions": "the head's entry for (hidden_t, token t+1) sits at RoPE position t and cache slot t (vLLM: the "
    "target positions); it attends over slots 0..t",
    "output": "out = mtp.norm(layer output); logits = lm_head(out), the main model's lm_head (tied here)",
    "recursion": "draft step s > 0 feeds (out of step s-1, its greedy token) at position t+s",
    "norms": "all four mtp norms and the layer's norms are zero-centred: x / rms(x) * (1 + w), eps 1e-6",
    "embedding": "the main model's embed_tokens (mtp_use_dedicated_embeddings: false)",
}


def add_mtp_head(build: Path, tok, train_ids, held_ids, training: dict, golden: dict, steps: int) -> None:
    """Train the MTP head on the trunk stored in `build`, rewrite the two shards and the index with
    it (the text model's tensors and the first shard unchanged), then write training.json's `mtp`
    record, loss-mtp.svg and the goldens of the independent oracle (golden-mtp.safetensors/.json)."""
    stored = read_stored(build)
    trunk = oracle_hf.load_model(build, False, stored)
    head, result = train_mtp.trained_or_cached(trunk, stored, train_ids, held_ids, steps, NAME)
    tensors = {n: (stored[n].float().numpy(), "bf16" if stored[n].dtype == torch.bfloat16 else "f32")
               for n in layout_order(ck.padded_vocab(tok.get_vocab_size()))}
    tensors.update(train_mtp.checkpoint_tensors(head))
    before = stored
    stored = ck.write_sharded(tensors, build, last_shard_prefix="mtp.")
    changed = [n for n in before if not n.startswith("mtp.") and not torch.equal(before[n], stored[n])]
    if changed or set(before) - set(stored):
        raise SystemExit(f"train_tiny: rewriting the shards changed {changed or sorted(set(before) - set(stored))}")
    head = train_mtp.load_stored(head, stored)  # everything below uses the head as stored (BF16)

    final = train_mtp.teacher_forced(trunk, head, held_ids)
    log(f"mtp: held-out (teacher-forced) {final}")
    golden_ids = [*golden["prompt"]["ids"], *golden["generated_ids"]]
    n_prompt = golden["n_prompt_tokens"]
    verses = (build / "heldout.txt").read_text(encoding="utf-8").splitlines()
    prompts = [tok.encode(v, add_special_tokens=False).ids for v in verses]
    gold, acceptance, _ = oracle_mtp.goldens(build, stored, golden_ids, n_prompt, [int(i) for i in held_ids], prompts)
    log(f"mtp: acceptance on {corpus_kjv.HELD_OUT_BOOK}: {acceptance}")
    check = check_against_training(trunk, head, gold)

    record = train_mtp.record(result, steps, train_mtp.parameters(head), final)
    record["acceptance"] = acceptance
    record["oracle_vs_training_max_abs"] = check
    training["mtp"] = record
    write_json(build / "training.json", training)
    write_atomic(
        build / "loss-mtp.svg",
        loss_svg(result["train_loss"], result["heldout_loss"], f"{NAME} MTP head: next-next-token cross-entropy").encode("utf-8"),
    )
    save_numpy(gold, str(build / "golden-mtp.safetensors"), metadata={"format": "np"})
    write_json(build / "golden-mtp.json", {
        "fixture": NAME,
        "description": "MTP head goldens from tools/oracle/oracle_mtp.py (an fp32 forward with an explicit KV cache); "
        "main-model hidden states from HF fp32",
        "architecture": MTP_FACTS,
        "golden": {"n_prompt_tokens": n_prompt, "ids": golden_ids,
                   "draft_positions": gold["golden_draft_positions"].tolist(), "draft_ids": gold["golden_draft_ids"].tolist()},
        "heldout": {"positions": oracle_mtp.HELDOUT_POSITIONS, "draft_positions": list(oracle_mtp.HELDOUT_DRAFTS),
                    "draft_ids": gold["heldout_draft_ids"].tolist()},
        "acceptance": acceptance,
        "acceptance_protocol": ACCEPTANCE_PROTOCOL,
        "teacher_forced_heldout": final,
        "oracle_vs_training_max_abs": check,
        "conventions": GOLDEN_MTP_KEYS,
        "versions": mf.versions(),
    })
    for f in build.iterdir():
        f.chmod(0o644)


ACCEPTANCE_PROTOCOL = (
    f"each of the {corpus_kjv.HELD_OUT_BOOK} verses in heldout.txt (tokenized alone) is a prompt; the main model "
    f"continues it greedily for {oracle_mtp.ACCEPT_TOKENS} tokens (HF fp32, cached, no stop tokens); at every "
    f"position t from the prompt's last to the one {oracle_mtp.MAX_GAMMA + 1} before the end, the head (its cache "
    "filled teacher-forced over positions < t) drafts greedily and recursively; with gamma drafts the accepted length "
    "is the longest prefix equal to the main model's tokens t+2..t+gamma+1; acceptance_rate = mean accepted / gamma, "
    "tokens_per_verify_call = 1 + mean accepted"
)

GOLDEN_MTP_KEYS = {
    "{golden,heldout}_ids": "token ids: golden = golden.json prompt + generated_ids; heldout = the first 129 ids of "
    "heldout.safetensors",
    "{golden,heldout}_hidden": "[T, D] the main model's final hidden state (after model.norm; HF fp32, one uncached "
    "forward over the ids) at positions 0..T-1, T = len(ids) - 1",
    "{golden,heldout}_logits": "[T, V] the head's logits at position t from (hidden[t], ids[t+1]), teacher-forced with "
    "its KV cache over positions 0..t; they predict ids[t+2]",
    "{golden,heldout}_mtp_hidden": "[T, D] the head's output at t (after mtp.norm): what lm_head scores and what a "
    "recursive draft feeds back",
    "{golden,heldout}_draft_positions": "[K] start positions t of the stored recursive drafts",
    "{golden,heldout}_draft_ids / _draft_logits / _draft_hidden": "[K, 3] / [K, 3, V] / [K, 3, D]: step 0 = row t "
    "of _logits; step s feeds (step s-1's output hidden, step s-1's greedy id) at position t+s; the 2-step draft is "
    "the first two steps",
    "ruth_ids / ruth_offsets / ruth_prompt_lengths": "the acceptance run's sequences (prompt + greedy continuation), "
    "concatenated: sequence i is ruth_ids[offsets[i]:offsets[i+1]], its first prompt_lengths[i] ids the prompt",
    "ruth_draft_sequence / ruth_draft_positions / ruth_drafts": "[S], [S], [S, 4]: every speculation start "
    "(sequence, position t) and the head's 4 recursive greedy drafts from it",
}


def mtp_only(args) -> None:
    """Add (or retrain) the MTP head on the committed fixture's trunk; every other file is kept."""
    from tokenizers import Tokenizer

    src = mf.FIXTURES / NAME
    build = mf.FIXTURES / f".build-{NAME}" if args.out is None else args.out.parent / f".build-{args.out.name}"
    if build.exists():
        shutil.rmtree(build)
    shutil.copytree(src, build)
    try:
        tok = Tokenizer.from_file(str(build / "tokenizer.json"))
        train_verses, held_verses = corpus_kjv.split()
        train_text, held_text = corpus_kjv.as_text(train_verses), corpus_kjv.as_text(held_verses)
        if (build / "heldout.txt").read_text(encoding="ascii") != held_text:
            raise SystemExit(f"train_tiny: {src}/heldout.txt is not the held-out text of this corpus")
        train_ids = np.asarray(tok.encode(train_text, add_special_tokens=False).ids, dtype=np.int64)
        held_ids = np.asarray(tok.encode(held_text, add_special_tokens=False).ids, dtype=np.int64)
        training = json.loads((build / "training.json").read_text())
        golden = json.loads((build / "golden.json").read_text())
        counts = (training["corpus"]["training_tokens"], training["corpus"]["held_out_tokens"])
        if counts != (len(train_ids), len(held_ids)):
            raise SystemExit(f"train_tiny: the fixture was trained on {counts} tokens, this corpus gives {(len(train_ids), len(held_ids))}")
        add_mtp_head(build, tok, train_ids, held_ids, training, golden, args.mtp_steps)
        finish(build, args.out)
        log(f"train_tiny: MTP head added -> {args.out or src}")
    finally:
        if build.exists():
            shutil.rmtree(build)


def finish(build: Path, out: Path | None) -> None:
    """The finished build folder replaces fixtures/tiny-trained, or `out` in a trial run."""
    if out:
        if out.exists():
            shutil.rmtree(out)
        shutil.move(str(build), str(out))
    else:
        mf.install(build, NAME)


def tok_hf(build: Path):
    """The transformers tokenizer of the build folder (write_goldens decodes with it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(build))


if __name__ == "__main__":
    main()
