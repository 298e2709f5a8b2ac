"""How long a sequence the model's positions cover, and what happens past them.

``max_seq_len`` above the model's ``max_position_embeddings`` (a YAML's ``cutoff_len: 2048`` on a
model built for 256) trains on positions the model never saw. Rotary and ALiBi models run there
(the quality may drop): :func:`position_warning` says so before launch. Models with a learned
table of absolute positions cannot: the lookup is out of range, so :func:`check_positions`
refuses before launch. ``rope_scaling`` with a ``factor`` extends the covered length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from fttui.core.base.errors import EstimateError, ProfileError

if TYPE_CHECKING:
    from fttui.core.models.numbers import ModelTable

__all__ = ["LEARNED_POSITIONS", "Positions", "positions", "check_positions", "position_warning"]

#: model types whose positions are a learned table (an index past it fails)
LEARNED_POSITIONS = frozenset({"gpt2", "gpt_bigcode", "gpt_neo", "opt", "biogpt", "bert", "roberta"})
_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
#: the key a model type reads its length from, where it is not the first of _KEYS it has
_OWN_KEY = {"gpt2": "n_positions", "gpt_bigcode": "n_positions", "chatglm": "seq_length"}


class _Data(Protocol):
    @property
    def max_seq_len(self) -> int: ...


class Sequences(Protocol):
    """What the checks read of a resolved profile (``fttui.core.profiles.typed.Profile``, above
    this package): its ``[model]`` table and ``data.max_seq_len``."""

    @property
    def model(self) -> ModelTable: ...
    @property
    def data(self) -> _Data: ...


class Positions(NamedTuple):
    limit: int  # the longest sequence the positions cover (rope_scaling's factor included)
    key: str  # the config key it comes from
    model_type: str
    learned: bool


def positions(model: ModelTable) -> Positions | None:
    """The positions of a resolved ``[model]`` table's architecture; ``None`` when its numbers are
    not known here (no config.json, a hub model not in the cache) or give no length."""
    from fttui.core.models.numbers import model_numbers

    try:
        model_type, cfg, _ = model_numbers(model)
    except (EstimateError, OSError, ValueError):
        return None
    own = _OWN_KEY.get(model_type)
    for key in (own,) if own in cfg else _KEYS:
        try:
            n = int(cfg.get(key) or 0)
        except (TypeError, ValueError):
            continue
        if n > 0:
            scaling = cfg.get("rope_scaling")
            factor = scaling.get("factor") if isinstance(scaling, Mapping) else None
            if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
                n = int(n * factor)
            return Positions(n, key, model_type, model_type in LEARNED_POSITIONS)
    return None


def _over(resolved: Sequences) -> tuple[int, Positions] | None:
    try:
        n = int(resolved.data.max_seq_len or 0)
    except (TypeError, ValueError):
        return None
    pos = positions(resolved.model)
    return (n, pos) if pos is not None and n > pos.limit else None


def check_positions(resolved: Sequences, src: str) -> None:
    """ProfileError (one line) when ``data.max_seq_len`` is past a learned position table."""
    over = _over(resolved)
    if over is not None and over[1].learned:
        n, pos = over
        raise ProfileError(
            src,
            "data.max_seq_len",
            f"{n} is above the model's {pos.key} {pos.limit}: {pos.model_type} learns a table of "
            f"absolute positions and cannot run longer sequences",
            f"set data.max_seq_len to at most {pos.limit}",
        )


def position_warning(resolved: Sequences) -> str | None:
    """The warning for a ``data.max_seq_len`` past the positions of a model that can run there
    (rotary, ALiBi), else ``None``."""
    over = _over(resolved)
    if over is None or over[1].learned:
        return None
    n, pos = over
    return (
        f"data.max_seq_len {n} is above the model's {pos.key} {pos.limit} ({pos.model_type}): positions "
        f"past {pos.limit} were never trained (it runs; quality may drop); --set data.max_seq_len={pos.limit} "
        f"stays within them"
    )
