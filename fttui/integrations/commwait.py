"""The seconds each rank spends blocked in collectives, step by step (issue 39 item 1).

Under synchronous data parallelism the collectives even out the ranks' step times: a slow rank
does not show as a slow step, it shows as the others waiting for it. This module measures the
waiting, per process, so that the fold (:mod:`fttui.core.run.fold.skew`) can name the rank the
others wait for:

* **Collectives called from Python** (DeepSpeed's ZeRO through ``deepspeed.comm``, FSDP, a
  script's own ``dist.all_reduce``): the ``torch.distributed`` functions are wrapped; a synchronous
  call's duration is time blocked, an asynchronous call's is the time its work's ``wait()``
  blocks (``Work.wait`` is timed on the class: the work handed back stays torch's own object, which
  FSDP checks with ``isinstance``). The functions DeepSpeed's backend captured when it started
  are wrapped on it too.
* **DDP** (its reducer calls the process group from C++): a communication hook that runs the
  default all-reduce and notes when each bucket was launched and finished; the step's blocked time
  is from its last launch (this rank's backward is done) to the last finish.

Measured on gloo (CPU ranks), where a collective's call blocks until every rank joined it. On
NCCL a call returns once the kernel is queued, so the host's blocked time says nothing about the
card: there nothing is installed and the step events carry no figure (docs/reliability.md, "The
slow rank"). Each wrapped call costs two clock reads.

Stdlib only at import (fttui's Trainer callback loads this file by path into a command's own
Python); torch is reached through ``sys.modules`` once training runs.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CommClock", "CLOCK", "install", "FUNCTIONS"]

#: the ``torch.distributed`` collectives timed (those a rank blocks in until its peers join)
FUNCTIONS = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",  # FSDP2's, torch 2.13
    "all_gather_coalesced",
    "_all_gather_base",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",  # FSDP2's, torch 2.13
    "_reduce_scatter_base",
    "broadcast",
    "broadcast_object_list",
    # DDP's buffers (a Llama's rotary inv_freq) sent from rank 0 before every forward
    # (broadcast_buffers, on by default; Python calls it by this name): untimed, the ranks that
    # wait there for a late rank counted the wait as their compute and the late rank went unnamed
    "_broadcast_coalesced",
    "reduce",
    "barrier",
    "monitored_barrier",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
)
_WRAPPED = "_fttui_timed"  # on a wrapper: the function it wraps
_DS_CAPTURED = ("all_gather_function", "reduce_scatter_function")  # deepspeed.comm's TorchBackend


class CommClock:
    """The seconds this process was blocked in collectives since the last :meth:`take`, and how
    many collectives it joined. Thread-safe (DDP's hook finishes on the process group's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()  # the depth of nested timed calls (all_gather_object's all_gather)
        self.blocked = 0.0
        self.calls = 0
        self._launch: float | None = None  # DDP: this step's latest bucket launch
        self._done: float | None = None  # and its latest bucket finish

    def add(self, seconds: float, call: bool = True) -> None:
        with self._lock:
            self.blocked += max(0.0, seconds)
            self.calls += int(call)

    def launched(self, t: float) -> None:
        with self._lock:
            self._launch = t if self._launch is None else max(self._launch, t)
            self.calls += 1

    def finished(self, t: float) -> None:
        with self._lock:
            self._done = t if self._done is None else max(self._done, t)

    def take(self) -> tuple[float, int]:
        """(seconds blocked, collectives) since the previous take; both 0 after it."""
        with self._lock:
            blocked = self.blocked
            if self._launch is not None and self._done is not None:
                blocked += max(0.0, self._done - self._launch)
            calls = self.calls
            self.blocked, self.calls, self._launch, self._done = 0.0, 0, None, None
        return blocked, calls

    def timed(self, fn: Callable[..., Any], call: bool = True) -> Callable[..., Any]:
        """``fn`` timed (a collective, ``call``; or a work's ``wait``, not a call of its own); a
        timed function called inside another (``all_gather_object``'s ``all_gather``, a
        synchronous collective's own ``wait``) is not timed again."""
        if getattr(fn, _WRAPPED, None) is not None:
            return fn
        clock = self

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            local = clock._local
            if getattr(local, "depth", 0):
                return fn(*args, **kwargs)
            local.depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                local.depth = 0
                clock.add(time.perf_counter() - t0, call)

        setattr(wrapper, _WRAPPED, fn)
        return wrapper


#: the process's clock: the functions are wrapped once per process, for every callback after
#: (the probe worker's trials each have their own)
CLOCK = CommClock()


def _backend() -> str | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return str(dist.get_backend())
    except Exception:
        return None


def install(clock: CommClock, model: Any = None) -> str | None:
    """Time this process's collectives with ``clock`` when its default process group is gloo:
    ``torch.distributed``'s functions, DeepSpeed's captured ones, and ``model``'s DDP buckets
    (``model`` the DDP module; its hook must go on before its first backward). What was timed
    (``"gloo"``, ``"gloo+ddp"``), or ``None``: no process group, another backend, nothing to wrap.
    Installing twice wraps nothing twice."""
    if _backend() != "gloo":
        return None
    dist = sys.modules["torch.distributed"]
    for name in FUNCTIONS:
        fn = getattr(dist, name, None)
        if callable(fn):
            setattr(dist, name, clock.timed(fn))
    work = getattr(getattr(dist, "distributed_c10d", None), "Work", None)
    if work is not None and callable(getattr(work, "wait", None)):
        work.wait = clock.timed(work.wait, call=False)  # an asynchronous collective's wait
    cdb = getattr(sys.modules.get("deepspeed.comm.comm"), "cdb", None)
    for name in _DS_CAPTURED:
        fn = getattr(cdb, name, None)
        if callable(fn):
            setattr(cdb, name, clock.timed(fn))
    return "gloo+ddp" if model is not None and _ddp_hook(clock, model) else "gloo"


def _ddp_hook(clock: CommClock, model: Any) -> bool:
    """The default all-reduce as ``model``'s communication hook, its buckets' launch and finish
    noted; False when ``model`` is no DDP module or has a hook already."""
    ddp = sys.modules.get("torch.nn.parallel")
    cls = getattr(ddp, "DistributedDataParallel", None)
    if cls is None or not isinstance(model, cls) or getattr(model, _WRAPPED, False):
        return False
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state: Any, bucket: Any) -> Any:
        clock.launched(time.perf_counter())

        def done(fut: Any) -> Any:
            clock.finished(time.perf_counter())
            return fut.value()

        local = clock._local
        local.depth = 1  # the hook's own all_reduce is this bucket's, timed by launch and finish
        try:
            return allreduce_hook(state, bucket).then(done)
        finally:
            local.depth = 0

    hook.__annotations__ = {}  # DDP checks a hook's annotations against its own types (strings here)
    try:
        model.register_comm_hook(None, hook)
    except RuntimeError:  # a hook was registered already (the script's, accelerate's): it stays
        return False
    setattr(model, _WRAPPED, True)
    return True
