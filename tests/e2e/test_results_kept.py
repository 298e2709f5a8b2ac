"""Results kept and tracked (issue 16, parts 2 and 3), end to end with the real `fttui` command.

One tiny LoRA run (held-out split, trackers TensorBoard and MLflow on a local file store, the
adapter saved at the end) is checked from every side: peft loads the adapter back onto a freshly
built base; its evaluation loss is the same in the row, the ``eval`` event, transformers' own
TensorBoard scalar and a loss computed here from the reloaded adapter on the same split; the
TensorBoard event files and the MLflow run hold fttui's row. A run cancelled after a checkpoint
resumes (``fttui run --resume``) to the step count and the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fttui.core.results.store import Store
from fttui.core.run.files.events import read_jsonl
from fttui.core.run.files.rundir import RunDir
from tests.conftest import fttui_env, run_fttui
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e
#: the tests of the one run (``kept``) share an xdist group: under xdist a module's fixture is built
#: once per worker, and this one is a training run with two trackers
ONE_RUN = pytest.mark.xdist_group("kept")

SMALL = ["--set", "data.num_samples=40", "--set", "data.max_seq_len=32", "--set", "train.batch_size=2"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = fttui_env(FTTUI_HOME=str(home), **extra)
    env.pop("FTTUI_FAKE_GPUS", None)
    env["FTTUI_NO_APP"] = "1"
    return env


def _rows(home: Path) -> dict[str, dict]:
    with Store(home / "results.sqlite") as store:
        return {r["run_id"]: r for r in store.rows(kind=None)}


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """One run: 40 samples, 8 held out, 4 steps with an evaluation after step 2 and at the end,
    the adapter saved at the end, TensorBoard and MLflow (file store) as trackers."""
    tmp = tmp_path_factory.mktemp("kept")
    home = tmp / "home"
    mlruns = tmp / "mlruns"
    env = _env(home, MLFLOW_TRACKING_URI=mlruns.as_uri(), MLFLOW_ALLOW_FILE_STORE="true",
               MLFLOW_EXPERIMENT_NAME="fttui-test")
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", *SMALL, "--set", "train.max_steps=4",
                     "--set", "data.eval_ratio=0.2", "--set", "train.eval_steps=2",
                     "--set", "train.report_to=tensorboard,mlflow", env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = _rows(home).values()
    rd = RunDir(home / "runs" / row["run_id"])
    return {"home": home, "row": row, "rd": rd, "events": read_jsonl(rd.events_path), "mlruns": mlruns}


@ONE_RUN
def test_adapter_loads_back_onto_a_fresh_base(kept):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from fttui.worker.model import load_base_model

    row, rd = kept["row"], kept["rd"]
    out = Path(row["output_dir"])
    assert out == rd.path / "output" and (out / "adapter_config.json").is_file()
    assert row["checkpoint"] is None  # train.save = "end": the adapter only, no resumable checkpoint
    saved = load_file(out / "adapter_model.safetensors")
    model = PeftModel.from_pretrained(load_base_model(rd.profile()), str(out))
    loaded = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert loaded, "no LoRA weights in the reloaded model"
    name = sorted(loaded)[0]
    key = next(k for k in saved if k.replace(".weight", "") in name)
    assert torch.equal(loaded[name].detach(), saved[key])
    # LoRA's B starts at zero: a trained adapter is not
    assert float(loaded[name].abs().max()) > 0


@ONE_RUN
def test_eval_loss_is_the_same_four_ways(kept):
    import torch
    from peft import PeftModel

    from fttui.worker.data import Collator, build_dataset, split_eval
    from fttui.worker.model import load_base_model
    from fttui.worker.tokenizer import load_tokenizer

    row, rd, events = kept["row"], kept["rd"], kept["events"]
    evals = [e for e in events if e.get("event") == "eval"]
    assert [e["step"] for e in evals] == [2, 4]  # every eval_steps, and at the end
    assert (row["eval_step"], row["eval_loss"]) == (4, evals[-1]["eval_loss"])
    # transformers' own TensorBoard scalar of the same evaluation
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (logdir,) = (rd.path / "output" / "runs").iterdir()
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("eval/loss")] == pytest.approx(
        [(e["step"], e["eval_loss"]) for e in evals], rel=1e-6)
    # computed here: the reloaded adapter on the held-out split the worker drew
    prof = rd.profile()
    d, t = prof.data, prof.train
    model = PeftModel.from_pretrained(load_base_model(prof), str(rd.path / "output")).eval()
    tok = load_tokenizer(prof.model)
    data, _ = build_dataset(d, tok, model.get_input_embeddings().num_embeddings, int(t.seed))
    _, held = split_eval(data, d.eval_ratio, int(t.seed))
    assert len(held) == 8
    collate = Collator(tok.pad_token_id, d.max_seq_len)
    losses = []
    with torch.no_grad():
        for i in range(0, len(held), t.batch_size):
            batch = collate([held[j] for j in range(i, min(i + t.batch_size, len(held)))])
            losses.append((float(model(**batch).loss), len(batch["input_ids"])))
    mine = sum(loss * n for loss, n in losses) / sum(n for _, n in losses)
    assert math.isclose(mine, row["eval_loss"], rel_tol=1e-5), (mine, row["eval_loss"])


@ONE_RUN
def test_tensorboard_holds_the_fttui_row(kept):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    row, rd, events = kept["row"], kept["rd"], kept["events"]
    assert [e["name"] for e in events if e.get("event") == "tracker" and e["logged"]] == ["tensorboard", "mlflow"]
    (logdir,) = (rd.path / "output" / "runs").iterdir()
    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    for column in ("steps", "samples", "tokens", "eval_loss", "params_trainable"):
        (point,) = acc.Scalars(f"fttui/{column}")
        assert (point.step, point.value) == (4, pytest.approx(row[column], rel=1e-6)), column
    assert "fttui/samples_per_s" in scalars and "train/loss" in scalars  # fttui's and the Trainer's figures
    text = {t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in acc.Tags()["tensors"]
            if t.startswith("fttui/")}
    logged = json.loads(text["fttui/row/text_summary"])
    assert logged["run_id"] == row["run_id"] and logged["method"] == "lora"
    assert json.loads(text["fttui/env/text_summary"])["versions"]["torch"] == row["versions"]["torch"]


@ONE_RUN
def test_mlflow_run_holds_the_fttui_row(kept, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a local file store, as the run used
    row = kept["row"]
    client = MlflowClient(tracking_uri=kept["mlruns"].as_uri())
    exp = client.get_experiment_by_name("fttui-test")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == row["run_id"]  # the Trainer's run_name is the fttui run id
    assert run.data.params["fttui/run_id"] == row["run_id"]
    assert run.data.params["fttui/method"] == "lora" and run.data.params["fttui/profile"] == "tiny-lora"
    assert run.data.metrics["fttui/steps"] == row["steps"] == 4
    assert run.data.metrics["fttui/eval_loss"] == pytest.approx(row["eval_loss"], rel=1e-6)
    assert run.data.metrics["eval_loss"] == pytest.approx(row["eval_loss"], rel=1e-6)  # the Trainer's own
    artifacts = Path(client.download_artifacts(run.info.run_id, "fttui"))
    logged = json.loads((artifacts / "row.json").read_text())
    assert logged["run_id"] == row["run_id"] and logged["eval_loss"] == row["eval_loss"]
    assert json.loads((artifacts / "env.json").read_text())["env"]["hostname"] == row["env"]["hostname"]


@pytest.mark.slow
def test_cancelled_run_resumes_to_the_uninterrupted_run(tmp_path):
    import torch
    from safetensors.torch import load_file

    home = tmp_path / "home"
    env = _env(home)
    # 80 steps, a checkpoint every 20 (4 saves)
    steps = ["--set", "train.max_steps=80", "--set", "train.save=steps", "--set", "train.save_steps=20"]
    # the uninterrupted run
    whole = run_fttui("run", "--profile", "tiny-lora", "--headless", *SMALL, *steps, env=env, timeout=300)
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]
    # the same run, cancelled (fttui cancel) once its first checkpoint is saved; its data loader
    # 0.2 s slower a batch (the worker's test hook; the batches and the weights are the same), so
    # that the cancel lands long before its end on a loaded machine (60 steps after the first
    # checkpoint: 12 s) without the run training at full CPU meanwhile
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", *SMALL, *steps,
                     env=_env(home, FTTUI_TEST_SLOW_DATA_S="0.2"), check=True)
    cut = RunDir(home / "runs" / proc.stdout.strip())
    wait_for(lambda: any(e.get("event") == "save" for e in read_jsonl(cut.events_path)), timeout=180,
             interval=0.05, what="the first checkpoint")
    assert run_fttui("cancel", cut.run_id, env=env).returncode == 0
    rows = _rows(home)
    assert rows[cut.run_id]["status"] == "cancelled"
    assert rows[cut.run_id]["steps"] < 80, "the run ended before the cancel reached it"
    saved_step = rows[cut.run_id]["checkpoint"].rsplit("-", 1)[1]
    # resume it by a prefix of its id
    res = run_fttui("run", "--resume", cut.run_id[:-2], "--headless", env=env, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = _rows(home)
    (new_id,) = set(rows) - {cut.run_id} - {r for r, row in rows.items() if row["resumed_from"] is None}
    resumed, uninterrupted = rows[new_id], next(r for r in rows.values()
                                                 if r["run_id"] not in (cut.run_id, new_id))
    assert resumed["status"] == "completed" and resumed["resumed_from"] == cut.run_id
    assert resumed["resumed_step"] == int(saved_step)
    assert resumed["steps"] == uninterrupted["steps"] == 80
    first = [e for e in read_jsonl(RunDir(home / "runs" / new_id).events_path) if e.get("event") == "step"][0]
    assert first["step"] == int(saved_step) + 1
    # the resumed run's weights are the uninterrupted run's (RNG and data order restored)
    a = load_file(Path(resumed["output_dir"]) / "adapter_model.safetensors")
    b = load_file(Path(uninterrupted["output_dir"]) / "adapter_model.safetensors")
    assert set(a) == set(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
