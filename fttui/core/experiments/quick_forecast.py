"""The forecast without waiting: for a launch (the run's ``forecast`` event) and for the app's
picker, from the store's rows and the data's *cached* lengths; a data file ``fttui data`` has not
measured is never tokenised here: it is taken at ``max_seq_len`` per sample (the worst case), and
the forecast says so."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from fttui.core.experiments.forecast import Forecast, offload_bytes, profile_forecast, run_card
from fttui.core.profiles.typed import Profile

__all__ = ["quick_forecast", "launch_forecast", "worst_case", "NOT_MEASURED"]

NOT_MEASURED = "data lengths not measured: every sample at max_seq_len (`fttui data` measures them)"


def quick_forecast(profile: Profile, e: Any, rows: Iterable[Mapping[str, Any]], card: str) -> Forecast:
    """:func:`~fttui.core.experiments.forecast.profile_forecast` of ``profile`` (``e``: its memory
    estimate) from the cached lengths, else the worst case (said in ``mfu_source``); raises what
    the forecast cannot get past."""
    from fttui.core.experiments.datalens import NotCached

    rows = list(rows)
    try:
        return profile_forecast(profile, e.inputs, rows, card, tokenise=False, link_bytes=offload_bytes(e))
    except NotCached:
        worst = worst_case(profile)
        if worst is None:
            raise
        fc = profile_forecast(worst, e.inputs, rows, card, link_bytes=offload_bytes(e))
        return replace(fc, mfu_source=f"{fc.mfu_source}; {NOT_MEASURED}")


def launch_forecast(profile: Profile, card: str | None = None) -> dict[str, Any] | None:
    """The forecast a launch records (the ``forecast`` event: the run's first ETA, the row's
    ``forecast_s``; its ``memory``: the estimate's terms an out of memory is explained with,
    :func:`fttui.core.memory.oomterms.oom_terms`, with the probe's stored answer for the setup,
    :func:`fttui.core.experiments.probed.probe_answer`, kept when the time cannot be told); None for
    a command profile, a GPU profile of no known card rate (no time to tell) or when anything it
    needs is missing: a run is never held back by its forecast."""
    if profile.command.argv:
        return None
    memory: dict[str, Any] = {}
    try:
        from fttui.core.base import paths
        from fttui.core.memory import estimate
        from fttui.core.memory.oomterms import oom_terms
        from fttui.core.results.store import Store

        e = estimate(profile)
        memory = {"memory": oom_terms(profile, e)}  # what an out of memory is set against
        rows = []
        if paths.store_path().exists():  # reading never creates the store (bad input writes nothing)
            with Store() as store:
                rows = store.rows()
        from fttui.core.experiments.probed import probe_answer

        memory["memory"]["probe"] = probe_answer(profile, rows)  # the change that fits, when probed
        fc = quick_forecast(profile, e, rows, card or run_card(profile))
    except Exception as e:  # a forecast it cannot make is left out, never an error
        logging.getLogger("fttui.forecast").debug("no forecast at launch: %s", e)
        return memory or None
    if fc.run_seconds is None:  # no card rate: no first ETA rather than a made-up one
        return memory or None
    return {
        **memory,
        "run_seconds": fc.run_seconds,
        "step_seconds": fc.step_seconds,
        "warmup_seconds": fc.warmup_seconds,
        "steps": fc.steps,
        "calibrated": fc.calibrated,
        "mfu_source": fc.mfu_source,
    }


def worst_case(profile: Profile) -> Profile | None:
    """The profile as synthetic data of as many samples as its JSONL file has records (lines),
    every one ``max_seq_len`` long: the forecast's worst case when the lengths are not measured;
    None when the count is not cheap (not a JSONL file, or over 64 MiB)."""
    source, n = str(profile.data.source or ""), int(profile.data.num_samples or 0)
    if n <= 0:
        try:
            if not source.endswith(".jsonl") or os.path.getsize(source) > 64 * 1024 * 1024:
                return None
            with open(source, "rb") as f:
                n = sum(1 for line in f if line.strip())
        except OSError:
            return None
    return profile.with_settings({"data.source": "synthetic", "data.num_samples": n})
