"""Ctrl-C while a run is followed (fttui.cli.live.CtrlC, issue 36.6): the cancel the first asks
for is sent once its window has passed; a second Ctrl-C before then withdraws it (never sent), one
while or after it is sent detaches saying the run stops. The real processes: e2e/test_cli_signals.py."""

from __future__ import annotations

import signal

import pytest

from fttui.cli.ctrl_c import CtrlC


class FakeRun:
    def __init__(self, during=None) -> None:
        self.cancels, self.during = 0, during

    def cancel(self) -> None:
        self.cancels += 1
        if self.during is not None:
            self.during()  # a Ctrl-C that comes while the cancel is written


@pytest.fixture(autouse=True)
def _cancel_is_the_fake_runs(monkeypatch):
    """CtrlC sends the cancel through the run's executor (fttui.core.run.control.executors): here
    the fake run is its own."""
    monkeypatch.setattr("fttui.core.run.control.executors.executor_for", lambda rd: rd)


def test_a_second_ctrl_c_within_the_window_withdraws_the_cancel():
    ctrl, rd = CtrlC(True, window=60), FakeRun()
    ctrl.on_int(signal.SIGINT, None)
    ctrl.tick(rd)
    assert ctrl.state == "pending" and rd.cancels == 0
    with pytest.raises(KeyboardInterrupt):
        ctrl.on_int(signal.SIGINT, None)
    ctrl.tick(rd)
    assert rd.cancels == 0 and "cancel withdrawn" in ctrl.detached_line("r1") and "goes on" in ctrl.detached_line("r1")


def test_a_second_ctrl_c_after_the_cancel_was_sent_cannot_withdraw_it():
    ctrl, rd = CtrlC(True, window=0), FakeRun()
    ctrl.on_int(signal.SIGINT, None)
    ctrl.tick(rd)
    assert ctrl.state == "sent" and rd.cancels == 1
    with pytest.raises(KeyboardInterrupt):
        ctrl.on_int(signal.SIGINT, None)
    assert "cannot be withdrawn" in ctrl.detached_line("r1") and "goes on" not in ctrl.detached_line("r1")


def test_a_ctrl_c_while_the_cancel_is_written_detaches_once_it_is():
    ctrl = CtrlC(True, window=0)
    rd = FakeRun(during=lambda: ctrl.on_int(signal.SIGINT, None))  # must not raise inside the write
    ctrl.on_int(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        ctrl.tick(rd)
    assert rd.cancels == 1 and ctrl.state == "sent" and "cannot be withdrawn" in ctrl.detached_line("r1")


def test_attach_detaches_on_the_first_ctrl_c_and_never_cancels():
    ctrl, rd = CtrlC(False, window=0), FakeRun()
    with pytest.raises(KeyboardInterrupt):
        ctrl.on_int(signal.SIGINT, None)
    ctrl.tick(rd)
    assert rd.cancels == 0 and ctrl.detached_line("r1") == "fttui: detached; the run goes on: fttui attach r1"
