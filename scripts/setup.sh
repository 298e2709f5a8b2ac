#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv.
#  - no NVIDIA driver: install the CPU build of torch (torch==2.13.0) before anything else, so no
#    dependency pulls a multi-GB CUDA build;
#  - an NVIDIA driver and a CUDA torch already importable by $PYTHON: create the venv with
#    --system-site-packages so that torch is used as it is, never replaced.
# Idempotent: a second call with an unchanged pyproject.toml does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv
CPU_TORCH=${FTTUI_CPU_TORCH:-torch==2.13.0}
stamp="$VENV/.fttui-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"

# The Slurm end-to-end tests (tests/e2e/test_slurm.py) start a one-host cluster from Debian's
# slurm-wlm and munge, and the completion tests run the script in zsh too: under CI (CI set) or
# as root they are installed with apt-get when missing; elsewhere those tests skip and say why.
install_slurm() {
  if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 || ! command -v zsh >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && { [ -n "${CI:-}" ] || [ "${FTTUI_INSTALL_SLURM:-1}" = 1 ]; }; then
      echo "setup: installing slurm-wlm, munge and zsh with apt-get (the Slurm tests' one-host cluster, zsh completion)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge zsh >/dev/null ||
        echo "setup: apt-get could not install slurm-wlm, munge and zsh: the Slurm and zsh tests will skip" >&2
    fi
  fi
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/fttui" ]; then
  install_slurm
  exit 0
fi

has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
user_cuda_torch=0
if [ "$has_gpu" = 1 ] && "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then
  user_cuda_torch=1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if [ "$user_cuda_torch" = 1 ]; then
    echo "setup: NVIDIA driver and CUDA torch found: the venv reuses that torch (--system-site-packages)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
pip=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
took() { echo "setup: $1 (${SECONDS} s since setup began)"; }

if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  if [ "$has_gpu" = 1 ]; then
    echo "setup: NVIDIA driver found but no CUDA torch: installing torch from the package index"
    "${pip[@]}" install torch
  else
    echo "setup: no NVIDIA driver: installing the CPU build ($CPU_TORCH)"
    "${pip[@]}" install "$CPU_TORCH"
  fi
  took "torch installed"
fi
# DeepSpeed's CPU ops compile on first use (2-3 min on two cores, again in every new venv: torch's
# extension hash covers the venv's include paths): DeepSpeed is installed first (its requirement
# as pyproject.toml's zero3 extra declares it), and its ops are built in the background while pip
# installs the rest and apt installs Slurm (nothing to do with a GPU or without deepspeed;
# scripts/build_ops.py).
ops=
if [ "$has_gpu" = 0 ]; then
  deepspeed_req=$("$VENV/bin/python" -c 'import tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print(next(r for r in extras["zero3"] if r.startswith("deepspeed")))')
  if "${pip[@]}" install "$deepspeed_req" 2>&1 | grep -v "is ignored: it is neither"; then :; fi
  PYTHONPATH=. "$VENV/bin/python" scripts/build_ops.py >/dev/null 2>&1 &
  ops=$!
fi
echo "setup: installing fttui and its dependencies into $VENV"
"${pip[@]}" install -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -c 'import fttui, torch, transformers, peft, textual' || {
  echo "setup: the environment is incomplete (see the messages above)" >&2; exit 1; }
took "fttui and its dependencies installed"
install_slurm
took "slurm-wlm, munge and zsh present"
if [ -n "$ops" ]; then
  wait "$ops" || true
  took "DeepSpeed's CPU ops built"
fi
echo "$want" >"$stamp"
