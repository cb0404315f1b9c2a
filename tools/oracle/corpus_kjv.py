"""The training corpus of fixtures/tiny-trained: the King James Bible from Debian's packages.

Debian's `bible-kjv-text` 4.38 ships the Authorized (King James) Version in the compressed format
of the Bible Retrieval System, and `bible-kjv` 4.38 the `bible` program that reads it. Both .deb
files are fetched with `apt-get download` (pinned version, sha256-checked), unpacked with
`dpkg-deb -x` into a cache folder (nothing is installed), and the whole text is dumped with
`bible -f Gen1:1-Rev22:21`: one verse per line, "Ge1:1 In the beginning God created ...".
The dump itself is sha256-checked, so every machine trains on the same bytes.

Licence: the KJV text is in the public domain (Debian's copyright file: "The copyright for the
King James Version text of the Bible is expired"; in the United Kingdom the Crown's letters patent
still apply to printing it). The `bible` program is GPL-2+; only its output is used.

The Book of Ruth (85 verses, about 2,600 words) is held out: it is in neither the tokenizer's nor
the model's training text, so the quantization benchmark measures the model on text it never saw.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGES = {
    # name: (version, sha256 of the .deb as Debian's archive lists it)
    "bible-kjv-text": ("4.38", "d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a"),
    "bible-kjv": ("4.38", None),  # architecture-specific; the text dump below is what is checked
}
DUMP_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"
VERSE_COUNT = 31102
HELD_OUT_BOOK = "Ruth"
LICENCE = "public domain (text of the 1611 Authorized Version; Debian copyright file of bible-kjv-text)"


@dataclass(frozen=True)
class Verse:
    book: str  # the dump's abbreviation: Ge, Exo, ..., Ruth, ..., Rev
    chapter: int
    verse: int
    text: str


def cache_dir() -> Path:
    root = os.environ.get("ANEMLL_QWEN35_CACHE") or os.path.join(Path.home(), ".cache", "anemll-qwen35")
    return Path(root) / "corpus-kjv"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fetch_debs(work: Path) -> dict[str, Path]:
    """apt-get download each pinned package into `work`; returns name -> .deb path."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise SystemExit("corpus_kjv: needs apt-get and dpkg-deb (a Debian or Ubuntu machine) to fetch the KJV text")
    debs = {}
    for name, (version, digest) in PACKAGES.items():
        r = subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=work, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"corpus_kjv: apt-get download {name}={version} failed (run apt-get update?):\n{r.stderr}")
        hits = sorted(work.glob(f"{name}_*.deb"))
        if not hits:
            raise SystemExit(f"corpus_kjv: apt-get download {name}={version} wrote no .deb")
        if digest is not None and _sha256(hits[0]) != digest:
            raise SystemExit(f"corpus_kjv: {hits[0].name} has sha256 {_sha256(hits[0])}, expected {digest}")
        debs[name] = hits[0]
    return debs


def dump_path() -> Path:
    """The verse-per-line dump, fetched and extracted on first use (cached)."""
    cache = cache_dir()
    dump = cache / "kjv.txt"
    if dump.exists() and _sha256(dump) == DUMP_SHA256:
        return dump
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # apt-get download drops privileges to _apt when it can
        debs = _fetch_debs(work)
        root = work / "root"
        for deb in debs.values():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        r = subprocess.run(
            [str(root / "usr/bin/bible"), "-f", "-p", str(root / "usr/lib"), "Gen1:1-Rev22:21"],
            capture_output=True,
            check=True,
        )
        tmp_dump = work / "kjv.txt"
        tmp_dump.write_bytes(r.stdout)
        if _sha256(tmp_dump) != DUMP_SHA256:
            raise SystemExit(f"corpus_kjv: the dump has sha256 {_sha256(tmp_dump)}, expected {DUMP_SHA256}")
        os.replace(tmp_dump, dump)
    return dump


def verses() -> list[Verse]:
    """All 31,102 verses in canonical order."""
    out = []
    for line in dump_path().read_text(encoding="ascii").splitlines():
        ref, text = line.split(" ", 1)
        # "1Sa3:10" -> book "1Sa", chapter 3, verse 10 (book names may start with a digit)
        i = len(ref) - 1
        while ref[i] != ":":
            i -= 1
        j = i - 1
        while ref[j].isdigit():
            j -= 1
        out.append(Verse(ref[: j + 1], int(ref[j + 1 : i]), int(ref[i + 1 :]), text.strip()))
    if len(out) != VERSE_COUNT:
        raise SystemExit(f"corpus_kjv: {len(out)} verses, expected {VERSE_COUNT}")
    return out


def split() -> tuple[list[Verse], list[Verse]]:
    """(training verses, held-out verses = the Book of Ruth)."""
    vs = verses()
    held = [v for v in vs if v.book == HELD_OUT_BOOK]
    train = [v for v in vs if v.book != HELD_OUT_BOOK]
    if len(held) != 85:
        raise SystemExit(f"corpus_kjv: the held-out book {HELD_OUT_BOOK} has {len(held)} verses, expected 85")
    return train, held


def as_text(vs: list[Verse]) -> str:
    """One verse per line, without references."""
    return "".join(v.text + "\n" for v in vs)
