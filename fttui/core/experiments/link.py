"""The link between ranks, measured before a launch (issue 43 item 2): the figure a plan's
communication forecast rests on (:mod:`fttui.core.experiments.comm`).

The test itself is :mod:`fttui.integrations.linktest` (the only side that imports torch), started
through the launcher and rendezvous a run uses (:mod:`fttui.core.experiments.linkrun`): torchrun on
this machine, or an ``srun`` step over the nodes (``fttui plan --link``), and ``srun`` with one
task per node as the first step of a ``fttui submit`` job
(:func:`fttui.core.run.slurm.slurmjob.link_test_lines`; ``python -m fttui.core.experiments.link
FILE`` then parses and keeps its result). Its raw result file (each
size's and each pair's seconds) is parsed here (:func:`parse_result`) into a :class:`LinkFigure`:
the bus bandwidth of an all-reduce (bytes x 2(n-1)/n over the seconds, what one rank's link
carried; a pair: bytes over the seconds), the latency (an all-reduce of one float), per rank and
per pair, and the pairs far slower than the others named (:func:`bad_pairs`).

The figure is kept per machine set (:func:`store`): ``FTTUI_HOME/links/<key>.json``, the key the
sorted node names and the interconnect (the backend, and the network interface when
``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` names one).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fttui.core.base.constants import EXIT_LINK_FAILED
from fttui.core.base.errors import FttuiError
from fttui.core.base.units import MIB

__all__ = [
    "LinkError",
    "LinkFigure",
    "Pair",
    "backend_for",
    "bad_pairs",
    "figure_for",
    "interconnect",
    "kept_words",
    "link_key",
    "load",
    "none_kept",
    "parse_result",
    "store",
    "us",
    "words",
]
#: a pair whose bandwidth is below this share of the pairs' median, or whose latency is above its
#: inverse times theirs, is named a bad pair
BAD_SHARE = 0.5


class LinkError(FttuiError):
    """The link test failed or its result file is unreadable (one line; exit
    :data:`~fttui.core.base.constants.EXIT_LINK_FAILED`, not bad input's 2)."""

    exit_code = EXIT_LINK_FAILED


@dataclass(frozen=True)
class Pair:
    """Two ranks timed alone: their nodes, bus bandwidth (bytes/s) and latency (s)."""

    ranks: tuple[int, int]
    nodes: tuple[str, str]
    bandwidth: float
    latency_s: float

    def label(self) -> str:
        return f"{self.nodes[0]} <-> {self.nodes[1]} (ranks {self.ranks[0]}, {self.ranks[1]})"


@dataclass(frozen=True)
class LinkFigure:
    """One link test's figures. ``bandwidth``: the bus bandwidth at the largest size, bytes/s (0
    for one rank: nothing crossed a link); ``sizes``: (bytes, bus bandwidth) per size;
    ``per_rank``: (rank, node, bus bandwidth at the largest size, latency) as each rank saw it."""

    nodes: tuple[str, ...]
    interconnect: str
    backend: str
    world: int
    bandwidth: float
    latency_s: float
    sizes: tuple[tuple[int, float], ...] = ()
    per_rank: tuple[tuple[int, str, float, float], ...] = ()
    pairs: tuple[Pair, ...] = ()
    bad: tuple[str, ...] = ()
    t: float = 0.0
    key: str = field(default="")
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkFigure:
        return cls(
            nodes=tuple(str(n) for n in d["nodes"]),
            interconnect=str(d["interconnect"]),
            backend=str(d["backend"]),
            world=int(d["world"]),
            bandwidth=float(d["bandwidth"]),
            latency_s=float(d["latency_s"]),
            sizes=tuple((int(b), float(w)) for b, w in d.get("sizes") or ()),
            per_rank=tuple((int(r), str(n), float(w), float(lat)) for r, n, w, lat in d.get("per_rank") or ()),
            pairs=tuple(
                Pair(
                    ranks=(int(p["ranks"][0]), int(p["ranks"][1])),
                    nodes=(str(p["nodes"][0]), str(p["nodes"][1])),
                    bandwidth=float(p["bandwidth"]),
                    latency_s=float(p["latency_s"]),
                )
                for p in d.get("pairs") or ()
            ),
            bad=tuple(str(b) for b in d.get("bad") or ()),
            t=float(d.get("t") or 0.0),
            key=str(d.get("key") or ""),
            source=str(d.get("source") or ""),
        )


def interconnect(backend: str, env: dict[str, str] | None = None) -> str:
    """The interconnect part of a machine set's key: the backend, and the network interface its
    environment names (``NCCL_SOCKET_IFNAME`` for NCCL, ``GLOO_SOCKET_IFNAME`` for gloo)."""
    env = dict(os.environ) if env is None else env
    ifname = (env.get("NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME") or "").strip()
    return f"{backend}@{ifname}" if ifname else backend


def link_key(nodes: list[str] | tuple[str, ...], inter: str) -> str:
    """The machine set's key: its sorted node names (each once) and the interconnect."""
    return f"{'+'.join(sorted(set(nodes)))}/{inter}"


def _bus(bytes_: float, seconds: float, world: int) -> float:
    """An all-reduce's bus bandwidth: what each rank's link carried, bytes/s (ring: 2(n-1)/n of it)."""
    if world < 2 or seconds <= 0:
        return 0.0
    return bytes_ * 2 * (world - 1) / world / seconds


def us(seconds: float) -> str:
    """A latency in microseconds, never in exponent form (``146 us``, ``1520 us``, ``8.5 us``)."""
    x = seconds * 1e6
    return f"{x:.0f} us" if x >= 100 else f"{x:.3g} us"


def bad_pairs(pairs: tuple[Pair, ...] | list[Pair], share: float = BAD_SHARE) -> list[str]:
    """The pairs far slower than the others (three pairs or more: a median to compare with): a
    bandwidth below ``share`` of the pairs' median, or a latency above 1/``share`` times theirs;
    each in words (its nodes, its figure against the median)."""
    if len(pairs) < 3:
        return []
    bw = statistics.median(p.bandwidth for p in pairs)
    lat = statistics.median(p.latency_s for p in pairs)
    out = []
    for p in pairs:
        if p.bandwidth < share * bw:
            out.append(f"{p.label()}: {p.bandwidth / 1e9:.3g} GB/s against the pairs' median {bw / 1e9:.3g}")
        elif lat > 0 and p.latency_s > lat / share:
            out.append(f"{p.label()}: {us(p.latency_s)} latency against the pairs' median {us(lat)}")
    return out


def parse_result(path: str | os.PathLike[str], env: dict[str, str] | None = None, source: str = "") -> LinkFigure:
    """The :class:`LinkFigure` of a link test's result file (``source``: what ran it);
    :class:`LinkError` when it is missing or not one."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        world = int(raw["world"])
        names = [str(n) for n in raw["nodes"]]
        sizes = [(int(s["bytes"]), float(s["seconds"])) for s in raw["sizes"]]
        latency = float(raw["latency_s"])
        ranks = raw.get("ranks") or []
        pair_rows = raw.get("pairs") or []
        backend = str(raw["backend"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LinkError(f"link test result {path}: unreadable ({type(e).__name__}: {e})") from None
    if not sizes or world < 1 or len(names) != world:
        raise LinkError(f"link test result {path}: no sizes, or {len(names)} node names for {world} ranks")
    largest = max(sizes)
    pairs = [
        Pair(
            ranks=(int(p["ranks"][0]), int(p["ranks"][1])),
            nodes=(names[int(p["ranks"][0])], names[int(p["ranks"][1])]),
            bandwidth=float(p["bytes"]) / float(p["seconds"]) if float(p["seconds"]) > 0 else 0.0,
            latency_s=float(p["latency_s"]),
        )
        for p in pair_rows
    ]
    if world == 2:  # the one pair is the whole world
        pairs = [Pair((0, 1), (names[0], names[1]), _bus(*largest, 2), latency)]
    per_rank = tuple(
        (int(r["rank"]), str(r["node"]), _bus(largest[0], float(r["sizes"][-1]), world), float(r["latency_s"]))
        for r in ranks
        if len(r.get("sizes") or []) == len(sizes)
    )
    inter = interconnect(backend, env)
    return LinkFigure(
        nodes=tuple(names),
        interconnect=inter,
        backend=backend,
        world=world,
        bandwidth=_bus(*largest, world),
        latency_s=latency if world > 1 else 0.0,
        sizes=tuple((b, _bus(b, s, world)) for b, s in sizes),
        per_rank=per_rank,
        pairs=tuple(pairs),
        bad=tuple(bad_pairs(pairs)),
        t=float(raw.get("t") or time.time()),
        key=link_key(names, inter),
        source=source,
    )


def _folder() -> Path:
    from fttui.core.base import paths

    return paths.home() / "links"


def _file(key: str) -> Path:
    return _folder() / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"


def store(fig: LinkFigure) -> Path:
    """Keep ``fig`` as its machine set's figure (the last test of a set wins)."""
    from fttui.core.run.files.rundir import write_json_atomic

    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = _file(fig.key)
    write_json_atomic(path, fig.to_dict())
    return path


def load(key: str) -> LinkFigure | None:
    """The kept figure of a machine set (None: never measured, or unreadable)."""
    try:
        return LinkFigure.from_dict(json.loads(_file(key).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def figure_for(nodes: int, backend: str) -> LinkFigure | None:
    """The figure a plan of ``nodes`` nodes uses: one node, this machine's; several, the newest
    kept figure of as many nodes with that backend (the nodes a job will get are not known
    before it is allocated). None when there is none."""
    if nodes <= 1:
        import socket

        return load(link_key([socket.gethostname()], interconnect(backend)))
    best = None
    for path in _folder().glob("*.json") if _folder().is_dir() else ():
        try:
            fig = LinkFigure.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(set(fig.nodes)) == nodes and fig.backend == backend and (best is None or fig.t > best.t):
            best = fig
    return best


def words(fig: LinkFigure) -> str:
    """The figure in one line."""
    where = ", ".join(sorted(set(fig.nodes)))
    if fig.world < 2:
        return f"link of {where} ({fig.interconnect}): one rank, nothing crosses a link"
    line = (
        f"link of {where} ({fig.interconnect}, {fig.world} ranks): bus bandwidth {fig.bandwidth / 1e9:.3g} GB/s "
        f"at {max(fig.sizes)[0] / MIB:g} MiB, latency {us(fig.latency_s)}"
    )
    if fig.bad:
        line += "; BAD PAIR: " + "; ".join(fig.bad)
    return line


def backend_for(gpus: int) -> str:
    """The backend a run's ranks talk over: NCCL between cards, gloo between CPU ranks."""
    return "nccl" if gpus else "gloo"


def kept_words(fig: LinkFigure) -> str:
    """Where a kept figure came from and when: ``measured 2026-11-28 10:02 by fttui plan --link
    (torchrun on this machine), kept in FTTUI_HOME/links/KEY.json``."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(fig.t)) if fig.t else "at an unknown time"
    by = f" by {fig.source}" if fig.source else ""
    return f"measured {when}{by}, kept in {_file(fig.key)}"


def none_kept(nodes: int, backend: str) -> str:
    """The words for a plan with no kept figure for its machine set: communication not counted."""
    if nodes <= 1:
        import socket

        where = f"this machine ({socket.gethostname()}, {backend})"
    else:
        where = f"{nodes} nodes ({backend})"
    return (
        f"no link figure kept for {where}: the forecast counts no communication between ranks "
        "(fttui plan --link measures it)"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m fttui.core.experiments.link FILE``: parse and keep a link test's result; print it."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fttui.core.experiments.link RESULT.json", file=sys.stderr)
        return 2
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    try:
        fig = parse_result(args[0], source=f"fttui submit (Slurm job {job}'s first step)" if job else "a link test")
    except LinkError as e:
        print(f"fttui: {e}", file=sys.stderr)
        return 1
    store(fig)
    print(f"fttui: {words(fig)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
