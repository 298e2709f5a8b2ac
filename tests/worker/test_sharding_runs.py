"""Sharding checks that need no launch: a sharding that is not the one asked for stops the run
with one line; FSDP needs a process group; FSDP offload is refused on CPU ranks.

The sharding runs themselves (issue 15), each once: ZeRO-2 and FSDP save and resume
(test_resume_shardings.py, which also reads the stage back from the engine); ZeRO-3 and FSDP over
two gloo ranks against DDP, each rank holding half of the parameters
(test_partitioned_build.py); ZeRO-3's optimizer states read from each rank's tensors
(test_partitioned_build.py); every sharding's per-rank bytes, read from the tensors, against the
estimate (test_estimate_sharding.py).
"""

from __future__ import annotations

import pytest

from fttui.core.base.errors import ConfigError
from fttui.worker.sharding import check_sharding

from .conftest import make_profile, read_events, run_worker, write_run_dir


def test_a_sharding_that_is_not_the_one_asked_stops_the_run():
    check_sharding("fsdp", {"ran": "fsdp"})
    with pytest.raises(ConfigError) as ei:
        check_sharding("fsdp", {"ran": "none", "distributed_type": "MULTI_CPU", "wrapper": "DistributedDataParallel"})
    text = str(ei.value)
    assert "\n" not in text and "'fsdp' was asked for but 'none' runs" in text
    assert "MULTI_CPU" in text and "DistributedDataParallel" in text


def test_fsdp_needs_a_process_group(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"method": "full", "sharding": "fsdp"}))
    res = run_worker(rd)
    assert res.returncode == 2
    (err,) = read_events(rd)
    assert "torchrun" in err["message"]


def test_fsdp_offload_is_refused_on_cpu_ranks(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"method": "full", "sharding": "fsdp-offload"}))
    res = run_worker(rd, torchrun_nproc=1, timeout=180)
    assert res.returncode != 0  # torchrun reports a failed rank as 1; the worker itself exits 2
    (err,) = read_events(rd)
    assert err["event"] == "error" and err["kind"] == "error" and "needs CUDA GPUs" in err["message"]
    assert "exited with code 2" in res.stderr or "exitcode  : 2" in res.stderr, res.stderr[-1500:]
