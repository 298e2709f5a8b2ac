"""Words shown to a user say only what is known (issue 27.5): no "None steps, world size None"
for a command without a Trainer or a run that ran out of memory while importing, no "on ?" in the
app's summary, "an axolotl setting", and `profiles --from` suggesting the path it was given."""

from __future__ import annotations

from fttui.cli.live import training_line
from fttui.core.profiles.foreign import profile_toml, read_config
from fttui.core.run.state import RunState
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
