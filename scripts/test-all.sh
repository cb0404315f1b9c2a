#!/usr/bin/env bash
# Sets up, builds, type-checks, tests and lints everything. The steps after the build run even when
# one of them failed (and turbo runs every package's tests to the end, --continue), so one run
# reports all failures; exits non-zero if any step failed. Prints each step's wall time.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
failed=()
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name"
  if "$@"; then
    echo "== $name: ok ($((SECONDS - t0)) s)"
  else
    echo "== $name: FAILED ($((SECONDS - t0)) s)"
    failed+=("$name")
  fi
}
step setup bash scripts/setup.sh
[ ${#failed[@]} -eq 0 ] && step build pnpm run build
if [ ${#failed[@]} -eq 0 ]; then
  step typecheck pnpm run typecheck
  step test pnpm run test
  step lint pnpm run lint
fi
echo "== all steps: $SECONDS s; load average now: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "== failed: ${failed[*]}"
  exit 1
fi
