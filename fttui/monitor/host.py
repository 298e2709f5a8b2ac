"""The host sampler: ``HostSampler`` reads system RAM and swap, and walks the training process
tree (the supervised root and all its descendants) for its summed RSS, process count and CPU,
and the part of that RSS held by build tools (:func:`is_build_process`: compilers, linkers and
build drivers that a first run starts to build ops, such as DeepSpeed's CPU Adam).

Only psutil and ``/proc``; ``sample()`` never raises.
"""

from __future__ import annotations

import math
import os
import re
import time

import psutil

from fttui.monitor.snapshots import MB, HostSnapshot

__all__ = ["BUILD_TOOLS", "HostSampler", "host_available", "is_build_process", "memlock_limit", "vm_hwm_bytes"]

#: Process names of build steps: C/C++/CUDA compilers and their stages, assemblers, linkers and
#: build drivers. A name may carry a target prefix (``x86_64-linux-gnu-g++``) or a version
#: suffix (``g++-12``, ``clang-17``).
BUILD_TOOLS: frozenset[str] = frozenset(
    {
        "cc1plus",
        "cc1",
        "c++",
        "g++",
        "gcc",
        "cc",
        "clang",
        "clang++",
        "collect2",
        "as",
        "ld",
        "ld.bfd",
        "ld.gold",
        "ld.lld",
        "lld",
        "nvcc",
        "cicc",
        "ptxas",
        "cudafe++",
        "fatbinary",
        "nvlink",
        "ninja",
        "make",
        "gmake",
        "cmake",
    }
)
_VERSION_SUFFIX = re.compile(r"-\d+(\.\d+)*$")


def is_build_process(name: object) -> bool:
    """Whether a process name (``psutil.Process.name()``) is a build tool of :data:`BUILD_TOOLS`.
    Never raises: anything but a known name is ``False``."""
    if not isinstance(name, str) or not name:
        return False
    base = _VERSION_SUFFIX.sub("", name.strip())
    if base in BUILD_TOOLS:
        return True
    # a target prefix (x86_64-linux-gnu-g++): any ending after a "-" that is a known tool
    parts = base.split("-")
    return any("-".join(parts[i:]) in BUILD_TOOLS for i in range(1, len(parts)))


# whether this kernel offers /proc/<pid>/task/<tid>/children (the cheap tree walk)
_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


class HostSampler:
    """System RAM and swap, plus the process tree rooted at ``root_pid`` (root and all recursive
    children): summed RSS, process count and summed CPU percent (``psutil.cpu_percent`` with
    ``interval=None`` on ``Process`` objects cached between calls; the first sample of a new
    process counts 0 %), and the RSS and count of its build tools (:func:`is_build_process`, by
    process name). A dead root gives an empty tree (0 processes, 0 MB, 0 %); without a root the
    tree figures are ``None``. Never raises.

    The tree is found through ``/proc/<pid>/task/<tid>/children`` where the kernel offers it
    (cheap: only the tree is read), with a full ``psutil`` scan every ``full_scan_s`` seconds to
    catch anything those files missed; elsewhere ``psutil.Process.children(recursive=True)``.
    """

    def __init__(self, root_pid: int | None = None, full_scan_s: float = 10.0) -> None:
        self.root_pid = root_pid
        self.full_scan_s = full_scan_s
        self._procs: dict[int, psutil.Process] = {}
        self._pids: list[int] | None = None
        self._last_full = -math.inf
        # every process seen in the tree, (pid, start time) -> its own peak in bytes (VmHWM; its
        # sampled RSS where VmHWM cannot be read), kept after it ends
        self._hwm: dict[tuple[int, float], int] = {}
        self._hwm_unread: set[tuple[int, float]] = set()
        self._hwm_read: set[tuple[int, float]] = set()  # whose VmHWM was read once at least

    # -- tree discovery
    def _walk_proc(self, root: int) -> list[int]:
        out = [root]
        seen = {root}
        i = 0
        while i < len(out):
            pid = out[i]
            i += 1
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                        kids = f.read().split()
                except OSError:
                    continue
                for k in kids:
                    try:
                        c = int(k)
                    except ValueError:
                        continue
                    if c not in seen:
                        seen.add(c)
                        out.append(c)
        return out

    def _walk_psutil(self, root: int) -> list[int]:
        try:
            proc = self._procs.get(root) or psutil.Process(root)
            kids = proc.children(recursive=True)
        except (psutil.Error, OSError):
            return []
        return [root] + [k.pid for k in kids]

    def _discover(self) -> list[int]:
        root = self.root_pid
        if root is None:
            return []
        if not psutil.pid_exists(root):
            return []
        now = time.monotonic()
        if not _PROC_CHILDREN or now - self._last_full >= self.full_scan_s:
            self._last_full = now
            pids = self._walk_psutil(root)
            if _PROC_CHILDREN:
                # union with the cheap walk: either may miss a process born during the scan
                known = set(pids)
                pids.extend(p for p in self._walk_proc(root) if p not in known)
            return pids
        return self._walk_proc(root)

    def tree_pids(self, refresh: bool = False) -> list[int]:
        """PIDs of the tree as of the latest ``sample()`` (found now if never sampled or
        ``refresh``). Empty without a root or with a dead root."""
        try:
            if refresh or self._pids is None:
                self._pids = self._discover()
            return list(self._pids)
        except Exception:  # psutil and /proc raise many types; the sampler never raises
            return []

    # -- sampling
    def sample(self) -> HostSnapshot:
        ram_used = ram_total = swap_used = swap_total = None
        try:
            vm = psutil.virtual_memory()
            ram_total = vm.total / MB
            ram_used = (vm.total - vm.available) / MB
        except Exception:  # psutil.Error, OSError, odd platform errors: the figure stays None
            pass
        try:
            sw = psutil.swap_memory()
            swap_total = sw.total / MB
            swap_used = sw.used / MB
        except Exception:  # as above (e.g. no swap accounting in some containers)
            pass
        rss = nprocs = cpu = build_rss = build_n = hwm = unread = None
        if self.root_pid is not None:
            try:
                rss, nprocs, cpu, build_rss, build_n = self._sample_tree()
                hwm, unread = sum(self._hwm.values()) / MB, len(self._hwm_unread)
            except Exception:  # anything the tree walk did not expect: no tree figures, no raise
                rss = nprocs = cpu = build_rss = build_n = None
        return HostSnapshot(
            ram_used_mb=ram_used,
            ram_total_mb=ram_total,
            swap_used_mb=swap_used,
            swap_total_mb=swap_total,
            tree_rss_mb=rss,
            tree_nprocs=nprocs,
            tree_cpu_pct=cpu,
            build_rss_mb=build_rss,
            build_nprocs=build_n,
            tree_hwm_mb=hwm,
            hwm_unread=unread,
        )

    def _sample_tree(self) -> tuple[float, int, float, float, int]:
        pids = self._discover()
        alive: list[int] = []
        procs: dict[int, psutil.Process] = {}
        rss = cpu = build_rss = 0.0
        build_n = 0
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = psutil.Process(pid)
                with proc.oneshot():
                    r = proc.memory_info().rss
                    c = proc.cpu_percent(interval=None)
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    build = is_build_process(_name(proc))
                    key = (pid, proc.create_time())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except (psutil.AccessDenied, OSError):
                if proc is not None:  # keep counting it, without figures
                    procs[pid] = proc
                    alive.append(pid)
                continue
            procs[pid] = proc
            alive.append(pid)
            own = vm_hwm_bytes(pid)
            if own is None:  # unreadable (another user's, or exiting now): counted unless read before
                if key not in self._hwm_read:
                    self._hwm_unread.add(key)
            else:
                self._hwm_read.add(key)
                self._hwm_unread.discard(key)
            self._hwm[key] = max(self._hwm.get(key, 0), r if own is None else max(own, r))
            rss += r
            cpu += c
            if build:
                build_rss += r
                build_n += 1
        self._procs = procs  # dead ones dropped
        self._pids = alive
        return rss / MB, len(alive), cpu, build_rss / MB, build_n


def _name(proc: psutil.Process) -> str | None:
    """The process's name (psutil caches it per ``Process``); ``None`` when it cannot be read."""
    try:
        return proc.name()
    except (psutil.Error, OSError):
        return None


def vm_hwm_bytes(pid: int) -> int | None:
    """A process's own peak resident memory, its kernel's high-water mark (``VmHWM`` in
    ``/proc/PID/status``), in bytes; ``None`` where it cannot be read (not Linux, another user's
    process, gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_available() -> tuple[int, str] | None:
    """The memory a new run can still take on this machine, in bytes, and what bounds it:
    ``MemAvailable`` (psutil's ``available``), or the room left under a cgroup v2 ``memory.max``
    of this process (its own group or an ancestor's) when that is smaller. ``None`` when neither
    can be read. Never raises."""
    best: tuple[int, str] | None = None
    try:
        best = (int(psutil.virtual_memory().available), "MemAvailable")
    except Exception:  # psutil.Error, OSError: no figure
        best = None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            path = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
    except OSError:
        path = None
    parts = [p for p in (path or "").split("/") if p]
    for i in range(len(parts), -1, -1):  # this group, then each ancestor
        base = os.path.join("/sys/fs/cgroup", *parts[:i])
        try:
            with open(os.path.join(base, "memory.max"), encoding="utf-8") as f:
                limit = f.read().strip()
            with open(os.path.join(base, "memory.current"), encoding="utf-8") as f:
                current = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit():
            room = max(0, int(limit) - current)
            if best is None or room < best[0]:
                best = (room, "cgroup memory.max")
    return best


def memlock_limit() -> int | None:
    """This process's locked-memory limit (soft ``RLIMIT_MEMLOCK``) in bytes; ``None`` when unlimited
    or unknown."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)
