"""Words shown to a user say only what is known (issue 27.5): no "None steps, world size None"
for a command without a Trainer or a run that ran out of memory while importing, no "on ?" in the
app's summary, "an axolotl setting", and `profiles --from` suggesting the path it was given."""

from __future__ import annotations

from fttui.cli.live import training_line
from fttui.core.profiles.foreign import profile_toml, read_config
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.state import RunState
from fttui.tui.run_panels import summary_title


def _snap(*events):
    st = RunState()
    st.apply_all([{"event": "launch", "t": 1.0, "rank": -1}, *events])
    return st.snapshot()


def test_training_line_says_only_what_a_start_event_told():
    # a command that printed only a progress bar: steps known, parameters and world size not
    logged = _snap({"event": "step", "t": 2.0, "step": 1, "total_steps": 7, "source": "log"})
    assert training_line(logged) == "training: 7 steps"
    # nothing reported (no Trainer; an OOM while importing): no line at all
    assert training_line(_snap({"event": "error", "t": 2.0, "kind": "oom", "oom_kind": "cpu"})) is None
    started = _snap({"event": "start", "t": 2.0, "rank": 0, "config": {}, "params_total": 4096,
                     "params_trainable": 1024, "total_steps": 200, "world_size": 2})
    assert training_line(started) == "training: 1,024 of 4,096 parameters trainable, 200 steps, world size 2"


def test_app_summary_title_leaves_out_what_the_row_does_not_know():
    row = {"model": "tiny-llama", "dataset": None, "steps": 20, "total_steps": 20, "wall_s": 12.0}
    assert summary_title(row) == "summary: tiny-llama, steps 20/20, wall 00:12"
    assert "?" not in summary_title({"profile": "python", "wall_s": 1.0})
    assert summary_title(row | {"dataset": "alpaca"}).startswith("summary: tiny-llama on alpaca, ")


def test_an_axolotl_setting_and_the_path_given(tmp_path, monkeypatch):
    sub = tmp_path / "examples" / "llama-3"
    sub.mkdir(parents=True)
    (sub / "lora.yml").write_text("base_model: m\nadapter: lora\nchat_template: llama3\n")
    monkeypatch.chdir(tmp_path)
    m = read_config("examples/llama-3/lora.yml")
    why = {k: w for k, _, w in m.unmapped}["chat_template"]
    assert why.startswith("an axolotl setting"), why
    first = profile_toml(m).splitlines()[0]
    assert "fttui run --from examples/llama-3/lora.yml)" in first, first


def test_host_figures_are_named_where_shown(tmp_path):
    """The live host figure is the tree's, the summary's the ranks' own peaks: each says which
    (issue 27.4)."""
    import json

    from fttui.cli.live import progress_line, summary_lines
    from fttui.core.run.files.rundir import RunDir
    from fttui.monitor import HostSnapshot

    st = RunState()
    st.apply({"event": "step", "t": 2.0, "rank": 0, "step": 1, "samples": 4, "train_time": 1.0})
    st.apply_sample(Sample(t=2.0, host=HostSnapshot(tree_rss_mb=542.0, tree_nprocs=2)))
    assert "tree RSS 542 MB" in progress_line(st.snapshot()) and "host RSS" not in progress_line(st.snapshot())
    run = tmp_path / "20260101-000000-x-0000"
    run.mkdir()
    row = {"run_id": run.name, "status": "completed", "peak_host_rss_mb": 520.0, "host_measure": "ranks",
           "peak_tree_rss_mb": 631.0, "steps": 1}
    (run / "row.json").write_text(json.dumps(row))
    text = "\n".join(summary_lines(RunDir(run)))
    assert "peak host RSS 520 MB (the ranks' own peaks, summed; tree 631 MB sampled)" in text
    (run / "row.json").write_text(json.dumps(row | {"host_measure": "processes (1 without a readable VmHWM: "
                                                                    "their sampled RSS)"}))
    text = "\n".join(summary_lines(RunDir(run)))
    assert "(each process's own peak, summed (1 without a readable VmHWM: their sampled RSS);" in text


def test_max_seq_len_past_the_model_positions(tmp_path):
    """Above max_position_embeddings: a warning before launch for a rotary model, a refusal
    for a learned position table (issue 27.7)."""
    import pytest

    from fttui.core.base.errors import ProfileError
    from fttui.core.models.positions import check_positions, position_warning
    from fttui.core.profiles import load_profile
    from fttui.core.run.launching.preflight import preflight

    ok = load_profile("tiny-lora", ["data.max_seq_len=512"])
    assert position_warning(ok) is None
    long = load_profile("tiny-lora", ["data.max_seq_len=2048"])
    words = position_warning(long)
    assert words.startswith("data.max_seq_len 2048 is above the model's max_position_embeddings 512 (llama)")
    check_positions(long, "x")  # rotary: runs, so no refusal
    # a model folder whose config.json says 256 (the YAML case: cutoff_len 2048 on a small model)
    folder = tmp_path / "small"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "vocab_size": 512, "hidden_size": 64, '
                                        '"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, '
                                        '"num_key_value_heads": 4, "max_position_embeddings": 256}')
    local = load_profile("tiny-lora", ["model.init=pretrained", f"model.name_or_path={folder}",
                                       "model.arch=llama", "data.max_seq_len=2048"])
    assert "max_position_embeddings 256" in position_warning(local)
    gpt2 = load_profile("tiny-lora", ["model.arch=gpt2", "model.arch_config.n_positions=64",
                                      "model.arch_config.n_embd=64", "model.arch_config.n_layer=2",
                                      "model.arch_config.n_head=4", "model.arch_config.vocab_size=512",
                                      "data.max_seq_len=128"])
    with pytest.raises(ProfileError, match="n_positions 64: gpt2 learns a table of absolute positions"):
        preflight(gpt2, gpu_count=(0, "no GPU"))
    assert position_warning(gpt2) is None
