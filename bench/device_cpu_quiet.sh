#!/usr/bin/env bash
# CPU measurements that need a quiet machine, run on the GPU machine's idle cores (16) while
# its card is otherwise idle or busy with one run: issue 23's forecast check (bench/forecast_cpu.py
# on tiny-lora and tiny-full), the pass's time against its FLOPs (bench/pass_cost_cpu.py) and its
# plan check (bench/plan_check.sh). Each on one thread (OMP_NUM_THREADS=1), the four side by side.
#   bash bench/device_cpu_quiet.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT=${1:?OUT_DIR}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
# the scripts call .venv/bin/python: a wrapper (a symbolic link to a venv's python loses its venv)
if [ ! -x .venv/bin/python ]; then
  mkdir -p .venv/bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" > .venv/bin/python && chmod +x .venv/bin/python
fi
uptime > "$OUT/quiet_load.txt"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
"$PY" bench/forecast_cpu.py --profile tiny-lora --steps 100 > "$OUT/forecast_tiny_lora.txt" 2>&1 &
"$PY" bench/forecast_cpu.py --profile tiny-full --steps 100 --grid 8x256,4x128,16x256,32x96 > "$OUT/forecast_tiny_full.txt" 2>&1 &
bash bench/plan_check.sh 40MiB > "$OUT/plan_check.txt" 2>&1 &
( OMP_NUM_THREADS=1 "$PY" bench/pass_cost_cpu.py --profile tiny-lora --cal 8x128
  OMP_NUM_THREADS=1 "$PY" bench/pass_cost_cpu.py --profile tiny-full --cal 8x256 ) > "$OUT/pass_cost.txt" 2>&1 &
( for _ in $(seq 60); do uptime; sleep 5; done ) >> "$OUT/quiet_load.txt" 2>&1 &
wait %1 %2 %3 %4
kill %5 2>/dev/null
for f in forecast_tiny_lora forecast_tiny_full pass_cost plan_check; do echo "== $f"; cat "$OUT/$f.txt"; done
