"""fttui: a terminal tool to run and monitor LLM fine-tuning.

``fttui.report_start``, ``fttui.report_step``, ``fttui.report_end`` and ``fttui.API_VERSION``: the
public reporting API of :mod:`fttui.report` (any training loop reports its steps), imported at
their first use so that ``import fttui`` stays as light as it was.
"""

__version__ = "0.1.0"

_REPORT_NAMES = ("report_start", "report_step", "report_end", "API_VERSION")


def __getattr__(name: str):
    if name in _REPORT_NAMES:
        from fttui import report

        value = getattr(report, name)
        globals()[name] = value  # later accesses are plain attribute reads
        return value
    raise AttributeError(f"module 'fttui' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_REPORT_NAMES])
