"""Models from their own config.json, torch-free: a model folder or a hub id in the local Hugging
Face cache gives the estimator its numbers; a config that disagrees with model.arch, an unknown
model.arch and a hub id that is not cached are one-line errors (the latter before launch)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.base.errors import EstimateError, ProfileError
from fttui.core.memory import estimate
from fttui.core.models.archs import ARCHS, param_count
from fttui.core.models.hfconfig import cached_snapshot, causal_lm_types, download_command, hub_cache_dir
from fttui.core.profiles import apply_overrides, load_profile
from fttui.core.run.launching.preflight import preflight

from ..conftest import fttui_env, run_fttui

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
#: published parameter counts (model cards); the estimate is checked against these, not against
#: fttui's own count (tests/worker/test_config_models.py checks that one against transformers)
PUBLISHED = {"mistral-7b": 7.24e9, "phi-3-mini": 3.82e9, "gemma-2b": 2.51e9, "mixtral-8x7b": 46.7e9,
             "qwen1.5-moe-a2.7b": 14.3e9}
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache (the machine's own is never read)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return tmp_path / "hf-home" / "hub"


def _profile(tmp_path: Path, model: str, method: str = "full", extra: str = "") -> Path:
    path = tmp_path / "own-config.toml"
    path.write_text(f"method = \"{method}\"\n[model]\nname_or_path = \"{model}\"\n{extra}"
                    "[train]\nprecision = \"bf16\"\n[devices]\ngpus = 1\n")
    return path


def _cache(hub: Path, repo: str, config: Path) -> Path:
    """A repo in huggingface_hub's cache layout: refs/main -> snapshots/<rev>/config.json."""
    root = hub / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(REV)
    snap = root / "snapshots" / REV
    snap.mkdir(parents=True)
    shutil.copy(config, snap / "config.json")
    return snap


@pytest.mark.parametrize("name", ["mistral-7b", "phi-3-mini", "gemma-2b"])
def test_folder_with_only_a_config_gives_its_weights(tmp_path, name):
    assert not {a.model_type for a in ARCHS.values()} & {"mistral", "phi3", "gemma"}  # not built in
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(CONFIGS / name / "config.json", folder / "config.json")
    proc = run_fttui("estimate", "--profile", str(_profile(tmp_path, str(folder))), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    weights = json.loads(proc.stdout)["breakdown"]["weights"]
    assert abs(weights - PUBLISHED[name] * 2) / (PUBLISHED[name] * 2) < 0.02, (name, weights)  # bf16: 2 B


def test_estimate_imports_no_torch(tmp_path):
    code = ("import sys; from fttui.core.profiles import load_profile; from fttui.core.memory import estimate; "
            f"e = estimate(load_profile({str(_profile(tmp_path, str(CONFIGS / 'mistral-7b')))!r})); "
            "bad = {'torch', 'transformers'} & set(sys.modules); assert not bad, bad; "
            "print(e.breakdown['weights'])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=fttui_env()).stdout
    assert abs(int(out) - 2 * PUBLISHED["mistral-7b"]) / (2 * PUBLISHED["mistral-7b"]) < 0.02


def test_moe_holds_every_expert(tmp_path):
    for name in ("mixtral-8x7b", "qwen1.5-moe-a2.7b"):
        e = estimate(load_profile(str(_profile(tmp_path, str(CONFIGS / name)))))
        assert abs(e.breakdown["weights"] - 2 * PUBLISHED[name]) / (2 * PUBLISHED[name]) < 0.02, name
    # LoRA on every linear layer of Mixtral adapts attention only: the experts are 3-D parameters
    r = load_profile(str(_profile(tmp_path, str(CONFIGS / "mixtral-8x7b"), "lora")), ["lora.target_modules=all-linear"])
    e = estimate(r)
    h, kv, L, rank = 4096, 1024, 32, r.lora.r
    assert e.inputs["lora_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert e.inputs["lora_params"] == L * rank * ((h + h) + 2 * (h + kv) + (h + h))
    assert any("routed experts" in n for n in e.notes)


def test_hub_id_in_a_fake_cache(tmp_path, empty_cache, monkeypatch):
    repo = "mistralai/Mistral-7B-v0.1"
    snap = _cache(empty_cache, repo, CONFIGS / "mistral-7b" / "config.json")
    assert hub_cache_dir() == empty_cache and cached_snapshot(repo) == snap
    r = load_profile(str(_profile(tmp_path, repo)))
    assert r.model.config == str(snap / "config.json") and "model.config" in r.derived
    weights = estimate(r).breakdown["weights"]
    assert abs(weights - 2 * PUBLISHED["mistral-7b"]) / (2 * PUBLISHED["mistral-7b"]) < 0.02
    preflight(r, (1, None))  # cached: nothing to download
    # HF_HUB_CACHE wins over HF_HOME
    other = tmp_path / "other-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert cached_snapshot(repo) is None
    _cache(other, repo, CONFIGS / "phi-3-mini" / "config.json")
    again = apply_overrides(r, [])
    assert again.model.config.startswith(str(other))
    assert estimate(again).inputs["arch"] == "phi3"


def test_hub_id_not_cached_is_caught_before_launch(tmp_path, fttui_home):
    r = load_profile(str(_profile(tmp_path, "mistralai/Mistral-7B-v0.1")))
    assert r.model.config is None
    with pytest.raises(ProfileError) as ei:
        preflight(r, (1, None))
    assert ei.value.key == "model.name_or_path"
    assert f"({download_command('mistralai/Mistral-7B-v0.1')})" in str(ei.value).replace("download it first: ", "")
    with pytest.raises(EstimateError, match="not in the local Hugging Face cache"):
        estimate(r)
    proc = run_fttui("run", "--profile", str(_profile(tmp_path, "mistralai/Mistral-7B-v0.1")),
                     env=fttui_env(HF_HOME=str(tmp_path / "hf-home")), timeout=120)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(err) == 1, proc.stderr
    assert "hf download mistralai/Mistral-7B-v0.1" in err[0] and "not in the local Hugging Face cache" in err[0]
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


def test_download_command_matches_the_installed_hub():
    import importlib.metadata as md

    major, minor = (int(x) for x in md.version("huggingface_hub").split(".")[:2])
    cli = "hf" if (major, minor) >= (0, 34) else "huggingface-cli"
    assert download_command("a/b") == f"{cli} download a/b"
    assert shutil.which(cli, path=str(Path(sys.executable).parent)) is not None


def test_name_that_disagrees_with_arch_is_one_line(tmp_path, empty_cache):
    with pytest.raises(ProfileError) as ei:
        load_profile("llama2-7b-lora", [f"model.name_or_path={CONFIGS / 'mistral-7b'}"])
    msg = str(ei.value)
    assert ei.value.key == "model.name_or_path" and "\n" not in msg
    assert "is a mistral model" in msg and "llama-2-7b (llama)" in msg and 'model.arch = "mistral"' in msg
    # the same through a cached hub id, and through the CLI
    _cache(empty_cache, "mistralai/Mistral-7B-v0.1", CONFIGS / "mistral-7b" / "config.json")
    with pytest.raises(ProfileError, match="is a mistral model"):
        load_profile("llama2-7b-lora", ["model.name_or_path=mistralai/Mistral-7B-v0.1"])
    proc = run_fttui("estimate", "--profile", "llama2-7b-lora", "--set",
                     f"model.name_or_path={CONFIGS / 'mistral-7b'}", timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "is a mistral model" in proc.stderr
    # a model of the entry's model_type with other sizes is not the entry either
    llama = tmp_path / "llama-13b"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", **ARCHS["llama-2-7b"].config_dict(),
                                                   "hidden_size": 5120, "num_attention_heads": 40,
                                                   "num_key_value_heads": 40}))
    with pytest.raises(ProfileError, match=r"is not llama-2-7b: its config.json has hidden 5120 where llama-2-7b has 4096"):
        load_profile("llama2-7b-lora", [f"model.name_or_path={llama}"])
    # taking the hint works: the model's own numbers
    r = load_profile("llama2-7b-lora", [f"model.name_or_path={CONFIGS / 'mistral-7b'}", "model.arch=mistral"])
    assert estimate(r).inputs["params"] == param_count({"model_type": "mistral", **json.loads(
        (CONFIGS / "mistral-7b" / "config.json").read_text())})
    # an explicit model.config that disagrees with model.arch too
    with pytest.raises(ProfileError, match="is a gemma model"):
        load_profile("tiny-full", [f"model.config={CONFIGS / 'gemma-2b'}"])


def test_unknown_arch_lists_the_known_ones():
    with pytest.raises(ProfileError) as ei:
        load_profile("tiny-full", ["model.arch=foo"])
    msg = str(ei.value)
    assert ei.value.key == "model.arch" and "unknown architecture 'foo'" in msg and "vocab_size" not in msg
    assert all(name in msg for name in ARCHS) and "mistral" in msg
    with pytest.raises(ProfileError, match="did you mean 'mistral'"):
        load_profile("tiny-full", ["model.arch=mistrall"])
    types = causal_lm_types()
    assert {"llama", "mistral", "phi3", "gemma", "mixtral", "qwen2_moe"} <= set(types)
    assert f"any of the {len(types)} causal-LM model_types" in msg


def test_random_init_from_a_config_folder(tmp_path):
    folder = tmp_path / "tiny-gemma"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "gemma", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8}))
    path = tmp_path / "rand.toml"
    path.write_text(f"method = \"full\"\n[model]\nname_or_path = \"{folder}\"\ninit = \"random\"\n"
                    "[devices]\ngpus = 0\n")
    r = load_profile(str(path))
    assert r.model.config == str(folder / "config.json") and r.model.tokenizer == "byte"
    assert r.model.name_or_path == str(folder) and apply_overrides(r, []) == r
    e = estimate(r)
    h, i, L, V = 32, 64, 2, 128
    assert e.inputs["params"] == V * h + L * (h * 32 + 2 * h * 8 + 32 * h + 3 * h * i + 2 * h) + h  # tied, GQA 1
    # another folder re-derives model.config
    other = tmp_path / "tiny-mistral"
    other.mkdir()
    shutil.copy(CONFIGS / "mistral-7b" / "config.json", other / "config.json")
    again = apply_overrides(r, [f"model.name_or_path={other}"])
    assert again.model.config == str(other / "config.json") and estimate(again).inputs["arch"] == "mistral"
    # nothing to build from: the error names the ways
    with pytest.raises(ProfileError, match="needs model.arch, model.config or a model folder"):
        apply_overrides(r, [f"model.name_or_path={tmp_path / 'nowhere'}"])


def test_random_init_of_a_config_transformers_cannot_build(tmp_path):
    folder = tmp_path / "remote"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "my_remote_lm", "vocab_size": 64,
                                                    "hidden_size": 16, "num_hidden_layers": 1,
                                                    "num_attention_heads": 2,
                                                    "auto_map": {"AutoModelForCausalLM": "modeling_my.MyLM"}}))
    path = tmp_path / "rand.toml"
    path.write_text(f"[model]\nname_or_path = \"{folder}\"\ninit = \"random\"\n")
    with pytest.raises(ProfileError, match="model_type my_remote_lm is not a causal LM the installed transformers"):
        load_profile(str(path))
    # pretrained, it resolves (the estimate counts it as a Llama-like decoder and says so)
    e = estimate(load_profile(str(path), ["model.init=pretrained", "model.trust_remote_code=true"]))
    assert any("not among the layouts" in n for n in e.notes)
    # a plain model.arch maps the remote-code model onto a native one (as the ARCHS entries do):
    # the arch's numbers stand, and launching still asks for trust_remote_code
    mapped = load_profile("tiny-full", [f"model.name_or_path={folder}", "model.init=pretrained"])
    assert mapped.model.config is None
    assert estimate(mapped).inputs["params"] == param_count("tiny-llama")
    with pytest.raises(ProfileError, match="needs remote code"):
        preflight(mapped, (0, "no NVIDIA driver"))
