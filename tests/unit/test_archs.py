"""fttui.core.models.archs: the architecture table, param_count, and profiles that name an entry (no torch)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fttui.core.models.archs import ARCHS, Arch, param_count, resolve_config
from fttui.core.models.layouts import layout
from fttui.core.profiles import apply_overrides, load_profile

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "profiles").glob("*.toml"))


def _raw(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


#: bundled profiles whose model.arch names an ARCHS entry (the reference-model profiles)
REFERENCE = [p for p in BUNDLED if _raw(p).get("model", {}).get("arch") in ARCHS]

REQUIRED = {
    "baichuan2-full-zero3", "baichuan2-lora", "baichuan2-qlora", "baichuan2-lora-int8",
    "chatglm3-lora", "chatglm3-qlora", "baichuan-lora", "bloom-2b6-lora", "llama2-7b-lora",
    "llama2-7b-lora-int8", "llama2-7b-qlora", "qwen-1.8b-lora", "qwen-1.8b-lora-emb",
    "qwen-1.8b-qlora", "qwen-1.8b-full", "qwen-7b-lora", "qwen-7b-lora-emb", "qwen-7b-qlora",
    "qwen-14b-lora", "qwen-14b-qlora", "qwen-72b-qlora",
}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FTTUI_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def test_no_torch_needed():
    code = ("import sys, fttui.core.models.archs, fttui.core.profiles; "
            "bad = {'torch', 'transformers'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_entries():
    assert set(ARCHS) == {"baichuan2-7b", "baichuan-7b", "chatglm3-6b", "bloom-2b6", "qwen-1.8b",
                          "qwen-7b", "qwen-14b", "qwen-72b", "llama-2-7b", "tiny-llama"}
    for name, arch in ARCHS.items():
        assert arch.name == name and arch.hub_id and arch.notes
        assert arch.model_type in ("llama", "qwen2", "bloom")
        with pytest.raises(TypeError):
            arch.config["vocab_size"] = 1  # read-only
    assert {n for n, a in ARCHS.items() if a.needs_remote_code} == {
        "baichuan2-7b", "baichuan-7b", "chatglm3-6b", "qwen-1.8b", "qwen-7b", "qwen-14b", "qwen-72b"}


def test_tiny_llama_matches_tiny_full():
    tiny = load_profile("tiny-full").model.arch_config
    assert dict(ARCHS["tiny-llama"].config) == tiny


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_param_count_matches_published(name):
    arch = ARCHS[name]
    count = param_count(name, count_tied_twice=arch.published_counts_tied_twice)
    assert abs(count / 1e9 - arch.params_b) / arch.params_b < 0.02, (name, count)
    assert param_count(arch) == param_count(name)
    assert param_count({"model_type": arch.model_type, **arch.config}) == param_count(name)


def test_param_count_known_values():
    # exact, also counted by transformers on the meta device (tests/worker/test_arch_shapes.py)
    assert param_count("llama-2-7b") == 6_738_415_616
    assert param_count("baichuan2-7b") == 7_505_973_248
    assert param_count("chatglm3-6b") == 6_243_584_000
    assert param_count("qwen-7b") == 7_721_324_544
    assert param_count("bloom-2b6") == 2_478_435_840
    assert param_count("bloom-2b6", count_tied_twice=True) == 2_596_567_040
    assert param_count("tiny-llama") == 147_776


def test_param_count_options():
    base = {"model_type": "llama", "vocab_size": 100, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2}
    plain = param_count(base)
    assert param_count({**base, "attention_bias": True}) == plain + 8 + 8 + 8 + 8
    assert param_count({**base, "mlp_bias": True}) == plain + 16 + 16 + 8
    assert param_count({**base, "tie_word_embeddings": True}) == plain - 800
    assert param_count({**base, "num_key_value_heads": 1}) == plain - 2 * 8 * 4
    assert param_count({**base, "model_type": "qwen2"}) == plain + 8 + 8 + 8
    # a model_type without an exact layout is counted as a Llama-like decoder, and says so
    assert param_count({**base, "model_type": "gpt2"}) == plain
    assert "not among the layouts" in layout("gpt2", {k: v for k, v in base.items() if k != "model_type"}).note
    with pytest.raises(ValueError, match="config needs vocab_size"):
        param_count({"model_type": "mistral", "hidden_size": 8})
    with pytest.raises(KeyError, match="unknown architecture"):
        param_count("no-such-model")
    with pytest.raises(ValueError, match="model_type"):
        resolve_config({"vocab_size": 1})


def test_qwen_v1_intermediate_is_half_of_the_original():
    # Qwen v1 config.json intermediate_size (both SwiGLU branches together) -> per-branch width
    originals = {"qwen-1.8b": 11008, "qwen-7b": 22016, "qwen-14b": 27392, "qwen-72b": 49152}
    for name, original in originals.items():
        assert ARCHS[name].config["intermediate_size"] * 2 == original


# ------------------------------------------------------------------------------------------
# profiles


def test_required_profiles_exist():
    names = {p.stem for p in BUNDLED}
    assert REQUIRED <= names
    assert {"tiny-full-zero3", "tiny-lora-emb", "tiny-qlora", "tiny-lora-int8"} <= names
    assert REQUIRED <= {p.stem for p in REFERENCE}


@pytest.mark.parametrize("path", REFERENCE, ids=[p.stem for p in REFERENCE])
def test_reference_profile_resolves_to_arch(path):
    raw = _raw(path)
    arch = ARCHS[raw["model"]["arch"]]
    text = path.read_text(encoding="utf-8")
    assert "--set model.init=random" in text
    r = load_profile(path.stem)
    m = r.model
    assert m.init == "pretrained" and m.name_or_path == raw["model"]["name_or_path"]
    assert m.arch == arch.model_type and m.arch_name == arch.name
    assert m.arch_config == dict(arch.config)
    assert m.trust_remote_code is arch.needs_remote_code
    if arch.needs_remote_code:
        assert "runs the modelling code" in text
    assert r.devices.gpus >= 1  # the rows of several cards (qwen-7b-full, qwen-72b-lora) too
    assert r.lora.target_modules == "all-linear" or r.method == "full" \
        or r.method == "full-zero3-offload"
    if r.method == "qlora":
        assert r.train.optimizer == "paged_adamw_32bit" and r.quant.type == "nf4"


@pytest.mark.parametrize("path", REFERENCE, ids=[p.stem for p in REFERENCE])
def test_reference_profile_random_init(path):
    arch = ARCHS[_raw(path)["model"]["arch"]]
    r = load_profile(path.stem, ["model.init=random"])
    m = r.model
    assert m.init == "random" and m.tokenizer == "byte"  # nothing to download
    assert m.arch == arch.model_type and m.arch_name == arch.name
    assert param_count({"model_type": m.arch, **m.arch_config}) == param_count(arch)
    # the same through apply_overrides on the resolved profile, and back
    again = apply_overrides(load_profile(path.stem), {"model.init": "random"})
    assert again.model == m
    back = apply_overrides(again, ["model.init=pretrained"])
    assert back.model.tokenizer == back.model.name_or_path
    assert back.model.arch_name == arch.name


def test_reference_profile_settings():
    b = load_profile("baichuan2-qlora")
    assert (b.data.max_seq_len, b.data.num_samples) == (1024, 1100)
    assert (b.lora.r, b.lora.alpha, b.lora.dropout) == (64, 16, 0.05)
    assert b.train.gradient_checkpointing and b.train.epochs == 1.0
    assert b.train.precision == "fp16"
    z = load_profile("baichuan2-full-zero3", ["gpus=2", "batch_size=4"])
    assert (z.method, z.sharding, z.devices.gpus) == ("full", "zero3-offload", 2)
    ll = load_profile("llama2-7b-lora")
    assert (ll.data.max_seq_len, ll.data.num_samples, ll.train.batch_size) == (
        512, 274, 4)
    assert ll.data.source == "synthetic" and ll.train.precision == "fp16"
    q = load_profile("qwen-7b-lora")
    assert (q.data.max_seq_len, q.train.batch_size, q.train.precision) == (
        256, 1, "bf16")
    assert load_profile("qwen-7b-lora-emb").method == "lora-emb"


def test_arch_keys_and_overrides():
    # profile-given arch_config keys win over the entry's numbers
    r = load_profile("llama2-7b-lora", ["model.init=random", "model.arch_config.num_hidden_layers=2"])
    cfg = r.model.arch_config
    assert cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] == 4096
    # a plain model_type keeps working and leaves arch_name empty
    plain = load_profile("tiny-full")
    assert plain.model.arch == "llama" and plain.model.arch_name is None
    assert apply_overrides(plain, []) == plain
    # switching the arch of a resolved profile replaces the previous entry's numbers
    q = apply_overrides(load_profile("baichuan2-lora"), ["model.arch=qwen-7b"])
    assert q.model.arch == "qwen2" and q.model.arch_name == "qwen-7b"
    assert q.model.arch_config == dict(ARCHS["qwen-7b"].config)
    n = apply_overrides(load_profile("baichuan2-lora"), ["model.arch=bloom"])
    assert n.model.arch == "bloom" and n.model.arch_name is None
    # a random-init profile without name_or_path is labelled with the architecture name
    t = load_profile("tiny-full", ["model.arch=qwen-1.8b"])
    assert t.model.name_or_path == "qwen-1.8b"
    assert apply_overrides(t, []) == t


@pytest.mark.parametrize("name", ["tiny-full-zero3", "tiny-lora-emb", "tiny-qlora", "tiny-lora-int8"])
def test_tiny_twins(name):
    r = load_profile(name)
    assert r.model.init == "random" and r.devices.gpus == 0
    assert r.model.arch_config == dict(ARCHS["tiny-llama"].config)
    assert r.train.precision == "fp32"
    assert r.method == {"tiny-full-zero3": "full", "tiny-lora-emb": "lora-emb",
                           "tiny-qlora": "qlora", "tiny-lora-int8": "lora-int8"}[name]
    assert name != "tiny-full-zero3" or r.sharding == "zero3-offload"
