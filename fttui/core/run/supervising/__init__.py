"""Owning a live run: the supervisor (samples, folds, stall and fault handling, the summary
written once), the training's log writer, recovery of a run whose supervisor died, watching a
process fttui did not start, and reading a Trainer's printed log. It stops processes only through
:mod:`fttui.core.run.processes`.
"""
