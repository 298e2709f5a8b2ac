"""A run does not import the installed packages it never uses (fttui/worker/startup.py): peft and
transformers would import bitsandbytes, accelerate's ``unwrap_model`` deepspeed, deepspeed mlflow,
about 3 s of CPU at each start. Checked in a fresh interpreter: hidden, they are "not installed"
to the libraries' own availability checks, and a LoRA Trainer builds without them."""

from __future__ import annotations

import subprocess
import sys

from fttui.worker.startup import unused_packages


def test_what_each_run_leaves_out():
    assert unused_packages("lora", False, None, ()) == ["bitsandbytes", "deepspeed", "mlflow"]
    assert unused_packages("qlora", False, "paged_adamw_32bit", ()) == ["deepspeed", "mlflow"]
    assert unused_packages("lora", False, "adamw_bnb_8bit", ()) == ["deepspeed", "mlflow"]
    assert unused_packages("full", True, None, ("mlflow",)) == ["bitsandbytes"]
    assert unused_packages("lora-int8", True, None, ()) == ["mlflow"]


CHECK = r"""
import sys
from fttui.worker.startup import hide_unused
hide_unused(["bitsandbytes", "deepspeed", "mlflow"])
import peft, transformers
from accelerate.utils import is_deepspeed_available, is_bnb_available
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
assert not is_deepspeed_available() and not is_bnb_available()
model = peft.get_peft_model(LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=2, vocab_size=64)), peft.LoraConfig(r=2, target_modules=["q_proj"]))
Trainer(model=model, args=TrainingArguments(output_dir=sys.argv[1], use_cpu=True, report_to=[]))
loaded = [m for m in ("bitsandbytes", "deepspeed", "mlflow") if sys.modules.get(m) is not None]
assert not loaded, loaded
print("ok")
"""


def test_a_lora_trainer_builds_without_them(tmp_path):
    res = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout[-2000:] + res.stderr[-3000:]
