"""Profiles: discovery, loading, extends, overrides, validation and error messages."""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path

import pytest

from fttui.core.base import paths
from fttui.core.base.errors import DataError, FttuiError, ProfileError
from fttui.core.profiles import (
    ALIASES,
    METHODS,
    SCHEMA,
    SUPPORTED_METHODS,
    SizeError,
    apply_overrides,
    discover,
    find_profile,
    load_profile,
    parse_size,
    profile_summary,
)

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "profiles").glob("*.toml"))
BAD_DIR = Path(__file__).resolve().parent / "bad_profiles"
BAD = sorted(BAD_DIR.glob("*.toml"))

TINY_MODEL = """
[model]
init = "random"
arch = "llama"

[model.arch_config]
hidden_size = 64
num_hidden_layers = 2
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No real user profiles, no ./profiles of the caller: only the bundled ones are found."""
    monkeypatch.setenv("FTTUI_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# bundled profiles


def test_bundled_profiles_exist():
    names = {p.stem for p in BUNDLED}
    assert {"tiny-full", "tiny-lora"} <= names


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_profile_loads(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"# fttui run --profile {path.stem}"
    assert lines[1].startswith("#") and len(lines[1]) > 5  # says what it is
    ref = find_profile(path.stem)
    assert ref.origin == "bundled" and ref.path.resolve() == path.resolve()
    resolved = load_profile(path.stem)
    assert resolved.name == path.stem and resolved.origin == "bundled"
    assert Path(resolved.source).resolve() == path.resolve()
    for section, fields in SCHEMA.items():
        target = resolved.to_dict() if section == "" else resolved.to_dict()[section]
        assert set(fields) <= set(target), section
    json.dumps(resolved.to_dict())  # written as profile.json
    if resolved.data.source != "synthetic":
        assert Path(resolved.data.source).is_file()
    assert resolved.model.name_or_path
    summary = profile_summary(resolved)
    assert summary["name"] == path.stem and summary["effective_batch"] >= 1
    if "(reference:" in resolved.description:  # a benchmark: measured, its weights not kept
        assert resolved.train.save == "none", f"{path.name}: add save = \"none\" under [train]"


def test_tiny_profiles_content():
    full = load_profile("tiny-full")
    assert full.method == "full" and full.model.init == "random"
    assert full.model.arch_config["vocab_size"] >= 260
    assert full.model.tokenizer == "byte"
    assert full.data.name == "tiny-instruct"
    lines = Path(full.data.source).read_text(encoding="utf-8").splitlines()
    assert 200 <= len(lines) <= 300
    for line in lines:
        record = json.loads(line)
        assert set(record) == {"instruction", "input", "output"}
        assert record["instruction"] and record["output"]
    lora = load_profile("tiny-lora")
    assert lora.method == "lora" and lora.data.source == "synthetic"
    assert lora.data.num_samples == 1024 and lora.train.batch_size == 8
    assert lora.model.arch_config == full.model.arch_config


def test_tiny_chat_data():
    lines = (ROOT / "tests" / "data" / "tiny-chat.jsonl").read_text(encoding="utf-8").splitlines()
    assert 15 <= len(lines) <= 30
    for line in lines:
        messages = json.loads(line)["messages"]
        assert messages[-1]["role"] == "assistant"
        assert all(set(m) == {"role", "content"} for m in messages)


# ------------------------------------------------------------------------------------------
# bad profiles: (key, hint text, file named if not the profile itself)

EXPECT = {
    "syntax-error": ("line 4", "check the quotes", None),
    "unknown-key": ("train.batch_sise", "did you mean 'batch_size'?", None),
    "unknown-section": ("[trian]", "did you mean 'train'?", None),
    "top-level-unknown": ("descripton", "did you mean 'description'?", None),
    "misplaced-key": ("batch_size", "put it under [train]", None),
    "wrong-section": ("train.max_seq_len", "belongs in [data]", None),
    "wrong-type": ("train.batch_size", "write 4 without quotes", None),
    "bool-as-int": ("train.batch_size", "batch_size = 1", None),
    "unknown-method": ("method", "did you mean 'qlora'?", None),
    "batch-zero": ("train.batch_size", "use 1 or more", None),
    "batch-negative": ("train.batch_size", "use 1 or more", None),
    "bad-precision": ("train.precision", "did you mean 'bf16'?", None),
    "bad-attn": ("model.attn_implementation", "did you mean 'flash_attention_2'?", None),
    "cycle-a": ("extends", "remove one of the 'extends' lines", "cycle-b"),
    "cycle-b": ("extends", "remove one of the 'extends' lines", "cycle-a"),
    "extends-unknown": ("extends", "did you mean 'tiny-full'?", None),
    "missing-data": ("data.source", "resolved from the profile's folder", None),
    "bad-size": ("limits.gpu_memory", "units: B, KB", None),
    "node-rank": ("devices.node_rank", "at most 1 with 2 nodes", None),
    "dropout": ("lora.dropout", "below 1", None),
    "missing-model": ("model.name_or_path", "hub id", None),
    "random-no-arch": ("model.arch", "arch = \"llama\"", None),
    "zero-epochs": ("train.epochs", "max_steps > 0", None),
    "bad-port": ("devices.main_port", "1 to 65535", None),
}


def test_bad_profiles_all_have_expectations():
    assert len(BAD) >= 12
    assert {p.stem for p in BAD} == set(EXPECT)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_profile(path):
    key, hint, file_stem = EXPECT[path.stem]
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    err = info.value
    text = str(err)
    assert "\n" not in text and "\r" not in text
    assert f"{file_stem or path.stem}.toml" in text
    assert err.file and err.file.endswith(f"{file_stem or path.stem}.toml")
    assert err.key == key and f": {key}: " in text
    assert err.hint and hint in err.hint and hint in text
    assert err.exit_code == 2


# ------------------------------------------------------------------------------------------
# extends


def test_extends_merges_key_by_key(isolated):
    base_dir = isolated / "base"
    write(base_dir / "data" / "d.jsonl", '{"instruction": "a", "input": "", "output": "b"}\n')
    write(base_dir / "base.toml", f"""# fttui run --profile base
description = "base"
method = "full"
{TINY_MODEL}
[data]
source = "data/d.jsonl"
max_seq_len = 64

[train]
batch_size = 4
lr = 1e-3
""")
    child = write(isolated / "kids" / "child.toml", f"""# fttui run --profile child
extends = "{base_dir / 'base.toml'}"
method = "lora"

[model.arch_config]
num_hidden_layers = 4

[train]
batch_size = 2
""")
    resolved = load_profile(str(child))
    assert resolved.name == "child" and resolved.origin == "path"
    assert resolved.description == "base" and resolved.method == "lora"
    assert resolved.train.batch_size == 2 and resolved.train.lr == 1e-3
    assert resolved.model.arch_config == {"hidden_size": 64, "num_hidden_layers": 4}
    # a relative path is taken from the folder of the file that set it
    assert Path(resolved.data.source) == (base_dir / "data" / "d.jsonl").resolve()
    assert resolved.data.name == "d" and resolved.data.max_seq_len == 64


def test_extends_by_name_prefers_sibling_then_discovery(isolated):
    folder = isolated / "mine"
    write(folder / "base.toml", f'method = "full"\n{TINY_MODEL}\n[train]\nlr = 0.5\n')
    write(folder / "a.toml", 'extends = "base"\n[train]\nbatch_size = 3\n')
    write(folder / "b.toml", 'extends = "tiny-lora"\n[train]\nbatch_size = 5\n')
    a = load_profile(str(folder / "a.toml"))
    assert a.train.lr == 0.5 and a.method == "full" and a.train.batch_size == 3
    b = load_profile(str(folder / "b.toml"))  # bundled tiny-lora, which extends tiny-full
    assert b.method == "lora" and b.train.batch_size == 5
    assert b.model.arch_config["vocab_size"] == 512


def test_profile_extending_its_namesake(isolated):
    write(isolated / "work" / "profiles" / "tiny-lora.toml",
          'extends = "tiny-lora"\n[train]\nbatch_size = 1\n')
    resolved = load_profile("tiny-lora")
    assert resolved.origin == "project" and resolved.train.batch_size == 1
    assert resolved.lora.r == 8


def test_extends_itself(isolated):
    path = write(isolated / "self.toml", 'extends = "self"\n[model]\nname_or_path = "gpt2"\n')
    with pytest.raises(ProfileError, match="extends itself"):
        load_profile(str(path))


# ------------------------------------------------------------------------------------------
# overrides


def test_overrides_dotted_and_aliases():
    r = load_profile("tiny-full", [
        "train.batch_size=8", "grad_accum=2", "lr=1e-4", "epochs=2", "max_seq_len=64",
        "num_samples=10", "max_steps=5", "precision=bf16", "gpus=2",
        "description=hello world", "model.arch_config.hidden_size=32",
        "lora.target_modules=q_proj, v_proj", "train.gradient_checkpointing=true",
        'train.optimizer="adafactor"', "limits.gpu_memory=24GiB",
    ])
    t = r.train
    assert (t.batch_size, t.grad_accum, t.lr, t.epochs) == (8, 2, 1e-4, 2.0)
    assert isinstance(t.epochs, float) and isinstance(t.batch_size, int)
    assert t.max_steps == 5 and t.precision == "bf16" and t.gradient_checkpointing is True
    assert t.optimizer == "adafactor"
    assert r.data.max_seq_len == 64 and r.data.num_samples == 10
    assert r.devices.gpus == 2 and r.description == "hello world"
    assert r.model.arch_config["hidden_size"] == 32
    assert r.model.arch_config["num_hidden_layers"] == 2
    assert r.lora.target_modules == ["q_proj", "v_proj"]
    assert r.limits.gpu_memory == "24GiB"
    assert "train.batch_size=8" in r.overrides and "train.lr=1e-4" in r.overrides
    assert profile_summary(r)["effective_batch"] == 8 * 2 * 2


def test_override_values_keep_the_schema_type():
    r = load_profile("tiny-full", {"model.name_or_path": "1234", "train.lr": 3, "batch_size": "2",
                                   "lora.target_modules": '["a", "b"]'})
    assert r.model.name_or_path == "1234"  # a str key keeps the text
    assert r.train.lr == 3.0 and r.train.batch_size == 2
    assert r.lora.target_modules == ["a", "b"]


def test_aliases_point_at_schema_keys():
    for dotted in ALIASES.values():
        section, key = dotted.split(".")
        assert key in SCHEMA[section]


@pytest.mark.parametrize("override, key, hint", [
    ("train.batch_sise=3", "train.batch_sise", "did you mean 'train.batch_size'?"),
    ("batchsize=3", "batchsize", "did you mean 'batch_size'?"),
    ("train.max_seq_len=3", "train.max_seq_len", "did you mean 'data.max_seq_len'?"),
    ("precision=bf61", "train.precision", "did you mean 'bf16'?"),
    ("method=qlroa", "method", "did you mean 'qlora'?"),
    ("batch_size=0", "train.batch_size", "use 1 or more"),
    ("batch_size=two", "train.batch_size", "expected"),
    ("gpus=true", "devices.gpus", "gpus = 1"),
    ("limits.host_memory=12G", "limits.host_memory", "'12GiB'"),
    ("extends=tiny-lora", "extends", "load the other profile"),
    ("no-equals-sign", "no-equals-sign", "KEY=VALUE"),
])
def test_bad_overrides(override, key, hint):
    with pytest.raises(ProfileError) as info:
        load_profile("tiny-full", [override])
    err = info.value
    assert err.file == "--set" and err.key == key and hint in str(err)
    assert "\n" not in str(err)


def test_override_data_source_relative_to_cwd(isolated):
    write(isolated / "work" / "mine.jsonl", '{"instruction": "a", "input": "", "output": "b"}\n')
    r = load_profile("tiny-lora", ["data.source=mine.jsonl"])
    assert Path(r.data.source) == (isolated / "work" / "mine.jsonl").resolve()
    assert r.data.name == "mine"
    with pytest.raises(ProfileError, match="data file not found: mien.jsonl.*did you mean 'mine.jsonl'"):
        load_profile("tiny-lora", ["data.source=mien.jsonl"])
    with pytest.raises(ProfileError, match="data.source: data file not found.*current folder"):
        load_profile("tiny-lora", ["data.source=nothing/at-all-here.json"])
    with pytest.raises(ProfileError, match="did you mean 'synthetic'"):
        load_profile("tiny-full", ["data.source=synthetc"])


def test_apply_overrides_rederives():
    base = load_profile("tiny-full")
    assert base.train.optimizer == "adamw_torch"
    q = apply_overrides(base, ["method=qlora", "data.source=synthetic"])
    assert q.train.optimizer == "paged_adamw_32bit"
    assert q.data.name == "synthetic" and q.data.num_samples == 256
    assert q.name == "tiny-full" and q.origin == "bundled"
    back = apply_overrides(q, {"method": "lora"})
    assert back.train.optimizer == "adamw_torch"
    pinned = apply_overrides(base, ["train.optimizer=sgd", "method=qlora"])
    assert pinned.train.optimizer == "sgd"
    named = apply_overrides(base, ["model.init=pretrained", "model.name_or_path=gpt2",
                                   "model.tokenizer=gpt2"])
    assert named.model.name_or_path == "gpt2"
    assert base.train.batch_size == 4  # the input is not changed
    assert apply_overrides(base, []) == base
    with pytest.raises(ProfileError, match="train.batch_size"):
        apply_overrides(base, {"batch_size": -1})


def test_qlora_optimizer_default_and_tokenizer_default(isolated):
    path = write(isolated / "q.toml", 'method = "qlora"\n[model]\nname_or_path = "org/model"\n')
    r = load_profile(str(path))
    assert r.train.optimizer == "paged_adamw_32bit"
    assert r.model.tokenizer == "org/model"  # hub ids stay as they are
    assert r.data.source == "synthetic" and r.data.num_samples == 256


def test_local_model_paths_resolve_from_profile_folder(isolated):
    folder = isolated / "p"
    (folder / "models" / "m").mkdir(parents=True)
    write(folder / "cfg" / "config.json", "{}")
    write(folder / "a.toml", '[model]\nname_or_path = "models/m"\n')
    r = load_profile(str(folder / "a.toml"))
    assert Path(r.model.name_or_path) == (folder / "models" / "m").resolve()
    assert r.model.tokenizer == r.model.name_or_path
    assert profile_summary(r)["model"] == "m"
    write(folder / "b.toml", '[model]\ninit = "random"\nconfig = "cfg/config.json"\n')
    r = load_profile(str(folder / "b.toml"))
    assert Path(r.model.config) == (folder / "cfg" / "config.json").resolve()
    assert r.model.name_or_path == "cfg" and r.model.tokenizer == "byte"
    write(folder / "c.toml", '[model]\nname_or_path = "./models/missing"\n')
    with pytest.raises(ProfileError, match="model.name_or_path: not found"):
        load_profile(str(folder / "c.toml"))


def test_methods_all_valid():
    assert set(METHODS) == SUPPORTED_METHODS and len(METHODS) == 6
    for method in METHODS:
        r = load_profile("tiny-full", [f"method={method}"])
        assert (r.method, r.sharding) == (("full", "zero3-offload") if method == "full-zero3-offload"
                                                else (method, "none"))


def test_unsupported_method(monkeypatch):
    monkeypatch.setattr("fttui.core.profiles.values.SUPPORTED_METHODS", {"full", "lora"})
    with pytest.raises(ProfileError, match="not supported.*supported: full, lora"):
        load_profile("tiny-full", ["method=qlora"])


# ------------------------------------------------------------------------------------------
# sizes


@pytest.mark.parametrize("text, expected", [
    ("24GiB", 24 * 2**30), ("512MiB", 512 * 2**20), ("8GB", 8 * 10**9), ("1KB", 1000),
    ("1KiB", 1024), ("100B", 100), ("1024", 1024), (2048, 2048), ("1.5GiB", 3 * 2**29),
    (" 2 gib ", 2 * 2**30), ("1TiB", 2**40), ("0", 0),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, hint", [
    ("24G", "did you mean '24GiB'"), ("lots", "e.g. '24GiB'"), ("-1GiB", "e.g."),
    ("12 gigs", "units:"), ("", "e.g."), (True, "e.g."), (-5, "e.g."), ("5MB/s", "e.g."),
    ("3 MiBs", "did you mean 'MiB'"),
])
def test_parse_size_errors(text, hint):
    with pytest.raises(SizeError) as info:
        parse_size(text)
    assert isinstance(info.value, ValueError) and hint in info.value.hint


# ------------------------------------------------------------------------------------------
# discovery and paths


def test_discovery_precedence(isolated, monkeypatch):
    project = isolated / "work" / "profiles"
    user = isolated / "home" / "profiles"
    write(project / "tiny-full.toml", "# fttui run --profile tiny-full\n" + TINY_MODEL)
    write(project / "only-project.toml", TINY_MODEL)
    write(user / "tiny-full.toml", TINY_MODEL)
    write(user / "tiny-lora.toml", 'extends = "tiny-full"\n')
    write(user / "only-user.toml", TINY_MODEL)
    write(user / "notes.txt", "not a profile")
    refs = {r.name: r for r in discover()}
    assert [r.name for r in discover()] == sorted(refs)
    assert refs["tiny-full"].origin == "project"
    assert refs["tiny-full"].path.resolve() == (project / "tiny-full.toml").resolve()
    assert refs["only-project"].origin == "project"
    assert refs["tiny-lora"].origin == "user" and refs["only-user"].origin == "user"
    assert "notes" not in refs
    # the user tiny-lora extends tiny-full: the project's (first in discovery) is used
    r = load_profile("tiny-lora")
    assert r.origin == "user" and r.method == "lora" and r.train.batch_size == 1
    assert load_profile("only-user").origin == "user"
    # a path to a discovered file keeps its origin
    assert load_profile(str(project / "only-project.toml")).origin == "project"


def test_discovery_in_repo_labels_bundled(monkeypatch):
    monkeypatch.chdir(ROOT)
    refs = discover()
    assert {r.name for r in refs} >= {"tiny-full", "tiny-lora"}
    assert {r.origin for r in refs} == {"bundled"}
    assert len({r.path.resolve() for r in refs}) == len(refs)
    assert load_profile("profiles/tiny-full.toml").origin == "bundled"


def test_unknown_profile_name():
    with pytest.raises(ProfileError) as info:
        load_profile("tiny-lroa")
    assert "unknown profile 'tiny-lroa'" in str(info.value)
    assert "did you mean 'tiny-lora'?" in str(info.value)
    with pytest.raises(ProfileError, match="available:.*tiny-full"):
        load_profile("zzzzzz")
    with pytest.raises(ProfileError, match="no-such.toml: profile file not found"):
        load_profile("no-such.toml")


def test_paths(isolated, monkeypatch):
    assert paths.home() == isolated / "home"
    assert paths.runs_dir() == isolated / "home" / "runs"
    assert paths.store_path() == isolated / "home" / "results.sqlite"
    assert paths.user_profiles_dir() == isolated / "home" / "profiles"
    assert (paths.bundled_profiles_dir() / "tiny-full.toml").is_file()
    monkeypatch.delenv("FTTUI_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(isolated / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(isolated / "config"))
    assert paths.home() == isolated / "data" / "fttui"
    assert paths.user_profiles_dir() == isolated / "config" / "fttui" / "profiles"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(isolated / "h"))
    assert paths.home() == isolated / "h" / ".local" / "share" / "fttui"
    assert paths.user_profiles_dir() == isolated / "h" / ".config" / "fttui" / "profiles"


def test_ensure_dir_mode(isolated):
    target = isolated / "a" / "b" / "c"
    assert paths.ensure_dir(target) == target
    for folder in (isolated / "a", isolated / "a" / "b", target):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert paths.ensure_dir(target) == target  # exists: fine


# ------------------------------------------------------------------------------------------
# errors


def test_error_format_and_pickle():
    err = ProfileError("profiles/x.toml", "train.batch_sise", "unknown key",
                       "did you mean 'batch_size'?")
    assert str(err) == "profiles/x.toml: train.batch_sise: unknown key (did you mean 'batch_size'?)"
    assert isinstance(err, FttuiError) and err.exit_code == 2
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err) and copy.key == "train.batch_sise"
    assert str(ProfileError(None, None, "unknown profile 'x'\nsecond line")) == (
        "unknown profile 'x' second line")
    data = DataError("d.jsonl", "line 3: not JSON", "one JSON object per line")
    assert str(data) == "d.jsonl: line 3: not JSON (one JSON object per line)"
    assert str(pickle.loads(pickle.dumps(data))) == str(data)
    assert isinstance(data, FttuiError) and data.exit_code == 2
