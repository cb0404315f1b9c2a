"""Small file helpers shared by the oracle scripts: atomic writes and stable, diff-friendly JSON."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

# A JSON array that holds only numbers (ids, margins, shapes), possibly spread over lines.
_NUMBER_ARRAY = re.compile(r"\[\s*([-0-9.eE+,\s]+?)\s*\]")


def write_atomic(path: Path, data: bytes) -> None:
    """Write bytes to a temp file in the same folder (mode 0644), then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_json(obj: object) -> str:
    """Indented JSON with arrays of numbers kept on one line; always ends with a newline."""
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    text = _NUMBER_ARRAY.sub(lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)
    return text + "\n"


def write_json(path: Path, obj: object) -> None:
    write_atomic(path, dump_json(obj).encode("utf-8"))
