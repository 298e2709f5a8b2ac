"""`fttui watch --pid PID`: the resource panels of a process fttui did not start."""

from __future__ import annotations

import os
import signal
import sys
import time

from fttui.core.base import fmt
from fttui.cli.common import is_tty


def resources_line(snap, pid: int) -> str:
    """``pid 1234: 3 processes, tree RSS 2.1 GB (sampled peak 2.3 GB, own peaks 2.5 GB), CPU 180%, RAM
    20.1/31.3 GB; GPU 0 run 9.6 GB dev 21.3/40.0 GB``: the tree's RSS now and its peak over the
    samples, and each process's own peak (VmHWM) summed, which is what a recorded row keeps."""
    h = snap.host
    parts = [f"pid {pid}:"]
    if h is not None:
        parts.append(f"{h.tree_nprocs or 0} process{'es' if (h.tree_nprocs or 0) != 1 else ''}, "
                     f"tree RSS {fmt.mb(h.tree_rss_mb)} (sampled peak {fmt.mb(snap.host_peak_tree_rss_mb)}, "
                     f"own peaks {fmt.mb(snap.host_tree_hwm_mb)}), "
                     f"CPU {fmt.pct(h.tree_cpu_pct)}, RAM {fmt.mb(h.ram_used_mb)}/{fmt.mb(h.ram_total_mb)}")
    cards = [g for g in ((snap.gpu.gpus if snap.gpu and snap.gpu.available else ()) or ()) if g.proc_mem_mb]
    if cards:
        parts.append("; " + ", ".join(f"GPU {g.index} run {fmt.mb(g.proc_mem_mb)} dev {fmt.mb(g.mem_used_mb)}"
                                      f"/{fmt.mb(g.mem_total_mb)}" for g in cards))
    return " ".join(parts)


def _follow(rd, pid: int, every: float = 5.0) -> int:
    from fttui.core.run.watch import RunFollower

    follower, last = RunFollower(rd), 0.0
    stop = {"n": 0}

    def on_int(_s, _f):
        stop["n"] += 1
        if stop["n"] == 1:
            rd.request_cancel()  # the watcher stops; the watched process is never signalled
            print("\nfttui: stopping the watch (the watched process is not touched)", file=sys.stderr, flush=True)
        else:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_int)
    print(f"fttui: watching pid {pid} as {rd.run_id} ({rd.path}); Ctrl-C stops watching", flush=True)
    try:
        while True:
            snap = follower.poll()
            if time.monotonic() - last >= every and snap.host is not None:
                print(resources_line(snap, pid), flush=True)
                last = time.monotonic()
            if follower.done or follower.lost():
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        print(f"\nfttui: detached; the watch goes on: fttui attach {rd.run_id}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, old)
    st = rd.status() or {}
    print(f"{st.get('status', 'lost').upper()}: {st.get('error') or 'the watcher is gone without a status'}"
          + ("; summary row saved" if st.get("row_saved") else ""), flush=True)
    return 0 if st else 1


def cmd_watch(args, is_tty=is_tty) -> int:
    from fttui.core.run.pidwatch import start_watch

    rd = start_watch(args.pid, args.name, args.record)  # FttuiError (exit 2) before anything is written
    if args.detach:
        print(rd.run_id)
        return 0
    if not args.headless and is_tty() and os.environ.get("FTTUI_NO_APP") != "1":
        from fttui.tui.app import run_app

        return run_app(attach=str(rd.path))
    return _follow(rd, args.pid)


def add_parser(sub) -> None:
    """The subcommand ``watch``: its arguments and handler."""
    p = sub.add_parser("watch", help="the resource panels of a process fttui did not start",
                       description="Watch a running process fttui did not start (yours): its process tree's "
                                   "host memory and CPU and the cards it uses, in the app or as plain lines, "
                                   "until it ends or Ctrl-C (which never touches the process). A summary row "
                                   "only with --record.")
    p.add_argument("--pid", type=int, required=True, help="the process to watch (its children are watched too)")
    p.add_argument("--name", help="a name for the watch (default pid-PID-PROGRAM)")
    p.add_argument("--record", action="store_true", help="save a summary row (kind watch) when the watch ends")
    p.add_argument("--headless", action="store_true", help="plain lines, no app")
    p.add_argument("--detach", action="store_true", help="start the watch in the background and print its id")
    p.set_defaults(handler=cmd_watch)
