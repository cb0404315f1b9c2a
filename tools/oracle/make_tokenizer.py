"""Build the fixture tokenizer: a ~1000-id byte-level BPE in the Qwen3.5 tokenizer.json format.

The real Qwen3.5 tokenizer has 248,044 BPE ids followed by 33 special/added tokens. This one keeps
the same pipeline (NFC -> Split(Qwen3.5 regex, isolated) -> ByteLevel(no prefix space, no regex)
-> BPE without unk/byte_fallback -> ByteLevel decoder) and the same 33 tokens in the same order,
but trains only 960 BPE ids on tools/oracle/corpus.txt, so the embedding stays tiny.

Writes into the output folder (default fixtures/tokenizer):
  tokenizer.json, tokenizer_config.json, chat_template.jinja, chat_cases.json

chat_cases.json holds a few conversations rendered with transformers' apply_chat_template
(Python jinja2) and encoded with the tokenizer, so the TypeScript side (@huggingface/jinja and
@huggingface/tokenizers) can check that it renders and encodes the same bytes and ids.

Usage: python tools/oracle/make_tokenizer.py [--out fixtures/tokenizer]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from files import write_atomic, write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# Number of BPE ids (256 byte symbols + merges). Special tokens follow directly after, so the
# tokenizer has 993 ids and the padded embedding 1024 rows (31 unused, like the real 243).
BPE_SIZE = 960

# Qwen3.5 pre-tokenizer split regex (reference §4; differs from Qwen2/3 by the added \p{M}).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The 33 Qwen3.5 special/added tokens in official id order (reference §4.1). The flag says whether
# the token is "special" (skipped by decode(skip_special_tokens=True)). Following the Qwen3
# convention, tool-call, FIM, repo/file and think markers are added but not special, so they stay
# visible in decoded text. The spelling of the last five varies between sources.
SPECIAL_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]


def qwen35_pipeline(tok: Tokenizer) -> None:
    """Attach the Qwen3.5 normalizer, pre-tokenizer, post-processor and decoder."""
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    # Qwen byte-level tokenizers carry a ByteLevel post-processor; it only adjusts offsets.
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()


def train_bpe(corpus: Path, size: int = BPE_SIZE) -> Tokenizer:
    """Train a byte-level BPE with exactly `size` ids on the corpus (deterministic)."""
    tok = Tokenizer(
        models.BPE(
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    qwen35_pipeline(tok)
    trainer = BpeTrainer(
        vocab_size=size,
        min_frequency=0,
        show_progress=False,
        special_tokens=[],
        # All 256 byte symbols, so every input is encodable without an unk token.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train([str(corpus)], trainer)
    got = tok.get_vocab_size(with_added_tokens=False)
    if got != size:
        sys.exit(f"make_tokenizer: BPE training gave {got} ids, expected {size}; enlarge {corpus.name}")
    return tok


def add_special_tokens(tok: Tokenizer) -> None:
    """Append the 33 Qwen3.5 tokens after the BPE ids, one at a time so that ids follow the official order."""
    base = tok.get_vocab_size(with_added_tokens=False)
    for i, (content, special) in enumerate(SPECIAL_TOKENS):
        token = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        got = tok.token_to_id(content)
        if got != base + i:
            sys.exit(f"make_tokenizer: {content} got id {got}, expected {base + i}")


def tokenizer_config(tok: Tokenizer) -> dict:
    """tokenizer_config.json: eos <|im_end|>, pad <|endoftext|>, no bos, no unk."""
    base = tok.get_vocab_size(with_added_tokens=False)
    decoder = {}
    for i, (content, special) in enumerate(SPECIAL_TOKENS):
        decoder[str(base + i)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen3_5Tokenizer",
        "unk_token": None,
    }


# Conversations rendered into chat_cases.json. They cover every branch of the template:
# system prompt, tools, tool calls (mapping and nested arguments), grouped tool responses,
# reasoning before/after the last user query, list-of-parts content, and both thinking modes.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}, "options": {"type": "object"}},
            "required": ["expression"],
        },
    },
}

CHAT_CASES: list[dict] = [
    {
        "name": "single_user",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "add_generation_prompt": True,
    },
    {
        "name": "single_user_thinking",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "add_generation_prompt": True,
        "enable_thinking": True,
    },
    {
        "name": "system_and_history",
        "messages": [
            {"role": "system", "content": "  You are a helpful guide.\n"},
            {"role": "user", "content": "How far is the hut?"},
            {"role": "assistant", "content": "<think>\nThe map says two hours.\n</think>\n\nTwo hours."},
            {"role": "user", "content": [{"type": "text", "text": "Is the water "}, {"type": "text", "text": "safe?"}]},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "no_generation_prompt",
        "messages": [
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "Easy."},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "tools_roundtrip",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Weather in Paris, and 17*23?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "reasoning_content": "Two tools are needed.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
                    {
                        "type": "function",
                        "function": {"name": "calculate", "arguments": {"expression": "17*23", "options": {"exact": True, "digits": [1, 2]}}},
                    },
                ],
            },
            {"role": "tool", "content": "{\"temp\": 18}"},
            {"role": "tool", "content": "391"},
            {"role": "assistant", "content": "18°C in Paris; 17*23 = 391."},
        ],
        "tools": [WEATHER_TOOL, CALC_TOOL],
        "add_generation_prompt": False,
    },
    {
        "name": "tools_pending_call",
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
            },
            {"role": "tool", "content": "{\"temp\": 3}"},
        ],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
]


# Plain strings whose encodings go into chat_cases.json as "probes": the reference test sentence
# (reference §4.4), a decomposed accent (NFC must compose it), combining marks (the \p{M} in the
# regex), emoji and CJK (byte-level fallback), digit runs (split one digit per token), whitespace
# runs, and special tokens inside text.
PROBES = [
    "This is a test 😊\nI was born in 92000, and this is falsé.\n生活的真谛是\nHi  Hello\nHi   Hello\n\n \n  \n Hello\n"
    "<s>\nhi<s>there\nThe following string should be properly encoded: Hello.\nBut ird and ปี   ird   ด\nHey how are you doing",
    "cafe\u0301 vs caf\u00e9",
    "नमस्ते दुनिया",
    "x = [3, 1, 4]; print(x)\n\n\tdone  \r\n",
    "<|im_start|>user\nhi<|im_end|>\n<think>\n</think>",
]


def render_chat_cases(out_dir: Path) -> list[dict]:
    """Render CHAT_CASES through transformers (Python jinja2) using the files just written."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(out_dir))
    cases = []
    for case in CHAT_CASES:
        kwargs = {}
        if "enable_thinking" in case:
            kwargs["enable_thinking"] = case["enable_thinking"]
        text = hf.apply_chat_template(
            case["messages"],
            tools=case.get("tools"),
            add_generation_prompt=case["add_generation_prompt"],
            tokenize=False,
            **kwargs,
        )
        ids = hf.encode(text, add_special_tokens=False)
        cases.append({**case, "expected_text": text, "expected_ids": ids})
    return cases


def check_transformers_agrees(out_dir: Path, probes: list[dict], bpe_size: int = BPE_SIZE) -> None:
    """transformers builds Qwen3_5Tokenizer from vocab/merges with its own pipeline; it must
    encode exactly like tokenizer.json, and report the eos/pad/bos we configured."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(out_dir))
    for p in probes:
        got = hf.encode(p["text"], add_special_tokens=False)
        if got != p["ids"]:
            sys.exit(f"make_tokenizer: transformers encodes {p['text']!r} as {got}, tokenizer.json as {p['ids']}")
    if (hf.eos_token, hf.pad_token, hf.bos_token) != ("<|im_end|>", "<|endoftext|>", None):
        sys.exit(f"make_tokenizer: transformers sees eos/pad/bos {hf.eos_token}/{hf.pad_token}/{hf.bos_token}")
    if len(hf) != bpe_size + len(SPECIAL_TOKENS):
        sys.exit(f"make_tokenizer: transformers sees {len(hf)} ids")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "fixtures" / "tokenizer")
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus.txt")
    args = ap.parse_args()

    tok = train_bpe(args.corpus)
    add_special_tokens(tok)

    out: Path = args.out
    write_atomic(out / "tokenizer.json", (tok.to_str(pretty=False) + "\n").encode("utf-8"))
    write_json(out / "tokenizer_config.json", tokenizer_config(tok))
    write_atomic(out / "chat_template.jinja", (HERE / "chat_template.jinja").read_bytes())
    probes = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in PROBES]
    check_transformers_agrees(out, probes)
    write_json(out / "chat_cases.json", {"cases": render_chat_cases(out), "probes": probes})
    print(f"make_tokenizer: {tok.get_vocab_size(with_added_tokens=True)} ids -> {out}")


if __name__ == "__main__":
    main()
