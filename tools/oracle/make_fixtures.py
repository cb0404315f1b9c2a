"""Build the tiny Qwen3.5 fixtures and their golden outputs from two independent oracles.

For each fixture (tiny-tied, tiny-gqa, tiny-moe) this script:
  1. draws seeded random weights and writes an official-layout checkpoint (checkpoint.py);
  2. runs Hugging Face transformers in fp32 eager mode (oracle_hf.py): prompt logits, per-layer
     hidden states, and a greedy decode with the model's KV/recurrent cache;
  3. rejects the seed unless every greedy step (and every prompt position) has a top-1 vs top-2
     logit margin of at least MIN_MARGIN, the generated ids are real tokens (no padding row, no
     <|im_end|> / <|endoftext|>, so a generator with stop rules runs all steps) and are not all
     the same, and (MoE) every router decision has a top-k gap of at least MIN_ROUTER_GAP; then
     tries the next seed;
  4. runs mlx-lm on the CPU in fp32 (oracle_mlx.py) and asserts that both oracles produce the same
     greedy tokens and logits within MAX_ORACLE_DIFF;
  5. writes golden.safetensors and golden.json next to the checkpoint, replacing the old folder
     atomically (build in a temp folder, then rename).

Everything is seeded and single-threaded, so running it twice gives byte-identical files.
Usage: python tools/oracle/make_fixtures.py [--only tiny-moe]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file as save_numpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint as ck  # noqa: E402
from files import write_json  # noqa: E402
import oracle_hf  # noqa: E402
import oracle_mlx  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "fixtures"
TOKENIZER_DIR = FIXTURES / "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

N_DECODE = 12  # cached decode steps after the prefill
MIN_MARGIN = 0.05  # top-1 minus top-2 logit, every greedy step and prompt position
MIN_ROUTER_GAP = 0.03  # MoE: k-th minus (k+1)-th router logit, every token and layer
MIN_DISTINCT_GENERATED = 4  # avoid fixtures whose greedy output is one repeated token
MAX_ORACLE_DIFF = 1e-3  # max |HF - MLX| over all prompt and decode logits
MAX_SEEDS = 1000

SPECS = [
    ck.FixtureSpec(name="tiny-tied", tied=True, linear_k_heads=2, linear_v_heads=2),
    ck.FixtureSpec(name="tiny-gqa", tied=False, linear_k_heads=2, linear_v_heads=4, generation_config=False),
    ck.FixtureSpec(
        name="tiny-moe",
        tied=False,
        linear_k_heads=2,
        linear_v_heads=2,
        num_experts=8,
        experts_per_tok=2,
        moe_intermediate=64,
        shared_intermediate=64,
    ),
]

# One chat-template prompt, two raw-text prompts.
PROMPTS: dict[str, dict] = {
    "tiny-tied": {"messages": [{"role": "user", "content": "Hi!"}]},
    "tiny-gqa": {"text": "The baker said it would rain before noon."},
    "tiny-moe": {"text": "def count_words(text):\n    return 42"},
}
BASE_SEED = {"tiny-tied": 1000, "tiny-gqa": 2000, "tiny-moe": 3000}

DESCRIPTIONS = {
    "tiny-tied": "dense MLP 256, tied embeddings (no lm_head.weight), GDN Hk = Hv = 2",
    "tiny-gqa": "dense MLP 256, untied lm_head, grouped GDN heads Hk = 2, Hv = 4, no generation_config.json",
    "tiny-moe": "MoE 8 experts top-2 (fused 3-D experts, 64 wide) + gated shared expert 64, untied lm_head, GDN Hk = Hv = 2",
}


def log(msg: str) -> None:
    print(msg, flush=True)


def load_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def encode_prompt(tok, name: str) -> tuple[str, list[int], bool, list | None]:
    """(prompt text, ids, uses chat template, messages)."""
    p = PROMPTS[name]
    if "messages" in p:
        text = tok.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=False)
        return text, tok.encode(text, add_special_tokens=False), True, p["messages"]
    return p["text"], tok.encode(p["text"], add_special_tokens=False), False, None


def margins(rows: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row."""
    top2 = np.sort(rows, axis=-1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def vet(hf: oracle_hf.HfRun, tokenizer_size: int, stop_ids: set[int]) -> str | None:
    """Why this seed's model is unsuitable, or None if it is fine."""
    greedy = margins(np.concatenate([hf.prompt_logits[-1:], hf.decode_logits]))
    prompt = margins(hf.prompt_logits)
    if greedy.min() < MIN_MARGIN:
        return f"greedy margin {greedy.min():.4f}"
    if prompt.min() < MIN_MARGIN:
        return f"prompt-position margin {prompt.min():.4f}"
    bad = [t for t in hf.generated if t >= tokenizer_size or t in stop_ids]
    if bad:
        return f"generated a padding or stop id {bad[0]}"
    if len(set(hf.generated)) < MIN_DISTINCT_GENERATED:
        return f"only {len(set(hf.generated))} distinct generated ids"
    if hf.router_gaps and min(hf.router_gaps) < MIN_ROUTER_GAP:
        return f"router gap {min(hf.router_gaps):.4f}"
    return None


def versions() -> dict[str, str]:
    names = ["torch", "transformers", "mlx", "mlx-lm", "tokenizers", "numpy", "safetensors", "jinja2"]
    return {"python": platform.python_version(), **{n: importlib.metadata.version(n) for n in names}}


def build_checkpoint(spec: ck.FixtureSpec, seed: int, scales: ck.Scales, out: Path, tok_ids: dict, vocab: int):
    """Write config, tokenizer copies and shards into `out`; return the stored tensors."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    write_json(out / "config.json", ck.wrapper_config(spec, vocab, tok_ids))
    if spec.generation_config:
        write_json(out / "generation_config.json", ck.generation_config(tok_ids))
    for f in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_DIR / f, out / f)
    tensors = ck.draw_language_model(spec, vocab, seed, scales)
    tensors.update(ck.draw_extras(seed, spec.hidden))
    return ck.write_sharded(tensors, out)


def make_fixture(spec: ck.FixtureSpec, tok, scales: ck.Scales) -> dict:
    """Build one fixture; on any failure remove the half-built folder and keep the old fixture."""
    build = FIXTURES / f".build-{spec.name}"
    try:
        return _make_fixture(spec, tok, scales, build)
    finally:
        if build.exists():
            shutil.rmtree(build)


def _make_fixture(spec: ck.FixtureSpec, tok, scales: ck.Scales, build: Path) -> dict:
    tok_ids = {t: tok.convert_tokens_to_ids(t) for t in (
        "<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
    )}
    vocab = ck.padded_vocab(len(tok))
    prompt_text, prompt_ids, chat, messages = encode_prompt(tok, spec.name)

    for attempt in range(MAX_SEEDS):
        seed = BASE_SEED[spec.name] + attempt
        stored = build_checkpoint(spec, seed, scales, build, tok_ids, vocab)
        hf = oracle_hf.run(build, spec.moe, stored, prompt_ids, N_DECODE)
        reason = vet(hf, len(tok), {tok_ids["<|endoftext|>"], tok_ids["<|im_end|>"]})
        if reason is None:
            break
        log(f"  {spec.name} seed {seed}: rejected ({reason})")
    else:
        raise SystemExit(f"make_fixtures: no suitable seed for {spec.name} in {MAX_SEEDS} tries")
    log(f"  {spec.name} seed {seed}: accepted, generated {hf.generated}")
    header = {"seed": seed, "weight_scales": asdict(scales)}
    golden = write_goldens(build, spec, DESCRIPTIONS[spec.name], header, tok, (prompt_text, prompt_ids, chat, messages), hf)
    install(build, spec.name)
    return golden


def write_goldens(
    build: Path, spec: ck.FixtureSpec, description: str, header: dict, tok, prompt: tuple, hf: oracle_hf.HfRun
) -> dict:
    """Run the MLX oracle on the checkpoint in `build`, assert that it agrees with the HF run, and
    write golden.safetensors and golden.json there (`header` goes after the description)."""
    prompt_text, prompt_ids, chat, messages = prompt
    mlx = oracle_mlx.run(build, prompt_ids, N_DECODE)
    d_prompt = float(np.max(np.abs(hf.prompt_logits - mlx.prompt_logits)))
    d_decode = float(np.max(np.abs(hf.decode_logits - mlx.decode_logits)))
    if mlx.generated != hf.generated:
        raise SystemExit(f"make_fixtures: {spec.name}: greedy tokens differ: HF {hf.generated} MLX {mlx.generated}")
    if max(d_prompt, d_decode) > MAX_ORACLE_DIFF:
        raise SystemExit(f"make_fixtures: {spec.name}: HF vs MLX max |dlogit| {max(d_prompt, d_decode):.3e} > {MAX_ORACLE_DIFF}")
    log(f"  {spec.name}: HF vs MLX max |dlogit| prompt {d_prompt:.3e} decode {d_decode:.3e}")

    greedy = margins(np.concatenate([hf.prompt_logits[-1:], hf.decode_logits]))
    prompt_m = margins(hf.prompt_logits)
    golden_tensors = {
        "prompt_logits": hf.prompt_logits.astype(np.float32),
        "decode_logits": hf.decode_logits.astype(np.float32),
        "hidden_states": hf.hidden_states.astype(np.float32),
        "last_layer_prenorm": hf.last_layer_prenorm.astype(np.float32),
        "mlx_prompt_logits": mlx.prompt_logits.astype(np.float32),
        "mlx_decode_logits": mlx.decode_logits.astype(np.float32),
        "prompt_ids": np.asarray(prompt_ids, dtype=np.int64),
        "generated_ids": np.asarray(hf.generated, dtype=np.int64),
    }
    save_numpy(golden_tensors, str(build / "golden.safetensors"), metadata={"format": "np"})

    r6 = lambda x: round(float(x), 6)  # noqa: E731
    golden = {
        "fixture": spec.name,
        "description": description,
        **header,
        "prompt": {"text": prompt_text, "chat_template": chat, "messages": messages, "ids": prompt_ids},
        "generated_ids": hf.generated,
        "generated_text": tok.decode(hf.generated),
        "n_prompt_tokens": len(prompt_ids),
        "n_decode_steps": N_DECODE,
        "conventions": {
            "prompt_logits": "[T, V] HF prefill logits for every prompt position",
            "generated_ids": "N+1 greedy ids: [0] = argmax(prompt_logits[T-1]), [i+1] = argmax(decode_logits[i])",
            "decode_logits": "[N, V] logits of cached decode step i, which feeds generated_ids[i] at position T+i",
            "hidden_states": "[L+1, T, D] HF output_hidden_states: [0] = embedding output, [i] = after layer i-1 "
            "for i < L, [L] = after the FINAL NORM (HF overwrites the last entry with last_hidden_state)",
            "last_layer_prenorm": "[T, D] output of the last decoder layer before model.norm (forward hook)",
            "mlx_prompt_logits / mlx_decode_logits": "the same quantities from mlx-lm (CPU, fp32)",
            "vocab": "V is the padded embedding size; ids >= tokenizer size are unused rows (not masked)",
        },
        "margins": {
            "min_greedy": r6(greedy.min()),
            "greedy_steps": [r6(m) for m in greedy],
            "min_prompt_positions": r6(prompt_m.min()),
            "prompt_positions": [r6(m) for m in prompt_m],
        },
        "logit_std": {
            "prompt_mean": r6(hf.prompt_logits.std(axis=-1).mean()),
            "decode_mean": r6(hf.decode_logits.std(axis=-1).mean()),
        },
        "hf_vs_mlx": {
            "generated_identical": True,
            "prompt_logits_max_abs": float(f"{d_prompt:.3e}"),
            "decode_logits_max_abs": float(f"{d_decode:.3e}"),
            "tolerance": MAX_ORACLE_DIFF,
        },
        "hf_cached_vs_uncached_max_abs": float(f"{hf.full_vs_cached_max_abs:.3e}"),
        "versions": versions(),
    }
    if spec.moe:
        golden["router_min_gap"] = r6(min(hf.router_gaps))
    write_json(build / "golden.json", golden)
    for f in build.iterdir():  # safetensors and copies do not go through write_atomic
        f.chmod(0o644)
    return golden


def install(build: Path, name: str) -> None:
    """Replace fixtures/<name> with the finished `build` folder (rename; the old one is removed)."""
    final = FIXTURES / name
    old = FIXTURES / f".old-{name}"
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    build.rename(final)
    if old.exists():
        shutil.rmtree(old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=[s.name for s in SPECS], action="append")
    args = ap.parse_args()
    torch.set_num_threads(1)  # single-threaded reductions: reproducible, byte-identical reruns
    transformers.utils.logging.disable_progress_bar()
    tok = load_tokenizer()
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        log(f"{spec.name}: {DESCRIPTIONS[spec.name]}")
        g = make_fixture(spec, tok, ck.Scales())
        log(f"  min greedy margin {g['margins']['min_greedy']}, min prompt margin {g['margins']['min_prompt_positions']}")


if __name__ == "__main__":
    main()
