#!/usr/bin/env bash
# The type check of fttui/ (mypy, configured in pyproject.toml [tool.mypy]): prints mypy's errors
# and their count, and exits non-zero on any. Arguments go to mypy (a path narrows the check:
# scripts/typecheck.sh fttui/core/results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(.venv/bin/mypy "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
n=$(printf '%s\n' "$out" | grep -c ': error: ')
echo "typecheck.sh: $n mypy error(s)"
exit "$rc"
