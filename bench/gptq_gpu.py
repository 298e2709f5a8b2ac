"""GPTQ and AWQ checkpoints trained with LoRA on a GPU, their rows against the estimate (issue 22).

    python3 bench/gptq_gpu.py OUT_DIR [--tiny] [--steps N] [--formats gptq,awq]

Needs what bench/estimate_gpu.py needs (it reuses its ``measure``: ``python -m fttui`` runs) and
fttui[gptq] importable, or its wheels in ``.whl/gptq/`` (installed with ``pip install --no-deps
--no-index --target OUT_DIR/site``, put on PYTHONPATH for fttui's processes: the machine's own
torch, transformers, peft, numpy stay as they are). For CPython 3.12 next to torch 2.11,
transformers 5.17, peft 0.21, pyarrow, pandas, xxhash, threadpoolctl, jinja2, requests and pillow
already installed, the wheels are: gptqmodel-7.6.0-py3-none-any (built from its sdist: PyPI has
no wheel), optimum-2.3.0-py3-none-any, datasets-5.2.0-py3-none-any, dill-0.4.1-py3-none-any,
multiprocess-0.70.19-py312-none-any, torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64,
pypcre-0.6.4-cp312-cp312-linux_x86_64 (a C extension built from its sdist with CPython 3.12: no
manylinux wheel exists), and the pure-Python ones built from sdists: defuser-0.0.28,
device_smi-0.5.7, logbar-0.4.15, tokenicer-0.0.14 (6.5 MB in all). Installed with --no-deps:
gptqmodel 7.6 pins numpy==2.2.6, which is not needed to run. Makes a random 1.1B Llama (TinyLlama's
shape) as a 4-bit GPTQ and as a 4-bit AWQ (GEMM) checkpoint on the card (tests/worker/gptq_pack.py), then for each setting
an estimate and a fresh ``fttui run`` of 3 steps (bench/estimate_gpu.py's ``measure``), and
prints one Markdown row per setting (OUT_DIR/gptq_gpu.md, .jsonl) with the kernel the run's
``start`` event recorded. ``--tiny``: the tiny Llama on the CPU (a check of the script itself).
Its H100 rows: docs/estimate.md, "Pre-quantized checkpoints" (133 s for both settings, the
checkpoint included, after ``pip install --no-deps --no-index .whl/*.whl``).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: TinyLlama-1.1B's shape (Llama 2 architecture, grouped-query attention)
ARCH_1B = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
           "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}
COMMON = ["model.init=pretrained", "precision=bf16", "batch_size=4", "max_seq_len=512",
          "lora.target_modules=[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\",\"gate_proj\",\"up_proj\",\"down_proj\"]"]
SETTINGS = [("1.1b lora bf16 b4 s512 GC", ["train.gradient_checkpointing=true"]),
            ("1.1b lora bf16 b4 s512 no GC", ["train.gradient_checkpointing=false"])]


def site_packages(out: Path) -> str | None:
    """A folder with fttui[gptq]'s packages when they are not importable here (from .whl/gptq/)."""
    if all(importlib.util.find_spec(p) for p in ("gptqmodel", "optimum")):
        return None
    wheels = sorted(glob.glob(os.path.join(ROOT, ".whl", "gptq", "*.whl")))
    if not wheels:
        raise SystemExit("gptqmodel / optimum not installed and no wheels in .whl/gptq/")
    site = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    *wheels], check=True)
    sys.path.insert(0, str(site))
    return str(site)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--formats", default="gptq,awq", help="comma-separated: gptq, awq")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    site = site_packages(out)
    env = dict(os.environ, FTTUI_HOME=tempfile.mkdtemp(prefix="fttui-gptq-"), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, site, os.environ.get("PYTHONPATH")) if p))
    from estimate_gpu import HEADER, card_bytes, measure, md_row

    from tests.worker.gptq_pack import save_gptq_checkpoint

    card = None if a.tiny else card_bytes()
    print(HEADER.replace("| setting |", "| setting | kernel |", 1).replace("| --- |", "| --- | --- |", 1), flush=True)
    for fmt in a.formats.split(","):
        folder = out / f"ckpt-{fmt}"
        if a.tiny:
            from tests.worker.conftest import TINY_ARCH

            save_gptq_checkpoint(folder, TINY_ARCH, group=32, fmt=fmt)
            sets = ["gpus=0", "batch_size=2", "max_seq_len=64"]
        else:
            # drawn on the card in a child process: this one holds no CUDA context or cached blocks,
            # which the runs' device figure would count (1.4 GB in the first AWQ call)
            code = ("import json, sys; from pathlib import Path; from tests.worker.gptq_pack import save_gptq_checkpoint; "
                    "a = json.loads(sys.argv[1]); save_gptq_checkpoint(Path(a['folder']), a['arch'], group=128, "
                    "device='cuda', fmt=a['fmt'])")
            subprocess.run([sys.executable, "-c", code, json.dumps({"folder": str(folder), "arch": ARCH_1B, "fmt": fmt})],
                           cwd=ROOT, env=env, check=True)
            sets = ["gpus=1"]
        for setting, more in SETTINGS:
            label = f"{fmt} {setting}"
            m = measure(label, "tiny-lora", [*COMMON, f"model.name_or_path={folder}", *more, *sets], None, a.steps,
                        card, env, timeout=300)
            runs = sorted(Path(env["FTTUI_HOME"], "runs").glob("*"), key=lambda r: r.stat().st_mtime)
            start = {}
            if runs:
                for line in (runs[-1] / "events.jsonl").read_text().splitlines():
                    ev = json.loads(line)
                    if ev.get("event") == "start":
                        start = ev
                        break
            m["quant"] = (start.get("structure") or {}).get("quant")
            kernel = (m["quant"] or {}).get("kernel", "")
            row = md_row(m).replace(f"| {label} |", f"| {label} | {kernel} |", 1)
            print(row, flush=True)
            with open(out / "gptq_gpu.md", "a") as f:
                f.write(row + "\n")
            with open(out / "gptq_gpu.jsonl", "a") as f:
                f.write(json.dumps(m) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
