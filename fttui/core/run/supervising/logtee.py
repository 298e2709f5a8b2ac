"""The training's log writer: runs the training command, writes its output to ``train.log`` with
secrets masked, and records how it exited in ``exit.json``.

The supervisor starts this process as the leader of the training's own process group::

    python -m fttui.core.run.supervising.logtee RUN_DIR -- ARGV...

It is part of the training, not of the supervisor: when the supervisor dies (``kill -9``, an
out-of-memory kill, a reboot of nothing but it), the training keeps its output pipe, its log keeps
growing and ``exit.json`` still says how it ended, so the next fttui command that looks can write
the run's row (:mod:`fttui.core.run.supervising.recover`). Cancel still reaches it: a signal to the group
stops the training; this process outlives the signal only to drain the last lines and record the
exit.

A command run (``fttui run -- CMD``, :mod:`fttui.core.run.launching.command`) adds two options before
``--``: ``--parse`` reads the command's own sources into step events (the Trainer's printed progress
bar and log dicts, Lightning's bar, litgpt's and torchtune's lines, the TensorBoard event files it
writes under its working folder: :mod:`fttui.core.run.supervising.cmdsources`) until fttui's
callback announces itself in the run directory
(``callback.json``: its events are then the run's), and ``--as-limit BYTES`` caps the address space
(RLIMIT_AS) of the command and every process it starts. ``--report-fd FD`` (from the supervisor)
is where a failed write is reported (:class:`Reporter`): a full disk stops the log, never the
pump, so the training never blocks on its output. ``--cgroup PATH`` (from the supervisor, where
the run has a cgroup: :mod:`fttui.core.run.processes.cgroup`) is joined before the training starts; when the
supervisor died, this process ends what is left in it once the training exited. Output is read as it comes, split at
newlines and carriage returns (a progress bar redraws with ``\r``), and written unchanged.

``exit.json``: ``{"returncode": int, "t": float, "pid": int}`` with ``returncode`` as
:mod:`subprocess` reports it (negative = killed by that signal). This process exits with the
training's code (128 + signal number when it was killed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fttui.core.base.redact import Redactor, split_long
from fttui.core.run.files.events import write_event
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.runfiles import ExitFile
from fttui.core.run.processes.guard import write_error
from fttui.core.run.processes.proctree import group_members
from fttui.core.run.supervising.logparse import split_segments

#: Written in the run directory by fttui's Trainer callback (fttui.integrations.hf) when it
#: starts reporting: the output's progress is then not read any more.
CALLBACK_MARK = "callback.json"

#: A line without an end longer than this is written in pieces (cut by redact.split_long).
LONG_LINE = 65536
#: After the training exits, how long its last output may take to arrive (a process it started
#: may still hold the pipe; its output after that is not the training's).
DRAIN_S = 3.0
#: How long processes left in the group get between SIGTERM and SIGKILL, when no supervisor is
#: there to reap them.
REAP_GRACE_S = 5.0
#: Seconds between two reads of the command's TensorBoard event files
POLL_S = 1.0


class Reporter:
    """Tells the supervisor, once, that a write failed (``--report-fd``: a pipe it reads): one
    JSON line ``{"error": "disk full writing train.log", "t": ...}``. Without the supervisor (or
    the option) it says nothing; the training goes on and its output is drained regardless."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd, self.sent = fd, False

    def write_failed(self, what: str, e: BaseException) -> None:
        if self.sent:
            return
        self.sent = True
        if self.fd is None:
            return
        import json

        try:
            os.write(self.fd, (json.dumps({"error": write_error(what, e), "t": time.time()}) + "\n").encode())
        except OSError:
            pass


class _LogEvents:
    """The command's own sources (its output, the TensorBoard event files it writes under its
    working folder: :mod:`fttui.core.run.supervising.cmdsources`) and where their events go;
    silent once the run's callback writes events itself, and never fatal to the log. The output
    pump feeds it; a poller thread reads the event files while the output is quiet."""

    def __init__(self, rd: RunDir, report: Reporter | None = None, root: Path | None = None) -> None:
        from fttui.core.run.supervising.cmdsources import CommandSources
        from fttui.core.run.supervising.tbfollow import TbFollower

        tb = TbFollower(root or Path.cwd(), since=time.time()) if os.environ.get("FTTUI_TB", "1") != "0" else None
        self.rd, self.parser, self.off = rd, CommandSources(tb), False
        self.lock = threading.Lock()
        self.report = report or Reporter()

    def _write(self, events: list) -> None:
        if not events or self.off:
            return
        if (self.rd.path / CALLBACK_MARK).exists():  # fttui's callback reports this run
            self.off = True
            return
        for ev in events:
            try:
                write_event(self.rd.events_path, ev, sparse=True)
            except OSError as e:
                self.report.write_failed("events.jsonl", e)
                self.off = True
                return

    def feed(self, segment: bytes) -> None:
        if self.off:
            return
        with self.lock:
            try:
                self._write(self.parser.feed(segment.decode("utf-8", "replace"), time.time()))
            except Exception as e:  # the log matters more than its events
                self._stop("the output", e)

    def _stop(self, what: str, e: Exception) -> None:
        """Reading progress is given up, said once on the supervisor's stderr (its log): the
        command's own output goes on being copied."""
        self.off = True
        print(f"fttui: reading progress from {what} stopped: {e!r}", file=sys.stderr)

    def poll(self) -> None:
        if self.off:
            return
        if (self.rd.path / CALLBACK_MARK).exists():  # no event file is looked for once the callback reports
            self.off = True
            return
        with self.lock:
            try:
                self._write(self.parser.poll(time.time()))
            except Exception as e:
                self._stop("the event files", e)

    def finish(self) -> None:
        if not self.off:
            with self.lock:
                try:
                    self._write(self.parser.finish(time.time()))
                except Exception as e:
                    self._stop("the output's last lines", e)


def _poll_events(events: _LogEvents, done: threading.Event) -> None:
    """Read the command's event files every :data:`POLL_S` seconds until ``done``."""
    while not done.wait(POLL_S):
        events.poll()


def _pump(pipe, log, redact: Redactor, events: _LogEvents | None = None, report: Reporter | None = None) -> None:
    """Copy the training's output to the log until its end. A write that fails (disk full) is
    reported once and the output is drained from then on without being written: the training
    never blocks on a full pipe of fttui's."""
    fd = pipe.fileno()
    rest = b""
    report = report or Reporter()

    def write(data: bytes) -> None:
        nonlocal log
        if log is None:
            return
        try:
            log.write(redact(data))
        except (OSError, ValueError) as e:
            log = None
            report.write_failed("train.log", e)

    while True:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        except OSError:
            break
        if not chunk:
            break
        segments, rest = split_segments(rest + chunk)
        if len(rest) > LONG_LINE:  # a very long line without an end: write most of it now,
            head, rest = split_long(rest)  # cut where no secret can be split in two
            segments.append(head)
        for seg in segments:
            write(seg)
            if events is not None:
                events.feed(seg)
    if rest:
        write(rest)
        if events is not None:
            events.feed(rest)


def _reap_group() -> None:
    """Stop what the training left behind in its group (SIGTERM, then SIGKILL)."""
    import psutil

    left = group_members(os.getpgid(0), exclude=os.getpid())
    for p in left:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=REAP_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def _limit_as(limit: int | None):
    """A ``preexec_fn`` that caps the child's address space at ``limit`` bytes (None: no cap)."""
    if not limit:
        return None

    def apply() -> None:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    return apply


def _join_cgroup(path: Path | None, log) -> None:
    """Into the run's cgroup before the training starts: all it starts is born there."""
    if path is None:
        return
    from fttui.core.run.processes import cgroup

    try:
        cgroup.join(path)
    except OSError as e:
        try:
            log.write(
                f"fttui: the run's cgroup could not be joined ({e.strerror or e}); its processes are "
                f"tracked through the supervisor\n".encode()
            )
        except OSError:
            pass


def _end_cgroup(path: Path | None) -> None:
    """The supervisor is gone: this process leaves the run's cgroup and ends what is left in it."""
    if path is None:
        return
    from fttui.core.run.processes import cgroup

    try:
        cgroup.leave(path)
    except OSError:
        return
    cgroup.kill(path)


def run(
    rd: RunDir,
    argv: list[str],
    *,
    parse: bool = False,
    as_limit: int | None = None,
    report_fd: int | None = None,
    cgroup_path: Path | None = None,
) -> int:
    parent = os.getppid()
    # Signals to the group are for the training: this process stays to drain and record. A
    # Python handler (not SIG_IGN) so that the training, after exec, gets the default action.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    log = os.fdopen(os.open(rd.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)
    _join_cgroup(cgroup_path, log)
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            preexec_fn=_limit_as(as_limit),
        )
    except OSError as e:
        try:
            log.write(f"fttui: could not start {argv[0]}: {e}\n".encode())
        except OSError:
            pass
        rd.write_exit(ExitFile(returncode=127, t=time.time(), pid=None, error=f"could not start {argv[0]}: {e}"))
        return 127
    report = Reporter(report_fd)
    events = _LogEvents(rd, report) if parse else None
    pump = threading.Thread(
        target=_pump, args=(child.stdout, log, Redactor(dict(os.environ)), events, report), daemon=True
    )
    pump.start()
    polled = threading.Event()
    if events is not None:
        threading.Thread(target=_poll_events, args=(events, polled), daemon=True).start()
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
    pump.join(timeout=DRAIN_S)
    polled.set()
    if events is not None:
        events.finish()
    try:
        rd.write_exit(ExitFile(returncode=rc, t=time.time(), pid=child.pid))
    except OSError as e:
        report.write_failed("exit.json", e)
    if os.getppid() != parent:  # the supervisor is gone: nobody else will reap the group
        _reap_group()
        _end_cgroup(cgroup_path)
    return rc if rc >= 0 else 128 - rc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = (
        "usage: python -m fttui.core.run.supervising.logtee RUN_DIR [--parse] [--as-limit BYTES] [--report-fd FD] "
        "[--cgroup PATH] -- ARGV..."
    )
    if "--" not in args or args.index("--") < 1 or args.index("--") == len(args) - 1:
        print(usage, file=sys.stderr)
        return 2
    sep = args.index("--")
    opts, parse, as_limit, report_fd, cg = args[1:sep], False, None, None, None
    while opts:
        opt = opts.pop(0)
        if opt == "--parse":
            parse = True
        elif opt == "--as-limit" and opts and opts[0].isdigit():
            as_limit = int(opts.pop(0))
        elif opt == "--report-fd" and opts and opts[0].isdigit():
            report_fd = int(opts.pop(0))
        elif opt == "--cgroup" and opts:
            cg = Path(opts.pop(0))
        else:
            print(usage, file=sys.stderr)
            return 2
    os.umask(0o077)
    return run(
        RunDir(Path(args[0])), args[sep + 1 :], parse=parse, as_limit=as_limit, report_fd=report_fd, cgroup_path=cg
    )


if __name__ == "__main__":
    sys.exit(main())
