"""Where a hang is, from inside each rank (issue 39 item 2): a daemon thread that answers fttui's
requests with the rank's recent collectives (PyTorch's flight recorder) and its main thread's
Python stack.

A rank stuck in a collective waits in C++ with the interpreter released, so a Python signal
handler would not run until the collective returns; a thread does. fttui (:mod:`fttui.core.run.
control.hang`) writes a request id to ``RUN_DIR/stacks/request``; every rank's thread notices it
within :data:`POLL_S` and writes ``RUN_DIR/stacks/rank-R-pid-P.json`` (0600, replaced whole):

* ``collectives``: the flight recorder's latest entries (sequence number, operation, state,
  whether it finished, process group), when the recorder is on (fttui's launches set
  ``TORCH_FR_BUFFER_SIZE``; torch 2.13 records gloo's collectives too, without timing) and this
  torch has it; else ``fr_error`` says why;
* ``stack``: the main thread's innermost frames, ``[file, line, function]``;
* ``step``: the latest optimizer step this rank reported.

A stopped or deadlocked rank does not answer: fttui names it by that. The thread wakes twice a
second to read one file's status: nothing measurable. Stdlib only (fttui's Trainer callback loads
it by path into a command's own Python); torch through ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

try:
    from fttui.core.base import rank_timing as _names
except ImportError:  # loaded by path (fttui's Trainer callback in a command's Python)
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "_fttui_rank_timing",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "core", "base", "rank_timing.py"),
    )
    if _spec is None or _spec.loader is None:
        raise
    _names = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_names)

__all__ = ["POLL_S", "start", "answer", "off"]

#: how often each rank looks for a request
POLL_S = 0.5
_KEEP = 8  # the flight recorder's latest entries kept in an answer
_STACK = 16  # the main thread's innermost frames kept
_MARK = "_fttui_hangdump"  # on the threading module: one thread per process


def off() -> bool:
    """Whether the rank timing is off (``FTTUI_RANK_TIMING=0``)."""
    return bool(_names.timing_off(os.environ))


def _collectives() -> tuple[list[dict[str, Any]] | None, str | None]:
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return None, "this torch has no flight recorder dump (torch._C._distributed_c10d._dump_fr_trace_json)"
    try:
        entries = json.loads(dump(includeCollectives=True, onlyActive=False)).get("entries") or []
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]
    keep = []
    for e in entries[-_KEEP:]:
        group = e.get("process_group")
        keep.append(
            {
                "seq": e.get("collective_seq_id"),
                "op": e.get("profiling_name"),
                "state": e.get("state"),
                "retired": e.get("retired"),
                "group": group[1] if isinstance(group, list) and len(group) > 1 else group,
                "created_ns": e.get("time_created_ns"),
                "sizes": e.get("input_sizes"),
            }
        )
    return keep, None


def _stack() -> list[list[Any]]:
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return []
    frames = traceback.extract_stack(frame)[-_STACK:]
    return [[f.filename, f.lineno, f.name] for f in reversed(frames)]  # innermost first


def answer(folder: str, rank: int, request: str, step: int | None) -> str:
    """Write this rank's answer to ``request``; its path."""
    collectives, why = _collectives()
    body = {
        "request": request,
        "rank": rank,
        "pid": os.getpid(),
        "t": time.time(),
        "step": step,
        "collectives": collectives,
        "fr_error": why,
        "stack": _stack(),
    }
    path = os.path.join(folder, _names.answer_name(rank, os.getpid()))
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(body, f)
    os.replace(tmp, path)
    return path


def start(
    run_dir: str | None, rank: int, step: Callable[[], int | None], on_error: Callable[[BaseException], None]
) -> bool:
    """The answering thread of this process (one per process; False without a run directory or
    when it runs already). ``step``: the latest step this rank reported."""
    if not run_dir or getattr(threading, _MARK, None) is not None:
        return False
    folder = os.path.join(run_dir, _names.STACKS_DIR)
    request = os.path.join(folder, _names.REQUEST)

    def loop() -> None:
        seen: str | None = None
        try:
            seen = _read(request)  # a request made before this rank started is no question to it
        except OSError:
            pass
        while True:
            time.sleep(POLL_S)
            try:
                asked = _read(request)
            except OSError:
                continue
            if asked == seen:
                continue
            seen = asked
            try:
                answer(folder, rank, asked, step())
            except Exception as e:
                on_error(e)

    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        thread = threading.Thread(target=loop, name="fttui-hangdump", daemon=True)
        thread.start()
    except Exception as e:
        on_error(e)
        return False
    setattr(threading, _MARK, thread)
    return True


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip()
