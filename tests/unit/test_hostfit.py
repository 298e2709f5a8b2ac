"""Before launch under an offloading sharding (issue 25 part 2): the estimate's host peak, the
model load's included, against this machine's available memory and the locked-memory limit."""

from __future__ import annotations

import pytest

from fttui.cli.run_cmd import check_host
from fttui.core.base.errors import ConfigError
from fttui.core.base.units import GIB
from fttui.core.memory import estimate
from fttui.core.memory.hostfit import host_fit, pinned_bytes
from fttui.core.profiles.resolve import load_profile

OFFLOAD = load_profile("baichuan2-full-zero3", overrides=["model.init=random"])  # ZeRO-3 offload, 7B


def test_refused_close_and_fitting():
    est = estimate(OFFLOAD)
    peak = max(est.host_peak_bytes, est.host_load_peak_bytes)
    # the breakdown sums to the larger of the load and the training peaks: the load is in it
    assert est.host_peak_bytes == sum(est.host_breakdown.values()) >= est.host_load_peak_bytes
    assert 120 * GIB < peak < 136 * GIB  # what the profile's comment says it needs (>= 128 GB)
    no = host_fit(OFFLOAD, est, (peak - GIB, "MemAvailable"), None)
    assert not no.fits and "is more than the" in no.message and "MemAvailable" in no.message
    close = host_fit(OFFLOAD, est, (int(peak / 0.9), "cgroup memory.max"), None)
    assert close.fits and "90% of the" in close.warning and "cgroup memory.max" in close.warning
    roomy = host_fit(OFFLOAD, est, (4 * peak, "MemAvailable"), None)
    assert roomy.fits and roomy.warning is None


def test_pinned_memory_against_memlock():
    est = estimate(OFFLOAD)
    pinned = pinned_bytes(est, True)
    host = est.host_breakdown  # the offloaded states and the staging buffers, by hand
    assert pinned == (host["offload_master_params"] + host["offload_optimizer_states"] + host["offload_gradients"]
                      + host["offload_param_partitions"] + host["offload_pinned_buffers"])
    assert pinned_bytes(est, False) == host["offload_pinned_buffers"]
    fit = host_fit(OFFLOAD, est, (4 * est.host_peak_bytes, "MemAvailable"), 8 * 2**20)  # ulimit -l 8192
    assert fit.fits and "RLIMIT_MEMLOCK" in fit.warning and "deepspeed.pin_memory = false" in fit.warning
    assert host_fit(OFFLOAD, est, (4 * est.host_peak_bytes, "MemAvailable"), 2 * pinned).warning is None


def test_no_offload_no_verdict():
    lora = load_profile("tiny-lora")
    assert host_fit(lora, estimate(lora), (GIB, "MemAvailable"), 0) is None


def test_run_refuses_in_one_line(monkeypatch, capsys):
    import fttui.monitor.host as host

    monkeypatch.setattr(host, "host_available", lambda: (64 * GIB, "MemAvailable"))
    monkeypatch.setattr(host, "memlock_limit", lambda: None)
    with pytest.raises(ConfigError) as err:
        check_host(OFFLOAD)
    line = str(err.value)
    assert "\n" not in line and line.startswith("host memory: zero3-offload: the estimate's host peak")
    assert "64.00 GiB available here (MemAvailable)" in line
    monkeypatch.setattr(host, "host_available", lambda: (140 * GIB, "MemAvailable"))
    check_host(OFFLOAD)  # close: warned, launched
    assert "fttui: warning: host memory: zero3-offload" in capsys.readouterr().err
