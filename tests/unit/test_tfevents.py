"""fttui's own reader of TensorBoard event files (issue 42, `fttui.core.run.files.tfevents`, stdlib
only) against files written by the real writers (torch's `SummaryWriter`: the simple value and
the tensor form; TensorBoard's own reader is the reference), read as they grow, and the follower
(`tbfollow`) that finds a command's files, keeps its loss tags and skips earlier runs' files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fttui.core.run.files.tfevents import TfEventsFile, decode_event, masked_crc32c, split_records
from fttui.core.run.supervising.tbfollow import LOSS_TAGS, TbFollower

SummaryWriter = pytest.importorskip(
    "torch.utils.tensorboard", reason="SKIPPED LOUDLY: torch's SummaryWriter (torch + tensorboard) is not installed"
).SummaryWriter


def _write(folder: Path, values: list[tuple[str, float, int]], new_style: bool = False) -> Path:
    w = SummaryWriter(str(folder))
    for tag, value, step in values:
        w.add_scalar(tag, value, step, new_style=new_style)
    w.close()
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def _reference(path: Path) -> list[tuple[int, str, float]]:
    """What TensorBoard's own loader reads from the file: (step, tag, value) of each scalar."""
    loader = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    from tensorboard.util import tensor_util

    out = []
    for ev in loader.EventFileLoader(str(path)).Load():
        for v in ev.summary.value:
            if v.HasField("tensor"):
                out.append((ev.step, v.tag, float(tensor_util.make_ndarray(v.tensor).item())))
            elif v.HasField("simple_value"):
                out.append((ev.step, v.tag, v.simple_value))
    return out


@pytest.mark.parametrize("new_style", [False, True], ids=["simple_value", "tensor"])
def test_scalars_read_as_tensorboard_reads_them(tmp_path, new_style):
    values = [("train_loss", 2.5 - 0.1 * i, i) for i in range(1, 8)] + [("lr", 1e-3, 7), ("train_loss", -3.25, 2**40)]
    path = _write(tmp_path, values, new_style=new_style)
    mine = [(s.step, tag, v) for s in TfEventsFile(path).read() for tag, v in s.values.items()]
    ref = _reference(path)
    assert len(mine) == len(ref) == len(values)
    for (step, tag, v), (rstep, rtag, rv) in zip(mine, ref):
        assert (step, tag) == (rstep, rtag) and v == pytest.approx(rv, rel=1e-7)
    walls = [s.wall_time for s in TfEventsFile(path).read()]
    assert all(w is not None and abs(w - time.time()) < 3600 for w in walls)


def test_a_file_read_as_it_grows_and_a_record_cut_short_waits(tmp_path):
    path = _write(tmp_path, [("loss", float(i), i) for i in range(1, 6)])
    data = path.read_bytes()
    records, end, ok = split_records(data)
    assert ok and end == len(data) and len(records) == 6  # the file's version record and 5 scalars
    grow = tmp_path / "grow" / path.name
    grow.parent.mkdir()
    cut = len(data) - 7  # the last record without its last bytes
    grow.write_bytes(data[:cut])
    f = TfEventsFile(grow)
    first = [s.step for s in f.read()]
    assert first == [1, 2, 3, 4]
    with open(grow, "ab") as out:
        out.write(data[cut:])
    assert [s.step for s in f.read()] == [5] and f.read() == []


def test_a_file_that_is_not_tfrecords_is_read_no_further(tmp_path):
    bad = tmp_path / "events.out.tfevents.1.host"
    bad.write_bytes(b"this is not a TFRecord file at all, just text\n" * 3)
    f = TfEventsFile(bad)
    assert f.read() == [] and f.broken
    assert decode_event(b"\xff\xff\xff") is None  # not a protobuf message


def test_the_length_crc_is_tfrecords_masked_crc32c(tmp_path):
    data = _write(tmp_path, [("loss", 1.0, 1)]).read_bytes()
    assert int.from_bytes(data[8:12], "little") == masked_crc32c(data[:8])
    n = int.from_bytes(data[:8], "little")
    assert int.from_bytes(data[12 + n : 16 + n], "little") == masked_crc32c(data[12 : 12 + n])


def test_the_follower_finds_new_files_keeps_the_loss_tag_and_skips_older_runs(tmp_path):
    old = tmp_path / "runs" / "old"
    _write(old, [("loss", 9.0, 1)])
    past = time.time() - 3600
    for p in old.iterdir():
        os.utime(p, (past, past))
    start = time.time()
    follower = TbFollower(tmp_path, since=start)
    assert follower.poll(start) == []
    tag = LOSS_TAGS[2]
    _write(tmp_path / "runs" / "new", [(tag, 0.5 * i, i) for i in range(1, 4)] + [("lr", 1.0, 3)])
    assert follower.poll(start + 10) == []  # the first losses wait one read for a Lightning hparams.yaml
    points = follower.poll(start + 11)
    assert [(p.step, p.loss, p.tag) for p in points] == [(i, 0.5 * i, tag) for i in range(1, 4)]
    assert follower.poll(start + 20) == []


def test_lightnings_logger_counts_steps_from_zero(tmp_path):
    """Lightning's TensorBoardLogger (its hparams.yaml beside the file) logs the step's loss at the
    number of steps done before it: step 0 is the first step."""
    folder = tmp_path / "lightning_logs" / "version_0"
    _write(folder, [("train_loss", 1.0 + i, i) for i in range(3)] + [("epoch", 0.0, 2)])
    follower = TbFollower(tmp_path, since=time.time() - 60)
    assert follower.poll(time.time()) == []  # read before Lightning wrote its hparams.yaml: waits
    (folder / "hparams.yaml").write_text("{}\n")  # written right after its first flush
    points = follower.poll(time.time())
    assert [(p.step, p.loss) for p in points] == [(i + 1, 1.0 + i) for i in range(3)]


def test_the_look_is_breadth_first_so_a_deep_tree_does_not_hide_a_loggers_folder(tmp_path, monkeypatch):
    from fttui.core.run.supervising import tbfollow

    for i in range(6):  # "a_data" sorts before "z_logs": depth first would spend the budget there
        for j in range(6):
            (tmp_path / "a_data" / f"d{i}" / f"e{j}").mkdir(parents=True)
    monkeypatch.setattr(tbfollow, "MAX_DIRS", 12)
    start = time.time()
    _write(tmp_path / "z_logs" / "run", [("train_loss", 1.5, 1)])
    points = TbFollower(tmp_path, since=start - 5).poll(start, force=True)
    assert [(p.step, p.loss) for p in points] == [(1, 1.5)]
