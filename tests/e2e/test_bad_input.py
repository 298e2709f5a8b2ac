"""Bad input through the real CLI: one line naming what is wrong and how to fix it, exit code 2,
and nothing written (no run directory, no store). The table in docs/bad-input.md lists the same
cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_fttui

TINY = '''# fttui run --profile p
method = "lora"
[model]
init = "random"
arch = "llama"
[model.arch_config]
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 4
vocab_size = 512
[devices]
gpus = 0
'''


def _profile(tmp: Path, text: str) -> str:
    p = tmp / "p.toml"
    p.write_text(text)
    return str(p)


def _data(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


# (case id, function tmp -> extra CLI args, substrings expected in the one line)
CASES = [
    ("toml-syntax", lambda t: ["--profile", _profile(t, TINY + "[train\n")], ["p.toml", "line"]),
    ("unknown-key", lambda t: ["--profile", _profile(t, TINY + "[train]\nbatch_sise = 2\n")],
     ["p.toml", "batch_sise", "did you mean 'batch_size'"]),
    ("wrong-type", lambda t: ["--profile", _profile(t, TINY + "[train]\nbatch_size = \"eight\"\n")],
     ["p.toml", "train.batch_size"]),
    ("unknown-method", lambda t: ["--profile", _profile(t, TINY.replace('"lora"', '"lorra"'))],
     ["p.toml", "method", "lora"]),
    ("batch-zero", lambda t: ["--profile", _profile(t, TINY), "--set", "batch_size=0"], ["batch_size"]),
    ("batch-negative", lambda t: ["--profile", _profile(t, TINY), "--set", "batch_size=-4"], ["batch_size"]),
    ("more-gpus-than-visible", lambda t: ["--profile", _profile(t, TINY), "--set", "gpus=8"],
     ["devices.gpus", "visible"]),
    ("dataset-missing", lambda t: ["--profile", _profile(t, TINY), "--set", f"data.source={t / 'nope.jsonl'}"],
     ["nope.jsonl", "data.source"]),
    ("dataset-empty", lambda t: ["--profile", _profile(t, TINY), "--set",
                                 f"data.source={_data(t, 'empty.jsonl', '')}"], ["empty.jsonl", "empty"]),
    ("dataset-malformed-line", lambda t: ["--profile", _profile(t, TINY), "--set",
                                          "data.source=" + _data(t, "bad.jsonl", '{"instruction": "a", "output": "b"}\n{oops\n')],
     ["bad.jsonl:2", "malformed"]),
    ("dataset-missing-fields", lambda t: ["--profile", _profile(t, TINY), "--set",
                                          "data.source=" + _data(t, "nof.jsonl", '{"instruction": "a"}\n')],
     ["nof.jsonl:1", "output"]),
    ("model-dir-without-config", lambda t: ["--profile", _profile(t, TINY), "--set", "model.init=pretrained",
                                            "--set", f"model.name_or_path={(t / 'm').mkdir() or t / 'm'}"],
     ["config.json"]),
    ("remote-code-not-allowed", lambda t: ["--profile", _profile(t, TINY), "--set", "model.init=pretrained",
                                           "--set", f"model.name_or_path={_remote_model(t)}"],
     ["trust_remote_code"]),
    ("bad-size", lambda t: ["--profile", _profile(t, TINY), "--host-memory-limit", "lots"], ["host_memory"]),
    ("unknown-profile", lambda t: ["--profile", "tiny-lorra"], ["tiny-lorra", "did you mean"]),
    ("batch-larger-than-data", lambda t: ["--profile", "tiny-lora", "--set", "batch_size=4000000000"],
     ["--set: train.batch_size", "4000000000 samples per step", "the data has 1024 samples",
      "at most 1024", "data.num_samples"]),
    ("batch-larger-than-file", lambda t: ["--profile", _profile(t, TINY), "--set", "batch_size=4", "--set",
                                          "data.source=" + _data(t, "three.jsonl", THREE)],
     ["train.batch_size", "the data has 3 samples", "at most 3", "a larger data file"]),
    ("arch-disagrees-with-config", lambda t: ["--profile", _profile(t, TINY), "--set",
                                              f"model.name_or_path={_config_dir(t, 'mistral')}"],
     ["is a mistral model", "model.arch"]),
    ("unknown-arch", lambda t: ["--profile", _profile(t, TINY), "--set", "model.arch=foo"],
     ["unknown architecture 'foo'"]),
    ("hub-id-not-cached", lambda t: ["--profile", _profile(t, TINY), "--set", "model.init=pretrained",
                                     "--set", "model.name_or_path=fttui-tests/not-a-cached-model"],
     ["not in the local Hugging Face cache", "hf download fttui-tests/not-a-cached-model"]),
    ("from-unknown-key", lambda t: ["--from", _data(t, "lf.yaml", "model_name_or_path: m\nlora_rnak: 8\n")],
     ["lf.yaml: lora_rnak: unknown LLaMA-Factory key", "did you mean 'lora_rank'"]),
    ("from-missing-deepspeed", lambda t: ["--from", _data(t, "ax.yml", "base_model: m\nadapter: lora\n"
                                                                     "deepspeed: ds_z9.json\n")],
     ["ax.yml: deepspeed: DeepSpeed config not found: ds_z9.json"]),
    ("profile-and-from", lambda t: ["--profile", "tiny-lora", "--from", _data(t, "lf.yaml", "model_name_or_path: m\n")],
     ["give --profile or --from, not both"]),
]


def _config_dir(tmp: Path, model_type: str) -> Path:
    d = tmp / model_type
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": 512, "hidden_size": 64,
                                               "intermediate_size": 128, "num_hidden_layers": 2,
                                               "num_attention_heads": 4, "num_key_value_heads": 4}))
    return d


THREE = "".join(json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) + "\n" for i in range(3))


def _remote_model(tmp: Path) -> Path:
    d = tmp / "remote"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "custom", "auto_map": {"AutoConfig": "x.Config"}}))
    return d


@pytest.mark.parametrize("case,args,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line_exit_2(case, args, expect, tmp_path, fttui_home):
    proc = run_fttui("run", *args(tmp_path), "--headless", timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    for s in expect:
        assert s in lines[0], (s, lines[0])
    assert not fttui_home.exists() or not any(fttui_home.rglob("*")), "bad input must write nothing"


def test_bad_input_keeps_earlier_rows(tmp_path, fttui_home):
    from fttui.core.results.store import Store

    with Store() as s:
        s.put({"run_id": "earlier", "status": "completed", "started_at": "2026-01-01T00:00:00"})
    proc = run_fttui("run", "--profile", _profile(tmp_path, TINY + "[train\n"), "--headless")
    assert proc.returncode == 2
    with Store() as s:
        assert [r["run_id"] for r in s.rows()] == ["earlier"]
