"""`fttui watch --pid PID`: the resource panels of a process fttui did not start."""

from __future__ import annotations

import os
import signal
import sys
import time

from fttui.cli.common import is_tty
from fttui.core.base import fmt


def resources_line(snap, pid: int) -> str:
    """``pid 1234: 3 processes, tree RSS 2.1 GB (sampled peak 2.3 GB, own peaks 2.5 GB), CPU 180%, RAM
    20.1/31.3 GB; GPU 0 run 9.6 GB dev 21.3/40.0 GB``: the tree's RSS now and its peak over the
    samples, and each process's own peak (VmHWM) summed, which is what a recorded row keeps."""
    h = snap.host
    parts = [f"pid {pid}:"]
    if h is not None:
        parts.append(
            f"{h.tree_nprocs or 0} process{'es' if (h.tree_nprocs or 0) != 1 else ''}, "
            f"tree RSS {fmt.mb(h.tree_rss_mb)} (sampled peak {fmt.mb(snap.host_peak_tree_rss_mb)}, "
            f"own peaks {fmt.mb(snap.host_tree_hwm_mb)}), "
            f"CPU {fmt.pct(h.tree_cpu_pct)}, RAM {fmt.mb(h.ram_used_mb)}/{fmt.mb(h.ram_total_mb)}"
        )
    cards = [g for g in ((snap.gpu.gpus if snap.gpu and snap.gpu.available else ()) or ()) if g.proc_mem_mb]
    if cards:
        parts.append(
            "; "
            + ", ".join(
                f"GPU {g.index} run {fmt.mb(g.proc_mem_mb)} dev {fmt.mb(g.mem_used_mb)}/{fmt.mb(g.mem_total_mb)}"
                for g in cards
            )
        )
    return " ".join(parts)


#: The signals that end a foreground ``fttui watch`` (``kill``, the terminal closed): the watch
#: ends with it. Its watcher is in a session of its own, where neither reaches it.
END_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class EndSignals:
    """SIGTERM and SIGHUP to a foreground ``fttui watch``, kept (never raised) for its loop to act
    on: it stops the watcher, which would otherwise sample until the watched process ends.
    Installed before the watcher is started, so a signal that comes while it starts is not lost."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.old: dict = {}

    def __enter__(self) -> EndSignals:
        self.old = {s: signal.signal(s, self._on) for s in END_SIGNALS}
        return self

    def __exit__(self, *_exc) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)

    def _on(self, signum, _f) -> None:
        if self.signum is None:
            self.signum = signum


def _say(text: str, stream) -> bool:
    """Print; ``False`` where the terminal is gone (SIGHUP) or the reader of a pipe: the stream
    then writes to /dev/null, so that nothing later (the exit's flush) fails on it either."""
    try:
        print(text, file=stream, flush=True)
        return True
    except (OSError, ValueError):
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass
        return False


def _stop_on_signal(rd, signum: int, wait_s: float = 3.0) -> int:
    """The foreground watch ended by a signal (SIGTERM, SIGHUP; SIGPIPE: its output is gone): its
    watcher is asked to stop (the ``cancel`` file: the watched process is never signalled) and
    waited for a short while; 128 + signum."""
    from fttui.core.run.processes import liveness
    from fttui.core.run.supervising.pidwatch import AttachedPid

    AttachedPid(rd=rd).cancel()
    deadline = time.monotonic() + wait_s
    while not rd.has_status() and time.monotonic() < deadline:
        if rd.supervisor() is not None and not liveness.supervisor_alive(rd):
            break  # the watcher is gone without its status: the next command that looks writes it
        time.sleep(0.1)
    name = signal.Signals(signum).name
    state = "stopped" if rd.has_status() else f"stopping: fttui attach {rd.run_id}"
    _say(f"\nfttui: {name}: the watch is {state} (the watched process is not touched)", sys.stderr)
    return 128 + signum


def _follow(rd, pid: int, every: float = 5.0, ended: EndSignals | None = None) -> int:
    from fttui.core.run.control.watch import RunFollower
    from fttui.core.run.supervising.pidwatch import AttachedPid

    follower, last = RunFollower(rd), 0.0
    ended = ended or EndSignals()
    stop = {"n": 0}

    def on_int(_s, _f):
        stop["n"] += 1
        if stop["n"] == 1:
            AttachedPid(rd=rd).cancel()  # the watcher stops; the watched process is never signalled
            _say("\nfttui: stopping the watch (the watched process is not touched)", sys.stderr)
        else:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_int)
    try:
        said = _say(f"fttui: watching pid {pid} as {rd.run_id} ({rd.path}); Ctrl-C stops watching", sys.stdout)
        while ended.signum is None:
            if not said:  # nobody reads the watch any more (a pipe's reader gone, a closed terminal)
                ended.signum = signal.SIGPIPE  # ended as by a signal: the watcher stops too
                break
            snap = follower.poll()
            if time.monotonic() - last >= every and snap.host is not None:
                said = _say(resources_line(snap, pid), sys.stdout)
                last = time.monotonic()
            if follower.done or follower.lost():
                break
            time.sleep(0.5)
    except KeyboardInterrupt:  # a second Ctrl-C: the cancel is written, the watcher stops on its own
        _say(f"\nfttui: not waiting any longer; the watch is stopping on its own: fttui attach {rd.run_id}", sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, old)
    if ended.signum is not None:
        return _stop_on_signal(rd, ended.signum)
    st = rd.final_status()
    _say(
        f"{st.status.upper() if st else 'LOST'}: {(st.error if st else None) or 'the watcher is gone without a status'}"
        + ("; summary row saved" if st and st.row_saved else ""),
        sys.stdout,
    )
    from fttui.core.run.supervising.kept_rows import unsaved_line

    unsaved = unsaved_line(rd)  # --record and the store did not take the row: where it is, the mend
    if unsaved:
        _say(unsaved, sys.stdout)
    return 0 if st else 1


def cmd_watch(args, is_tty=is_tty) -> int:
    from fttui.core.run.supervising.pidwatch import AttachedPid

    watch = AttachedPid(args.pid, args.name, args.record)
    if args.detach or (not args.headless and is_tty() and os.environ.get("FTTUI_NO_APP") != "1"):
        rd = watch.start()  # FttuiError (exit 2) before anything is written
        if args.detach:  # the watch goes on in the background, until the process ends or fttui cancel
            print(rd.run_id)
            return 0
        from fttui.tui.app import run_app

        return run_app(attach=str(rd.path))
    with EndSignals() as ended:  # the foreground watch: SIGTERM and SIGHUP end its watcher too
        rd = watch.start()
        return _follow(rd, args.pid, ended=ended)


def add_parser(sub) -> None:
    """The subcommand ``watch``: its arguments and handler."""
    p = sub.add_parser(
        "watch",
        help="the resource panels of a process fttui did not start",
        description="Watch a running process fttui did not start (yours): its process tree's "
        "host memory and CPU and the cards it uses, in the app or as plain lines, "
        "until it ends or Ctrl-C (which never touches the process). A summary row "
        "only with --record.",
    )
    p.add_argument("--pid", type=int, required=True, help="the process to watch (its children are watched too)")
    p.add_argument("--name", help="a name for the watch (default pid-PID-PROGRAM)")
    p.add_argument("--record", action="store_true", help="save a summary row (kind watch) when the watch ends")
    p.add_argument("--headless", action="store_true", help="plain lines, no app")
    p.add_argument("--detach", action="store_true", help="start the watch in the background and print its id")
    p.set_defaults(handler=cmd_watch)
