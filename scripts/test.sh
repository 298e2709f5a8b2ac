#!/usr/bin/env bash
# Run the whole test suite. pytest's exit code 5 ("no tests ran") is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
unset NO_COLOR
# Python's bytecode caches (__pycache__, gitignored) for fttui and the tests: where the shell sets
# PYTHONDONTWRITEBYTECODE, every Python process of the suite (the CLI calls, supervisors, log
# writers, workers) compiled fttui's sources again (0.15 CPU-s of a 0.35 s `fttui results`), and
# each xdist worker compiled every test module again while collecting (~6 CPU-s each).
unset PYTHONDONTWRITEBYTECODE
export FTTUI_TEST_RUN=1
# Lint and format (ruff, configured in pyproject.toml) of fttui/: a new error fails the suite.
.venv/bin/ruff check --no-cache fttui || { echo "test.sh: ruff check fttui found problems" >&2; exit 1; }
.venv/bin/ruff format --no-cache --check fttui || { echo "test.sh: ruff format would change fttui (run: .venv/bin/ruff format fttui)" >&2; exit 1; }
# The type check (mypy, configured in pyproject.toml; about 35 CPU-s cold, most of it reading
# torch's and transformers' types) runs beside the tests and is reported after them: a type
# error fails the suite as a failing test does. For the whole suite it runs beside the serial
# `alone` phase, not the parallel one: that phase's ranks wait in collectives and stalls most of
# its 35 s (one core idle or both, vmstat), where beside the parallel phase (both cores busy) its
# CPU added some 19 s; the alone test names its slowed rank beside three busy loops too.
# Its cache lies outside the checkout (FTTUI_MYPY_CACHE, default ~/.cache/fttui/mypy), so a clean
# clone on a machine that type-checked fttui before analyses again only what changed: 35 CPU-s cold,
# about 1 warm (docs/benchmarks.md). mypy checks each cached module against its source's hash (an
# edited or moved file, a changed library, is analysed again), so the check is the same.
typelog=$(mktemp)
start_mypy() {
  .venv/bin/mypy --cache-dir "${FTTUI_MYPY_CACHE:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/fttui/mypy}" >"$typelog" 2>&1 &
  mypy_pid=$!
}
# The import layers first (contracts in pyproject.toml): a broken layer fails fast and loudly.
.venv/bin/lint-imports --no-cache || { echo "test.sh: import contracts broken (lint-imports)" >&2; exit 1; }
# A DeepSpeed op build killed in an earlier run leaves a lock that would hang every DeepSpeed test.
.venv/bin/python -c 'import os, pathlib; from fttui.core.run.launching.oplocks import clear_stale_locks
clear_stale_locks(pathlib.Path(os.environ.get("TORCH_EXTENSIONS_DIR") or pathlib.Path.home() / ".cache/torch_extensions"), print)'
# Three workers on two cores: many end-to-end tests wait (for a scheduler, a timeout, a process to
# end) and a third worker fills those waits; the DeepSpeed and Slurm tests keep their own groups.
# --durations: the slowest tests close the output (what CI prints of it), for the next cut
if [ "$#" -eq 0 ]; then
  .venv/bin/python -m pytest -n 3 --dist loadgroup --durations=30 -m "not alone"
  rc=$?
  # Then the tests that time ranks against each other, alone: beside two other workers the
  # machine's own contention makes other ranks late too (docs/benchmarks.md, "The slow rank").
  # Only the files that mark such a test are collected (the whole suite's collection is about
  # 9 CPU-s); none found is a failure, as pytest's exit 5 is.
  start_mypy
  alone_files=$(grep -rl --include='*.py' 'pytest.mark.alone' tests)
  if [ -n "$alone_files" ]; then
    # shellcheck disable=SC2086  # one argument per file (paths without spaces: tests/...)
    .venv/bin/python -m pytest -m alone $alone_files
    rc_alone=$?
  else
    echo "test.sh: no test marked alone found under tests/" >&2
    rc_alone=5
  fi
  if [ "$rc" = 0 ]; then rc=$rc_alone; fi
else
  start_mypy
  .venv/bin/python -m pytest -n 3 --dist loadgroup --durations=30 "$@"
  rc=$?
fi
if wait "$mypy_pid"; then
  echo "test.sh: mypy: $(tail -n 1 "$typelog")"
else
  cat "$typelog" >&2
  echo "test.sh: mypy found type errors (scripts/typecheck.sh runs it alone)" >&2
  [ "$rc" = 0 ] && rc=1
fi
rm -f "$typelog"
if [ "$rc" = 5 ]; then
  echo "test.sh: no tests ran: that is a failure" >&2
  exit 1
fi
exit "$rc"
