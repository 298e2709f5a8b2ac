"""samples.jsonl's record (fttui.core.run.files.sample_records): the line as every sampler writes it,
read back once into a Sample, tolerant of damaged lines (issue 37)."""

from __future__ import annotations

import json

from fttui.core.run.files.sample_records import Sample, SampleTail, append_sample, read_samples
from fttui.monitor import GpuInfo, GpuSnapshot, HostSnapshot

GPU = GpuSnapshot(available=True, driver="550", cuda="12.4",
                  gpus=(GpuInfo(index=0, name="G", mem_used_mb=1000.0, util_pct=90.0, throttle=("power cap",)),),
                  visible=(0,))
HOST = HostSnapshot(ram_used_mb=9000.0, ram_total_mb=64000.0, tree_rss_mb=3000.0, tree_nprocs=3, build_nprocs=0)


def test_the_line_is_what_the_samplers_wrote_before_the_record():
    s = Sample(t=12.5, gpu=GPU, host=HOST)
    assert s.to_dict() == {"t": 12.5, "gpu": GPU.to_dict(), "host": HOST.to_dict()}
    assert list(s.to_dict()) == ["t", "gpu", "host"]
    assert Sample.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_damaged_lines_read_as_none_or_without_the_damaged_part():
    for junk in (None, "x", 3, [], {}, {"t": None}, {"t": "late"}, {"t": float("nan")}, {"t": True},
                 {"gpu": GPU.to_dict(), "host": HOST.to_dict()}):
        assert Sample.from_dict(junk) is None, junk
    assert Sample.from_dict({"t": 1, "gpu": "x", "host": 3}) == Sample(t=1.0)
    part = Sample.from_dict({"t": "2.5", "host": {"tree_rss_mb": "many", "ram_used_mb": 5}})
    assert part == Sample(t=2.5, host=HostSnapshot(ram_used_mb=5.0))
    odd = Sample.from_dict({"t": 3.0, "gpu": {"gpus": ["x", {"index": "1", "mem_used_mb": [1]}]}})
    assert odd is not None and odd.gpu is not None and odd.host is None
    assert [(g.index, g.mem_used_mb) for g in odd.gpu.gpus] == [(1, None)]


def test_one_writer_one_reader_and_the_tail(tmp_path):
    path = tmp_path / "samples.jsonl"
    assert list(read_samples(path)) == []
    tail = SampleTail(path)
    assert tail.read_new() == []
    append_sample(path, Sample(t=1.0, gpu=GPU, host=HOST))
    with open(path, "ab") as f:
        f.write(b'not json\n{"t": "x"}\n[1]\n')
    append_sample(path, Sample(t=2.0, host=HOST))
    assert [s.t for s in read_samples(path)] == [1.0, 2.0]
    assert [s.t for s in tail.read_new()] == [1.0, 2.0] and tail.corrupt == 2  # [1] and 'not json'
    with open(path, "ab") as f:
        f.write(json.dumps(Sample(t=3.0, gpu=GPU).to_dict()).encode()[:-5])  # a line being written
    assert tail.read_new() == [] and [s.t for s in read_samples(path)] == [1.0, 2.0]
    with open(path, "ab") as f:
        f.write(json.dumps(Sample(t=3.0, gpu=GPU).to_dict()).encode()[-5:] + b"\n")
    assert tail.read_new() == [Sample(t=3.0, gpu=GPU)]
    assert (path.stat().st_mode & 0o777) == 0o600
