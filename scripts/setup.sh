#!/usr/bin/env bash
# Sets up a fresh clone: pnpm, JS dependencies, the Python .venv used by tests and benchmarks.
# Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v pnpm >/dev/null 2>&1; then
  echo "setup: installing pnpm (npm registry)"
  npm install -g pnpm@10 >/dev/null
fi

echo "setup: pnpm install"
pnpm install --frozen-lockfile

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
echo "setup: pip install -r tools/oracle/requirements-ci.txt"
.venv/bin/pip install --quiet -r tools/oracle/requirements-ci.txt
