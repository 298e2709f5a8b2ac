#!/bin/bash
# Issue 23's plan check (docs/plan.md, "Measured"): plan a profile under a memory budget, then run
# fresh the three fastest setups said to fit and the cheapest (smallest predicted peak) said not
# to; prints each verdict, the rows (forecast at launch against measured training time), whether
# every verdict held and whether the three ran in the predicted order.
#   [STEPS=20] bash bench/plan_check.sh 40MiB      (from the repository root, the venv in .venv)
# On a card (bench/gpu_verify.sh's plan step): LIMIT_FLAG=--gpu-memory-limit PROFILE=llama2-7b-lora
#   SETS="--set devices.gpus=1 ..." bash bench/plan_check.sh 12GiB
set -u
export FTTUI_HOME=$(mktemp -d) OMP_NUM_THREADS=1 FTTUI_NO_APP=1
PY=${PY:-.venv/bin/python}
P="$PY -m fttui"
STEPS=${STEPS:-20} PROFILE=${PROFILE:-tiny-lora} SEQ=${SEQ:-512} EFF=${EFF:-32}
LIMIT_FLAG=${LIMIT_FLAG:---host-memory-limit} SETS=${SETS:-}
COMMON="--profile $PROFILE $SETS --set train.max_steps=$STEPS --set data.max_seq_len=$SEQ"
$P plan $COMMON $LIMIT_FLAG $1 --effective-batch $EFF --json > $FTTUI_HOME/plan.json || exit 1
$PY - $FTTUI_HOME/plan.json <<'PY' > $FTTUI_HOME/picks.txt
import json,sys
opts=json.load(open(sys.argv[1]))
fit=[o for o in opts if o["fits"]]
key="gpu_peak_bytes" if any(o.get("gpu_peak_bytes") for o in opts) else "host_peak_bytes"
no=sorted([o for o in opts if not o["fits"]], key=lambda o:o[key])
for tag,o in (("fastest-fit",fit[0]),("second-fit",fit[1]),("third-fit",fit[2]),("cheapest-nofit",no[0])):
    print(tag, o["sharding"], o["batch_size"], o["grad_accum"], str(o["gradient_checkpointing"]).lower(), o["run_seconds"], o[key])
PY
cat $FTTUI_HOME/picks.txt
while read tag sh b a gc fs hp; do
  $P run $COMMON --set sharding=$sh --set train.batch_size=$b --set train.grad_accum=$a --set train.gradient_checkpointing=$gc $LIMIT_FLAG $1 --headless > /dev/null 2>&1
  echo "$tag $sh b$b a$a gc=$gc exit=$? forecast_s=$fs"
done < $FTTUI_HOME/picks.txt
$P results --format json | $PY -c "
import json,sys
rows=json.load(sys.stdin)
rows.sort(key=lambda r: r['started_at'] or '')
print('sharding batch accum gc status oom_kind duration_s forecast_s peak_host_rss_mb peak_gpu_mem_mb')
for r in rows: print(r['sharding'], r['batch_size'], r['grad_accum'], r['gradient_checkpointing'], r['status'], r['oom_kind'], r['duration_s'], r['forecast_s'], r['peak_host_rss_mb'], r.get('peak_gpu_mem_mb'))
held = [r['status'] == 'completed' for r in rows[:3]] + [rows[3]['status'] == 'oom'] if len(rows) == 4 else []
print('verdicts held:', sum(held), 'of', len(held))
d = [r['duration_s'] for r in rows[:3]]
print('measured order of the three fastest said to fit matches the plan:', None not in d and d == sorted(d), d)"
