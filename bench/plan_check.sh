#!/bin/bash
# Issue 23's plan check (docs/plan.md, "Measured"): plan tiny-lora under a host budget, then run
# fresh the three fastest setups said to fit and the cheapest (smallest predicted host peak) said
# not to; prints each verdict and the rows (forecast at launch against measured time).
#   bash bench/plan_check.sh 40MiB      (from the repository root, the venv in .venv)
set -u
export FTTUI_HOME=$(mktemp -d) OMP_NUM_THREADS=1 FTTUI_NO_APP=1
P=".venv/bin/python -m fttui"
COMMON="--profile tiny-lora --set train.max_steps=3 --set data.max_seq_len=512"
$P plan $COMMON --host-memory-limit $1 --effective-batch 32 --json > $FTTUI_HOME/plan.json
.venv/bin/python - $FTTUI_HOME/plan.json <<'PY' > $FTTUI_HOME/picks.txt
import json,sys
opts=json.load(open(sys.argv[1]))
fit=[o for o in opts if o["fits"]]
no=sorted([o for o in opts if not o["fits"]], key=lambda o:o["host_peak_bytes"])
for tag,o in (("fastest-fit",fit[0]),("second-fit",fit[1]),("third-fit",fit[2]),("cheapest-nofit",no[0])):
    print(tag, o["batch_size"], o["grad_accum"], str(o["gradient_checkpointing"]).lower(), o["run_seconds"], o["host_peak_bytes"])
PY
cat $FTTUI_HOME/picks.txt
while read tag b a gc fs hp; do
  $P run $COMMON --set train.batch_size=$b --set train.grad_accum=$a --set train.gradient_checkpointing=$gc --host-memory-limit $1 --headless > /dev/null 2>&1
  echo "$tag b$b a$a gc=$gc exit=$? forecast_s=$fs"
done < $FTTUI_HOME/picks.txt
$P results --format json | .venv/bin/python -c "
import json,sys
for r in json.load(sys.stdin): print(r['batch_size'], r['grad_accum'], r['gradient_checkpointing'], r['status'], r['oom_kind'], r['duration_s'], r['forecast_s'], r['peak_host_rss_mb'])"
