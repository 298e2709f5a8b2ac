"""The allocator's memory snapshot of a CUDA out of memory and the tensors it is read against:
``memory_snapshot.pickle`` and ``memory_tensors.json`` in the run directory, their one reader
and writer each (docs/architecture.md, "Run directory").

``memory_snapshot.pickle`` is ``torch.cuda.memory._snapshot()`` pickled as torch's own
``_dump_snapshot`` writes it (so PyTorch's memory viewer opens it too): a dict of plain types,
``segments`` (each with ``address``, ``total_size``, ``blocks``: ``address``, ``size``,
``requested_size``, ``state``, ``frames``: ``filename``, ``line``, ``name``) and
``device_traces`` (one list of trace entries per device: ``action``, ``addr``, ``size``,
``frames``, ``device_free`` for an ``oom``). It is read without torch, by an unpickler that
refuses every class (plain types only): a file that needs one reads as ``None``.

``memory_tensors.json`` (:class:`TensorRanges`) holds, taken in the same moment, the storage of
every parameter, gradient and optimizer state of the rank as ``[address, bytes, term]``, where
the term is the estimate's (``weights``, ``gradients``, ``optimizer_states``, or the LoRA term
for an adapter's parameters, gradients and states), so blocks are classed by tensor identity.
Pure, stdlib only.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SNAPSHOT_FILE",
    "TENSORS_FILE",
    "TensorRanges",
    "read_snapshot",
    "write_snapshot",
    "read_tensor_ranges",
    "write_tensor_ranges",
]

SNAPSHOT_FILE = "memory_snapshot.pickle"
TENSORS_FILE = "memory_tensors.json"


class _PlainUnpickler(pickle.Unpickler):
    """Plain types only: a snapshot is dicts, lists, tuples, strings and numbers."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"not a plain snapshot: it names {module}.{name}")


def read_snapshot(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The snapshot (``segments`` a list); ``None`` when the file is missing, unreadable, needs a
    class or holds no snapshot."""
    try:
        data = Path(path).read_bytes()
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError):
        return None
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        return None
    return snap


def write_snapshot(path: str | os.PathLike[str], snapshot: dict[str, Any]) -> None:
    """Pickle ``snapshot`` (torch's format, plain types) as torch's ``_dump_snapshot`` does."""
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(snapshot, f)
    os.replace(tmp, path)


@dataclass(frozen=True)
class TensorRanges:
    """Storages of the rank's tensors at the snapshot: ``(address, bytes, term)`` sorted by
    address; ``device``: the card they are on; ``t``: when they were taken."""

    ranges: tuple[tuple[int, int, str], ...]
    device: str | None = None
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "t": self.t, "ranges": [list(r) for r in self.ranges]}

    @classmethod
    def from_dict(cls, raw: Any) -> TensorRanges | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("ranges"), list):
            return None
        out = []
        for r in raw["ranges"]:
            ok = isinstance(r, list) and len(r) == 3
            if ok and all(isinstance(x, int) and not isinstance(x, bool) for x in r[:2]) and isinstance(r[2], str):
                out.append((int(r[0]), int(r[1]), str(r[2])))
        dev, t = raw.get("device"), raw.get("t")
        return cls(
            tuple(sorted(out)),
            dev if isinstance(dev, str) else None,
            float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None,
        )


def read_tensor_ranges(path: str | os.PathLike[str]) -> TensorRanges | None:
    try:
        return TensorRanges.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, RecursionError):
        return None


def write_tensor_ranges(path: str | os.PathLike[str], ranges: TensorRanges) -> None:
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(ranges.to_dict()))
    os.replace(tmp, path)
