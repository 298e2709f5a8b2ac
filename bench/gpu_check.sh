#!/usr/bin/env bash
# GPU verification, for a machine with an NVIDIA GPU (not run by CI):
#
#   bash bench/gpu_check.sh [OUT_DIR]
#
# Runs the GPU paths for real and prints the rows they produce:
#   1. NVML: `fttui` sampler sees the card(s) (name, memory, utilisation, power, temperature);
#   2. Llama-2-7B LoRA, random init, fp16, batch 4, max_seq_len 512, synthetic full-length
#      samples (the reference row: 15.81 GB on an RTX 3090);
#   3. QLoRA (nf4, paged AdamW) of Qwen-1.8B cut to 2 layers (a random-init 7B QLoRA builds the
#      fp16 model on the host, saves it and loads it back quantised: minutes);
#   4. a real CUDA OOM: the LoRA run under --gpu-memory-limit 8GiB (status oom, kind cuda);
#   5. the probe under --gpu-memory-limit 24GiB ("what fits on a 24 GB card?");
#   6. ZeRO-3 CPU offload: tiny-full-zero3 on the GPU (host RSS is where the optimizer lives).
# Weights are never downloaded: `model.init=random` builds the architecture from its numbers.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp/fttui-gpu-check}}
mkdir -p "$OUT"
export FTTUI_HOME="$OUT/home"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
F=("$PY" -m fttui)
common=(--set model.init=random --set max_steps=${STEPS:-20} --set num_samples=200 --headless)

echo "== 1. NVML"
"$PY" - <<'EOF' | tee "$OUT/nvml.txt"
from fttui.monitor import make_gpu_sampler
s = make_gpu_sampler().sample()
print("available:", s.available, s.reason or "", "driver", s.driver, "cuda", s.cuda)
for g in s.gpus:
    print(g)
EOF

echo "== 2. Llama-2-7B LoRA fp16 b4 s512"
"${F[@]}" run --profile llama2-7b-lora --set precision=fp16 --set batch_size=4 --set max_seq_len=512 "${common[@]}" \
  2>&1 | tee "$OUT/lora.txt" | tail -8
echo "== 3. Qwen-1.8B (2 layers) QLoRA"
"${F[@]}" run --profile qwen-1.8b-qlora --set model.arch_config.num_hidden_layers=2 "${common[@]}" \
  2>&1 | tee "$OUT/qlora.txt" | tail -8
echo "== 4. CUDA OOM under an 8 GiB budget"
"${F[@]}" run --profile llama2-7b-lora --set precision=fp16 --set batch_size=16 --set max_seq_len=1024 \
  --gpu-memory-limit 8GiB "${common[@]}" 2>&1 | tee "$OUT/oom.txt" | tail -4
echo "== 5. probe on a 24 GiB budget"
"${F[@]}" probe --profile llama2-7b-lora --set model.init=random --set precision=fp16 --set max_seq_len=512 \
  --gpu-memory-limit 24GiB --range 1..64 --steps 2 2>&1 | tee "$OUT/probe.txt" | tail -25
echo "== 6. ZeRO-3 offload on the GPU"
"${F[@]}" run --profile tiny-full-zero3 --set gpus=1 --headless 2>&1 | tee "$OUT/zero3.txt" | tail -8
echo "== rows"
"${F[@]}" results --format markdown | tee "$OUT/results.md"
