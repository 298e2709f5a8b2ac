"""A command's own sources without fttui's callback (issue 42): Lightning's printed bar
(`lightningbar`), merged with the TensorBoard files it writes (`cmdsources`: one source gives the
steps, the file's loss wins), and the row's `sources` figure.

The bar lines are drawn by tqdm with Lightning's own `BAR_FORMAT` and number format, in the order
Lightning's `TQDMProgressBar` draws them (checked against a real fit's output: the sanity check
bar, each batch drawn twice, the count first, then the postfix; the validation bar; the reset to
0 before the next epoch's description; the "stopped" line after the last draw)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from fttui.core.base.event_records import EndEvent, StepEvent
from fttui.core.results.columns import figure_sources
from fttui.core.run.supervising.cmdsources import SOURCE_TENSORBOARD, CommandSources
from fttui.core.run.supervising.lightningbar import LightningBarParser
from fttui.core.run.supervising.logparse import SOURCE_LOG
from fttui.core.run.supervising.tbfollow import LossPoint, TbFollower

tqdm = pytest.importorskip("tqdm", reason="SKIPPED LOUDLY: tqdm (a transformers dependency) is not installed").tqdm


def _bar(desc: str, n: int, total: int | None, postfix: dict[str, float] | None = None) -> str:
    """One drawing of a bar in Lightning's format (the tests that draw it skip without lightning)."""
    tqdm_progress = pytest.importorskip(
        "lightning.pytorch.callbacks.progress.tqdm_progress", reason="SKIPPED LOUDLY: lightning is not installed"
    )
    fmt = tqdm_progress.Tqdm.format_num
    post = ", ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in (postfix or {}).items())
    return tqdm.format_meter(n, total, 0.5, prefix=desc, postfix=post or None,
                             bar_format=tqdm_progress.TQDMProgressBar.BAR_FORMAT, ncols=100) + "\r"


def _fit(batches: list[int], seed: int = 0, val: int = 2, stop: str = "max_steps") -> tuple[list[str], list[float]]:
    """The segments a fit of ``batches`` per epoch prints, and each step's logged train_loss."""
    rng = random.Random(seed)
    segs = [_bar("Sanity Checking DataLoader 0", k, val) for k in range(val + 1)]
    losses: list[float] = []
    post: dict[str, float] = {}
    for e, nb in enumerate(batches):
        desc = f"Epoch {e}"
        segs.append(_bar(desc, 0, nb, {"v_num": 0, **post}))
        for n in range(1, nb + 1):
            segs.append(_bar(desc, n, nb, {"v_num": 0, **post}))
            loss = rng.uniform(0.01, 9.0)
            losses.append(loss)
            post = {"train_loss": loss}
            segs.append(_bar(desc, n, nb, {"v_num": 0, **post}))
        segs += [_bar("Validation DataLoader 0", k, val) for k in range(val + 1)]
        segs += [_bar(desc, nb, nb, {"v_num": 0, **post}), _bar(desc, 0, nb, {"v_num": 0, **post})]
    total = sum(batches) if stop == "max_steps" else len(batches)
    segs[-2] = segs[-2].rstrip("\r") + f"`Trainer.fit` stopped: `{stop}={total}` reached.\n"
    return segs, losses


def _steps(events) -> list[StepEvent]:
    return [e for e in events if isinstance(e, StepEvent)]


def _feed(parser, segs: list[str]) -> list:
    out = []
    for i, s in enumerate(segs):
        out += parser.feed(s, 100.0 + i)
    return out + parser.finish(100.0 + len(segs))


@pytest.mark.parametrize("stop", ["max_steps", "max_epochs"])
def test_lightnings_bar_gives_cumulative_steps_their_printed_loss_and_the_total(stop):
    batches = [7, 7, 3]
    segs, losses = _fit(batches, stop=stop)
    steps = _steps(_feed(LightningBarParser(), segs))
    assert [e.step for e in steps] == list(range(1, sum(batches) + 1))  # no validation, sanity or reset step
    assert [e.loss for e in steps] == pytest.approx(losses, rel=5e-3)  # printed to 3 significant digits
    assert [e.total_steps for e in steps] == [None] * (len(steps) - 1) + [sum(batches)]
    assert {e.source for e in steps} == {SOURCE_LOG} and {e.rank for e in steps} == {0}
    assert steps[-1].epoch == pytest.approx(len(batches))
    times = [e.train_time for e in steps]
    assert times == sorted(times) and times[0] > 0


def test_a_bar_without_a_length_and_without_a_logged_loss():
    segs = [_bar("Epoch 0", n, None, {"v_num": 0}) for n in range(0, 5)]
    steps = _steps(_feed(LightningBarParser(), segs))
    assert [e.step for e in steps] == [1, 2, 3, 4] and {e.loss for e in steps} == {None}
    assert {e.total_steps for e in steps} == {None}


def test_other_bars_are_not_lightnings_training():
    segs = [_bar("Map", n, 9) for n in range(10)] + [_bar("Validation DataLoader 0", n, 3) for n in range(4)]
    assert _feed(LightningBarParser(), segs) == []


class _FakeFollower(TbFollower):
    """A follower whose file holds the points a test gives, released step by step."""

    def __init__(self, points: list[LossPoint]) -> None:
        super().__init__(Path("."), since=0.0)
        self.points, self.upto = points, 0

    def poll(self, now: float, scan: bool = True, force: bool = False) -> list[LossPoint]:
        new = [p for p in self.points if p.step <= self.upto] if not force else list(self.points)
        self.points = [p for p in self.points if p not in new]
        return new


def test_the_event_files_loss_wins_over_the_printed_one_and_the_bar_keeps_the_steps():
    batches = [6, 6]
    segs, losses = _fit(batches)
    exact = [LossPoint(i + 1, time.time(), v, "train_loss") for i, v in enumerate(losses)]
    tb = _FakeFollower(exact)
    src = CommandSources(tb)
    events = []
    for i, s in enumerate(segs):
        tb.upto = i // 4  # the file lags the bar
        events += src.feed(s, 100.0 + i)
    events += src.finish(200.0)
    steps = _steps(events)
    assert [e.step for e in steps] == list(range(1, sum(batches) + 1))
    assert {e.source for e in steps} == {SOURCE_LOG}
    from_file = [e for e in steps if e.loss_source == SOURCE_TENSORBOARD]
    assert from_file and steps[-1] in from_file  # the last step's loss: read at the end
    for e in from_file:
        assert e.loss == losses[e.step - 1]  # exact
    assert figure_sources(events) == "steps=log loss=tensorboard"


def test_without_a_bar_the_event_file_gives_the_steps_and_the_stopped_line_the_total():
    n = 9
    start = time.time()
    points = [LossPoint(i, start + i, 1.0 / i, "train_loss") for i in range(1, n + 1)]
    tb = _FakeFollower(points)
    src = CommandSources(tb)
    events = []
    for i in range(1, n + 1):
        tb.upto = i
        events += src.poll(start + i)
    events += src.feed(f"`Trainer.fit` stopped: `max_steps={n}` reached.\n", start + n + 1)
    events += src.finish(start + n + 2)
    steps = _steps(events)
    assert [e.step for e in steps] == list(range(1, n + 1))
    assert [e.loss for e in steps] == [p.loss for p in points]
    assert [e.t for e in steps] == [p.wall_time for p in points]  # the writer's own time
    assert steps[-1].total_steps == n and {e.source for e in steps} == {SOURCE_TENSORBOARD}
    assert figure_sources(events) == "steps=tensorboard loss=tensorboard"


def test_one_source_gives_the_steps_never_two():
    segs = [_bar("", n, 5) for n in range(6)]  # a Trainer-style bar without a description
    points = [LossPoint(i, time.time(), float(i), "loss") for i in range(1, 40)]
    tb = _FakeFollower(points)
    src = CommandSources(tb)
    events = []
    for i, s in enumerate(segs):
        tb.upto = i
        events += src.feed(s, 100.0 + i) + src.poll(100.0 + i)
    events += src.finish(200.0)
    steps = _steps(events)
    assert [e.step for e in steps] == [1, 2, 3, 4, 5] and {e.source for e in steps} == {SOURCE_LOG}
    assert steps[-1].total_steps == 5


def test_the_rows_sources_name_each_figures_source():
    events = [
        StepEvent(step=1, samples=4, tokens=40, loss=2.0, rank=0, source="report"),
        StepEvent(step=1, samples=4, tokens=40, loss=2.0, rank=1, source="report"),
        EndEvent(step=1, samples=4, rank=0, source="report"),
    ]
    assert figure_sources(events) == "steps=report loss=report samples=report tokens=report"
    log = [StepEvent(step=3, rank=0, source="log"), EndEvent(step=3, samples=12, rank=0, source="log")]
    assert figure_sources(log) == "steps=log samples=log"
    assert figure_sources([EndEvent(step=None, rank=0, source="log")]) is None


def _torchtune_output(losses: list[float], per_epoch: int) -> list[str]:
    """What a torchtune recipe's bar writes: tqdm over one epoch's steps, updated after each
    optimizer step, then described ``f"{epoch + 1}|{global_step}|Loss: {loss}"`` (as its recipes do)."""
    import io

    from fttui.core.run.supervising.logparse import split_segments

    buf = io.StringIO()
    step = 0
    for epoch in range(len(losses) // per_epoch):
        pbar = tqdm(total=per_epoch, file=buf, mininterval=0, miniters=1)
        for _ in range(per_epoch):
            step += 1
            pbar.update(1)
            pbar.set_description(f"{epoch + 1}|{step}|Loss: {losses[step - 1]}")
        pbar.close()
    segs, rest = split_segments(buf.getvalue().encode())
    return [s.decode() for s in segs] + ([rest.decode()] if rest else [])


def test_torchtunes_bar_gives_the_global_step_and_its_loss():
    rng = random.Random(3)
    losses = [rng.uniform(0.5, 3.0) for _ in range(12)]
    segs = _torchtune_output(losses, per_epoch=6)
    src = CommandSources()
    events = []
    for i, s in enumerate(segs):
        events += src.feed(s, 100.0 + i)
    events += src.finish(200.0)
    steps = _steps(events)
    assert [e.step for e in steps] == list(range(1, 13))  # over both epochs
    assert [e.loss for e in steps] == losses  # printed in full
    assert figure_sources(events) == "steps=log loss=log"


def test_litgpts_lines_give_the_optimizer_steps_their_loss_and_evaluations():
    rng = random.Random(4)
    accum, iters = 2, 12
    lines, want = [], {}
    for it in range(1, iters + 1):
        step = it // accum
        loss = round(rng.uniform(0.5, 3.0), 3)
        stepped = it % accum == 0
        if stepped:
            want[step] = loss
        lines.append(f"Epoch 1 | iter {it} step {step} | loss train: {loss:.3f}, val: n/a | iter time: 120.50 ms"
                     f"{' (step)' if stepped else ''}\n")
        if it == 8:
            lines.append("Validating ...\n")
            lines.append("iter 8: val loss 2.1234, val time: 850.00 ms\n")
    src = CommandSources()
    events = []
    for i, s in enumerate(lines):
        events += src.feed(s, 100.0 + i)
    events += src.finish(200.0)
    steps = _steps(events)
    assert [e.step for e in steps] == sorted(want)
    assert [e.loss for e in steps] == [want[s] for s in sorted(want)]
    evals = [e for e in events if e.event == "eval"]
    assert [(e.step, e.eval_loss) for e in evals] == [(8 // accum, 2.1234)]
