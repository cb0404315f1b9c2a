#!/usr/bin/env bash
# Sets up, builds, tests and lints everything. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
pnpm run build
pnpm run typecheck
pnpm run test
pnpm run lint
