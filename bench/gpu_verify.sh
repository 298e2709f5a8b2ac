#!/usr/bin/env bash
# The GPU paths verified for real, on a machine with an NVIDIA card (not run by CI):
#
#   bash bench/gpu_verify.sh OUT_DIR [STEP...]        (default steps: env visible kbit shard app)
#
# (also: qlora / int8 for one of kbit's two runs, kbit32 for QLoRA at batch 32, prepare-none for
# QLoRA with quant.prepare = "none", qlong for Qwen-7B QLoRA at 4,096 and 8,192 tokens against Qwen's table, fsdp / zero3-offload for one of shard's, shard3 for ZeRO-3
# without offload, ds-optim for ZeRO-3 with DeepSpeed's own optimizer, qfsdp / qzero3 for Llama-2-7B
# QLoRA under FSDP / ZeRO-3 on one card, awq for GPTQ's and AWQ's pre-quantized LoRA on the card
# (bench/gptq_gpu.py: .whl/gptq/ wheels), probe for the probe's boundary on the card with fresh runs
# either side of it, forecast for issue 23's forecast on the card, plan for its plan check on the card
# (bench/plan_check.sh under the probe's cap), snapshot for issue 44's allocator snapshot at a CUDA
# out of memory against the estimate and the recording's cost (bench/snapshot_gpu.py), cpu375 for issue 22's host check
# at its own size: a 375M Llama over two CPU ranks, ZeRO-3 / FSDP / DDP, beside the card's steps)
#
# Every step runs under its own time limit and the whole under DEADLINE seconds (default 560):
# a step that would start with less than its limit left is skipped, so one hang costs one step.
#   env      the card, driver and versions (nvidia-smi, torch, bitsandbytes import time, tmux);
#   visible  another process holds 10 GiB of the card while tiny-lora runs on it with
#            CUDA_VISIBLE_DEVICES=0 and =GPU-<uuid>: the row's own-process memory (NVML
#            per-process) must leave the other process out, the device figure keeps it; an empty
#            CUDA_VISIBLE_DEVICES is refused before launch in one line (exit 2);
#   kbit     Llama-2-7B QLoRA and 8-bit LoRA, b4 x 512 (reference rows 7.63 / 11.1 GB), random
#            init drawn on the card (bench/estimate_gpu.py: estimate vs the fresh run);
#   shard    Llama-2-7B LoRA under FSDP, ZeRO-3 offload and ZeRO-3 on one card (DeepSpeed's CPU
#            Adam is JIT-built in the background from the start);
#   app      the app over the real NVML (bench/gpu_app_check.py: Pilot screens, tmux when there).
# Throughout: nvidia-smi's memory/clock/power/clock-event-reason figures and its per-process
# memory every 0.5 s, and the same read raw from NVML (bench/gpu_side.py sample); at the end,
# OUT_DIR/summary.md puts each run's row (NVML device used, own processes, torch reserved and
# allocated) beside them (bench/gpu_side.py report), and OUT_DIR/work.tgz keeps the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?OUT_DIR}; shift
STEPS=${*:-env visible kbit shard app}
DEADLINE=${DEADLINE:-560}
W=${WORK:-$OUT/work}
mkdir -p "$OUT" "$W"
PY=${PYTHON:-python3}
export FTTUI_HOME=$W/home PYTHONUNBUFFERED=1 W PY
T0=$(date +%s)
LOG=$OUT/log.txt
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
say() { echo "$*" | tee -a "$LOG"; }
# step NAME LIMIT CMD...: runs CMD under LIMIT seconds if that much is left, notes its window
step() {
  local name=$1 limit=$2; shift 2
  if [ "$(left)" -lt "$limit" ]; then say "== $name: skipped ($(left) s left, needs $limit)"; return; fi
  say "== $name (limit ${limit} s, at $(( $(date +%s) - T0 )) s)"
  local a=$(date +%s.%N)
  timeout -k 15 "$limit" bash -c '"$@"' _ "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "$name $a $(date +%s.%N) $rc" >> "$W/steps.txt"
  say "-- $name: rc $rc, $(( $(date +%s) - T0 )) s"
}
has() { [[ " $STEPS " == *" $1 "* ]]; }
GPU_OK=0; command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && GPU_OK=1

side=()
if [ $GPU_OK = 1 ]; then
  reasons=clocks_event_reasons.active  # older drivers: clocks_throttle_reasons.active
  nvidia-smi --query-gpu=$reasons --format=csv >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
  nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,$reasons \
    --format=csv,noheader,nounits -lms 500 > "$W/smi_gpu.csv" 2>"$W/smi_gpu.err" & side+=($!)
  ( while :; do d=$(date +%s.%N); nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
      | sed "s/^/$d,/"; sleep 0.5; done ) > "$W/smi_apps.csv" 2>/dev/null & side+=($!)
  "$PY" bench/gpu_side.py sample "$W/nvml_side.csv" 2>"$W/nvml_side.err" & side+=($!)
fi
if { has shard || has shard3 || has zero3-offload || has ds-optim; } && "$PY" -c "import deepspeed" 2>/dev/null; then
  # DeepSpeed's ops, JIT-built once beside the other steps: CPU Adam (offload), fused Adam (its own optimizer)
  ( t=$(date +%s); "$PY" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" \
      > "$W/cpu_adam_build.log" 2>&1; echo "cpu_adam build rc $? in $(( $(date +%s) - t )) s" >> "$W/cpu_adam_build.log"
    if has ds-optim; then t=$(date +%s); "$PY" -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load()" \
      >> "$W/cpu_adam_build.log" 2>&1; echo "fused_adam build rc $? in $(( $(date +%s) - t )) s" >> "$W/cpu_adam_build.log"; fi ) &
fi

if has cpu375; then
  # issue 22's host-memory check at its own size, on the CPU while the card runs the other steps:
  # DeepSpeed on its CPU accelerator, no card visible to these ranks
  ( for a in "--shardings zero3,fsdp" "--shardings zero3 --zero3-share 0" "--shardings zero3 --zero3-share 1/7"; do
      n=$(echo "$a" | tr -c 'a-z0-9' '_')
      CUDA_VISIBLE_DEVICES= DS_ACCELERATOR=cpu OMP_NUM_THREADS=2 timeout 400 "$PY" bench/partitioned_build.py \
        --size 375m $a > "$W/part375_$n.txt" 2>&1
      echo "partitioned_build $a: rc $?" >> "$W/part375_$n.txt"
    done ) & CPU375=$!
fi
env_step() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv
  nvidia-smi -q -d PERFORMANCE | sed -n '/Clocks Event Reasons/,/Sparse/p' | head -16
  "$PY" - <<'EOF'
import importlib, time
for name in ("torch", "transformers", "peft", "accelerate", "textual", "deepspeed", "pynvml"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as e:
        print(name, "missing:", e)
t = time.time()
try:
    import bitsandbytes
    print("bitsandbytes", bitsandbytes.__version__, f"import {time.time() - t:.1f} s")
except Exception as e:
    print("bitsandbytes missing:", e)
import torch
print("cuda", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
from fttui.monitor import make_gpu_sampler
s = make_gpu_sampler().sample()
print("fttui sampler:", s.available, s.reason or "", "driver", s.driver, "cuda", s.cuda, "api", s.used_api)
for g in s.gpus:
    print(" ", g)
EOF
  echo "tmux: $(command -v tmux || echo none)"
}

visible_step() {
  "$PY" -c "
import os, time, torch
x = torch.empty(10 * 2**30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()
open('$W/hog.pid', 'w').write(str(os.getpid())); time.sleep(600)" & local hog=$!
  for _ in $(seq 60); do [ -s "$W/hog.pid" ] && break; sleep 1; done
  local uuid; uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  local run=("$PY" -m fttui run --profile tiny-lora --set devices.gpus=1 --set max_steps=40 --headless)
  echo "-- another process ($(cat "$W/hog.pid")) holds 10 GiB; CUDA_VISIBLE_DEVICES=0"
  CUDA_VISIBLE_DEVICES=0 "${run[@]}" 2>&1 | tail -3
  echo "-- CUDA_VISIBLE_DEVICES=$uuid"
  CUDA_VISIBLE_DEVICES=$uuid "${run[@]}" 2>&1 | tail -3
  echo "-- CUDA_VISIBLE_DEVICES= (empty): expected one line, exit 2"
  CUDA_VISIBLE_DEVICES= "${run[@]}"; echo "exit $?"
  kill "$hog"; wait "$hog" 2>/dev/null
  "$PY" -m fttui results --format json --limit 2 | "$PY" -c "
import json, sys
for r in json.load(sys.stdin):
    print(r['run_id'], r['status'], 'device used', r['peak_gpu_mem_mb'], 'own', r['peak_gpu_proc_mb'],
          'torch reserved', r['peak_torch_reserved_mb'], 'allocated', r['peak_torch_alloc_mb'], 'gpu', r['gpu_names'])"
}

# The probe on the card: a Llama-2-7B-shaped model cut to 4 layers (0.9B, bf16, LoRA, 512 tokens)
# under a 12 GiB cap, each value next to the boundary checked twice more; then two fresh runs at the
# answer and two one above it, under the same cap (do they agree with the probe?)
# (a string, split where used: the steps run in child shells, which see exported strings, not arrays)
export GPU_MODEL=${GPU_MODEL:-"--set model.init=random --set model.arch_config.num_hidden_layers=4 --set precision=bf16 --set devices.gpus=1"}
export PROBE_PROFILE=${PROBE_PROFILE:-llama2-7b-lora} PROBE_CAP=${PROBE_CAP:-"--gpu-memory-limit 12GiB"}
probe_step() {
  "$PY" -m fttui probe --profile "$PROBE_PROFILE" $GPU_MODEL $PROBE_CAP --range 1..256 \
    --repeats 2 --json > "$W/probe_gpu.json" || { echo "probe failed"; return 1; }
  "$PY" - "$W/probe_gpu.json" <<'EOF2'
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r.get(k) for k in ("largest_fit", "smallest_oom", "model_loads", "mixed", "exact")})
open(sys.argv[1] + ".fit", "w").write(str(r["largest_fit"]))
EOF2
  local fit i=0; fit=$(cat "$W/probe_gpu.json.fit")
  for b in "$fit" "$fit" $((fit + 1)) $((fit + 1)); do
    i=$((i + 1))
    "$PY" -m fttui run --profile "$PROBE_PROFILE" $GPU_MODEL --set batch_size="$b" --set max_steps=2 \
      $PROBE_CAP --headless > "$W/probe_fresh_$i.txt" 2>&1
    echo "fresh run $i at batch $b: exit $? $(grep -E 'COMPLETED|OUT OF MEMORY|FAILED|peak' "$W/probe_fresh_$i.txt" | tail -2 | tr '\n' ' ')"
  done
}
forecast_step() {
  "$PY" bench/forecast_cpu.py --profile "$PROBE_PROFILE" --steps 60 --grid 8x512,4x256,16x1024,32x128 --warm $GPU_MODEL
}
# issue 23's plan check on the card: the same model under the probe's cap, effective batch 32, the
# three fastest setups said to fit and the cheapest said not to, fresh 20-step runs (bench/plan_check.sh)
plan_step() {
  PY="$PY" PROFILE="$PROBE_PROFILE" SETS="$GPU_MODEL" LIMIT_FLAG=--gpu-memory-limit STEPS=20 \
    bash bench/plan_check.sh "${PROBE_CAP##* }"
}
export -f env_step visible_step probe_step forecast_step plan_step
has env && step env 60 env_step
if [ $GPU_OK = 1 ]; then
  has visible && step visible 120 visible_step
  { has kbit || has qlora; } && step kbit-qlora 180 "$PY" bench/estimate_gpu.py --out "$W" --timeout 140 --only "llama2-7b qlora b4 s512" --exact
  { has kbit || has int8; } && step kbit-int8 180 "$PY" bench/estimate_gpu.py --out "$W" --timeout 140 --only "llama2-7b lora int8 b4 s512"
  has kbit32 && step kbit-qlora-b32 180 "$PY" bench/estimate_gpu.py --out "$W" --timeout 140 --only "llama2-7b qlora b32 s512"
  { has shard || has fsdp; } && step shard-fsdp 150 "$PY" bench/estimate_gpu.py --out "$W" --timeout 110 --only "FSDP 1 card"
  { has shard || has zero3-offload; } && step shard-zero3-offload 220 "$PY" bench/estimate_gpu.py --out "$W" --timeout 180 --only "ZeRO-3 offload 1 card"
  has shard3 && step shard-zero3 200 "$PY" bench/estimate_gpu.py --out "$W" --timeout 170 --only "ZeRO-3 1 card" --exact
  has ds-optim && step shard-zero3-ds-optim 200 "$PY" bench/estimate_gpu.py --out "$W" --timeout 170 --only "DeepSpeed's optimizer"
  has qfsdp && step qlora-fsdp 170 "$PY" bench/estimate_gpu.py --out "$W" --timeout 140 --only "QLoRA under FSDP, one card"
  has qzero3 && step qlora-zero3 200 "$PY" bench/estimate_gpu.py --out "$W" --timeout 170 --only "QLoRA under ZeRO-3, one card"
  has qlong && step qlora-long 330 "$PY" bench/estimate_gpu.py --out "$W" --timeout 150 --steps 2 --only "qwen-7b qlora b1 s"
  has prepare-none && step kbit-qlora-prepare-none 180 "$PY" bench/estimate_gpu.py --out "$W" --timeout 140 --only "quant.prepare=none"
  has awq && step awq 170 "$PY" bench/gptq_gpu.py "$W/gptq" --formats awq
  has probe && step probe 220 probe_step
  has forecast && step forecast 200 forecast_step
  has plan && step plan 200 plan_step
  # issue 44: a 7B-shaped random LoRA over --gpu-memory-limit leaves its allocator snapshot; its
  # activation bytes against the estimate's (within 20%), and the recording's cost in the first steps
  has snapshot && step snapshot 420 "$PY" bench/snapshot_gpu.py --out "$W"
fi
if has cpu375; then
  say "== cpu375: waiting for the CPU ranks ($(left) s left)"
  while kill -0 "$CPU375" 2>/dev/null && [ "$(left)" -gt 15 ]; do sleep 5; done
  kill -0 "$CPU375" 2>/dev/null && { say "cpu375: not finished, stopped"; pkill -f partitioned_build; }
  cat "$W"/part375_*.txt 2>/dev/null | tee -a "$LOG"
fi
has app && step app 120 "$PY" bench/gpu_app_check.py "$W/app" --gpus $GPU_OK --seconds 10

for p in "${side[@]}"; do kill "$p" 2>/dev/null; done
"$PY" -m fttui results --format json > "$W/rows.json" 2>/dev/null
cp "$W/rows.json" "$OUT/rows.json"
{ echo "# GPU verification ($(date -u +%FT%TZ))"; echo
  [ -f "$W/estimate_gpu.md" ] && { cat "$W/estimate_gpu.md"; echo; }
  "$PY" bench/gpu_side.py report "$W"; echo
  cat "$W/cpu_adam_build.log" 2>/dev/null | tail -2; } > "$OUT/summary.md"
for f in run_screen.svg picker.svg; do [ -f "$W/app/$f" ] && cp "$W/app/$f" "$OUT/"; done
rm -f "$W/app/tmux.sock"
tar czf "$OUT/work.tgz" -C "$W" --exclude=site --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' . 2>/dev/null
cat "$OUT/summary.md"
