#!/usr/bin/env bash
# Regenerate everything under fixtures/: the tokenizer, the three tiny checkpoints and their golden
# outputs, then cross-check the tokenizer and chat template with the JavaScript libraries.
# Creates .venv-oracle from the pinned requirements if it is missing. Deterministic: running it
# twice gives byte-identical files.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=.venv-oracle
PYTHON_BIN=${PYTHON:-python3.11}
if [ ! -x "$VENV/bin/python" ]; then
  echo "regenerate: creating $VENV with $PYTHON_BIN"
  "$PYTHON_BIN" -m venv "$VENV"
fi
"$VENV/bin/pip" install --disable-pip-version-check -q -r tools/oracle/requirements.txt

# Fixed hashing and threads: nothing below may depend on them, but make sure it cannot.
export PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

"$VENV/bin/python" tools/oracle/make_tokenizer.py
"$VENV/bin/python" tools/oracle/make_fixtures.py

if command -v node >/dev/null && [ -d packages/generate/node_modules/@huggingface/jinja ]; then
  node tools/oracle/check_js.mjs
else
  echo "regenerate: skipped the JS cross-check (needs node and pnpm install for packages/generate)"
fi
du -sh fixtures
